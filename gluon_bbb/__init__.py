"""gluon-bbb: Bayes by Backprop (Blundell et al. 2015) for MNIST in functional MXNet NDArray code.

Importing the package loads no MXNet: a name is imported from its module when it is first used
(``from gluon_bbb import train``), and MXNet with the first module that needs it. The sweep's
own process and its Dask workers (``gluon_bbb.sweep``) run on ``errors``, ``files``, ``cli``,
``config``, ``network``, ``likelihood`` and ``rundir``, which need none.
"""
import importlib as _importlib
import os as _os
import sys as _sys

# MXNet reads these once, when it is first imported. Its operator tuning runs most elementwise
# kernels on one thread; switching it off and using every core made a training step 25%
# faster on 2 cores (bench/bench_train.py). A value the user has set is left alone.
_os.environ.setdefault("MXNET_USE_OPERATOR_TUNING", "0")
_os.environ.setdefault("OMP_NUM_THREADS", str(len(_os.sched_getaffinity(0))
                                              if hasattr(_os, "sched_getaffinity")
                                              else _os.cpu_count() or 1))

from .errors import (CheckpointError, ConfigError, ContextError, DataError,  # noqa: E402
                     DataNotFound, GluonBBBError, Interrupted, OutputError, ResourceError,
                     RunDirectoryBusy, TrainingDiverged)

__version__ = "0.1.0"

# the public names that need MXNet, and the module of each
_EXPORTS = {}
for _module, _names in {
        "checkpoint": "read_checkpoint save_checkpoint",
        "config": "Config",
        "context": "context_name parse_context",
        "data": "MNIST load_mnist read_idx resolve_data_dir",
        "model": "GaussianPrior ScaleMixturePrior combined_loss combined_loss_gradients "
                 "evaluate_accuracy gaussian_prior init_variational_params layer_param_shapes "
                 "log_gaussian log_softmax_likelihood lrt_net net prior_for sample_epsilons "
                 "scale_mixture_prior softplus transform_gaussian_samples transform_rhos",
        "likelihood": "Categorical Gaussian gaussian_log_likelihood parse_likelihood",
        "noise": "noise_for",
        "regression": "PROBLEMS fit_regression predict_regression regression_config "
                      "run_regression split_uncertainty",
        "prune": "prune_weights pruning_table signal_to_noise_ratio",
        "rundir": "RunDirectory load_checkpoint",
        "step": "TrainingStep",
        "train": "TrainResult kl_weights train",
        "uncertainty": "auroc expected_calibration_error negative_log_likelihood predict "
                       "predictive_entropy"}.items():
    _EXPORTS.update(dict.fromkeys(_names.split(), _module))


def require_mxnet():
    """Import MXNet; ImportError on one line where its library cannot be loaded (a CUDA build
    without the CUDA libraries), instead of the loader's OSError."""
    try:
        import mxnet
    except OSError as exc:  # libmxnet.so found, a library it links against not
        raise ImportError(
            "MXNet's library cannot be loaded: %s. A CUDA build of MXNet (mxnet-cu117) needs "
            "the CUDA 11 runtime, cuBLAS, cuDNN 8 and NCCL 2 on the library path; the CPU build "
            "(pip install mxnet==1.9.1) needs none" % exc) from None
    return mxnet


def exit_unless_mxnet_loads(prog):
    """For a command's first lines: ``prog: error: ...`` and exit status 2 where MXNet cannot
    be loaded, before anything imports it."""
    try:
        require_mxnet()
    except ImportError as exc:
        _sys.stderr.write("%s: error: %s\n" % (prog, exc))
        raise SystemExit(2)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    require_mxnet()
    value = getattr(_importlib.import_module("." + module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS) + ["CheckpointError", "ConfigError", "ContextError", "DataError",
                              "DataNotFound", "GluonBBBError", "Interrupted", "OutputError",
                              "ResourceError", "RunDirectoryBusy", "TrainingDiverged"]

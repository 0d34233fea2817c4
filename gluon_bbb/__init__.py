"""gluon-bbb: Bayes by Backprop (Blundell et al. 2015) for MNIST in functional MXNet NDArray code."""
import os as _os
import sys as _sys

# MXNet reads these once, when it is first imported. Its operator tuning runs most elementwise
# kernels on one thread; switching it off and using every core made a training step 25%
# faster on 2 cores (bench/bench_train.py). A value the user has set is left alone.
_os.environ.setdefault("MXNET_USE_OPERATOR_TUNING", "0")
_os.environ.setdefault("OMP_NUM_THREADS", str(len(_os.sched_getaffinity(0))
                                              if hasattr(_os, "sched_getaffinity")
                                              else _os.cpu_count() or 1))
try:
    import mxnet as _mxnet  # noqa: F401
except OSError as _exc:  # libmxnet.so found, a library it links against not
    _message = ("MXNet's library cannot be loaded: %s. A CUDA build of MXNet (mxnet-cu117) needs "
                "the CUDA 11 runtime, cuBLAS, cuDNN 8 and NCCL 2 on the library path; the CPU "
                "build (pip install mxnet==1.9.1) needs none" % _exc)
    # `python -m gluon_bbb.evaluate` imports this package before the tool's own error handling
    # runs; while Python locates the module, sys.argv[0] is "-m" (the scripts catch the
    # ImportError themselves).
    if _sys.argv[:1] == ["-m"]:
        # sys.orig_argv (Python 3.10+) names the module; on 3.8 and 3.9 Linux's record does
        _argv, _module = getattr(_sys, "orig_argv", None), __name__
        if _argv is None:
            try:
                with open("/proc/self/cmdline", "rb") as _f:
                    _argv = [_a.decode(errors="replace") for _a in _f.read().split(b"\0")]
            except OSError:
                _argv = []
        for _i, _arg in enumerate(_argv):
            if _arg.startswith("-m"):  # "-m module" or "-mmodule"
                _module = _arg[2:] or (_argv[_i + 1] if _i + 1 < len(_argv) else _module)
                break
        _sys.stderr.write("python -m %s: error: %s\n" % (_module, _message))
        raise SystemExit(2)
    raise ImportError(_message) from None
from .checkpoint import read_checkpoint, save_checkpoint
from .config import Config
from .context import context_name, parse_context
from .data import MNIST, load_mnist, read_idx, resolve_data_dir
from .errors import (CheckpointError, ConfigError, ContextError, DataError, DataNotFound,
                     GluonBBBError, Interrupted, OutputError, ResourceError, RunDirectoryBusy,
                     TrainingDiverged)
from .model import (GaussianPrior, ScaleMixturePrior, combined_loss, combined_loss_gradients,
                    evaluate_accuracy, gaussian_prior, init_variational_params, layer_param_shapes,
                    log_gaussian, log_softmax_likelihood, lrt_net, net, prior_for,
                    sample_epsilons, scale_mixture_prior, softplus, transform_gaussian_samples,
                    transform_rhos)
from .noise import noise_for
from .prune import prune_weights, pruning_table, signal_to_noise_ratio
from .rundir import RunDirectory, load_checkpoint
from .step import TrainingStep
from .train import TrainResult, kl_weights, train
from .uncertainty import (auroc, expected_calibration_error, negative_log_likelihood, predict,
                          predictive_entropy)

__version__ = "0.1.0"

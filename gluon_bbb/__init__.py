"""gluon-bbb: Bayes by Backprop (Blundell et al. 2015) for MNIST in functional MXNet NDArray
code."""
import contextlib as _contextlib
import importlib as _importlib
import importlib.util  # noqa: F401 (_importlib.util)
import os as _os
import sys as _sys

# MXNet reads these once, at its import; a value the user has set is left alone
_os.environ.setdefault("MXNET_USE_OPERATOR_TUNING", "0")
def cpus_granted(root="/"):
    """The cores this process may use: those its affinity allows, fewer where its cgroup's CPU
    quota (v2's ``cpu.max``, v1's ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``) grants less
    time than that: a container of 1 CPU on a machine of 16 runs best on one thread, not 16
    that the quota throttles in turn."""
    cores = (len(_os.sched_getaffinity(0)) if hasattr(_os, "sched_getaffinity")
             else _os.cpu_count() or 1)
    try:
        with open(_os.path.join(root, "proc/self/cgroup")) as f:
            lines = f.read().splitlines()
    except OSError:
        return cores
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # cgroup v2: "QUOTA PERIOD" in one file
            files = [_os.path.join(root, "sys/fs/cgroup", path.lstrip("/"), "cpu.max")]
        elif "cpu" in controllers.split(","):  # v1: one number in each of two files
            directory = _os.path.join(root, "sys/fs/cgroup", controllers, path.lstrip("/"))
            files = [_os.path.join(directory, name)
                     for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us")]
        else:
            continue
        try:
            words = []
            for name in files:
                with open(name) as f:
                    words += f.read().split()[:2]
            quota, period = words[0], int(words[-1])
            if quota not in ("max", "-1") and period > 0 and int(quota) > 0:
                cores = min(cores, max(1, -(-int(quota) // period)))
        except (OSError, ValueError, IndexError):
            continue
    return cores


# a count the user sets holds for every step; the package's follows the cores other processes
# leave free (learning/threads.py)
THREADS_SET_BY_USER = "OMP_NUM_THREADS" in _os.environ
_os.environ.setdefault("OMP_NUM_THREADS", str(cpus_granted()))
# MXNet's cache of oneDNN primitives keeps a convolution on the team it was made with, whatever
# the team later is: a team that follows has them made anew at each call (oneDNN's own cache,
# keyed by the team, makes that cheap), to the same bits
if not THREADS_SET_BY_USER:
    _os.environ.setdefault("MXNET_MKLDNN_CACHE_NUM", "0")
# every operator in the main thread, beside the C kernels' OpenMP team, not on an engine
# thread with a team of its own (MXNet reads it at its first operator)
_ENGINE_CHOSEN_HERE = "MXNET_ENGINE_TYPE" not in _os.environ
_os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")

from .errors import (CheckpointError, ConfigError, ContextError, DataError,  # noqa: E402
                     DataNotFound, GluonBBBError, Interrupted, OutputError, ResourceError,
                     RunDirectoryBusy, TrainingDiverged)

__version__ = "0.1.0"

# the public names that need MXNet, and the module of each
_EXPORTS = {}
for _module, _names in {
        "learning.config": "Config",
        "learning.context": "context_name parse_context",
        "data": "MNIST load_mnist read_idx resolve_data_dir",
        "tutorial": "combined_loss evaluate_accuracy init_variational_params layer_param_shapes "
                    "log_gaussian log_softmax_likelihood lrt_net net sample_epsilons sampled_kl "
                    "softplus transform_gaussian_samples transform_rhos",
        "family.priors": "GatedPrior GaussianPrior LogUniformPrior NoPrior Prior "
                         "ScaleMixturePrior gaussian_prior scale_mixture_prior",
        "family.estimators": "Estimator",
        "family.parametrizations": "LogVariance Parametrization Softplus",
        "family.likelihoods": "Categorical Gaussian gaussian_log_likelihood parse_likelihood",
        "learning.noise": "noise_for",
        "toy_problems": "PROBLEMS fit_regression predict_regression regression_config "
                        "run_regression split_uncertainty",
        "analysis.snr": "prune_weights pruning_table signal_to_noise_ratio",
        "learning.rundir": "RunDirectory load_checkpoint read_checkpoint save_checkpoint",
        "learning.step": "TrainingStep combined_loss_gradients",
        "learning.loop": "TrainResult kl_weights train",
        "analysis.uncertainty": "auroc expected_calibration_error negative_log_likelihood "
                                "predict predictive_entropy"}.items():
    _EXPORTS.update(dict.fromkeys(_names.split(), _module))


# what MXNet's engine writes to stderr as it starts where MXNET_ENGINE_TYPE is set
_ENGINE_LINE = b"MXNet start using engine: "
_engine_started = False


def require_mxnet():
    """Import MXNet; ImportError on one line where its library cannot be loaded (a CUDA build
    without the CUDA libraries), instead of the loader's OSError."""
    global _engine_started
    import warnings
    try:
        with warnings.catch_warnings():
            # MXNet's import reads NumPy names deprecated since 1.20 (numpy.bool): its own
            # warnings, not the user's to act on
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            import mxnet
    except OSError as exc:  # libmxnet.so found, a library it links against not
        raise ImportError(
            "MXNet's library cannot be loaded: %s. A CUDA build of MXNet (mxnet-cu117) needs "
            "the CUDA 11 runtime, cuBLAS, cuDNN 8 and NCCL 2 on the library path; the CPU build "
            "(pip install mxnet==1.9.1) needs none" % exc) from None
    if not _engine_started:
        with _engine_line_dropped():
            mxnet.nd.zeros(1).wait_to_read()
        _engine_started = True
    return mxnet


@_contextlib.contextmanager
def _engine_line_dropped():
    """Hold what is written to file descriptor 2 (MXNet writes from C++) and write it back
    after, less the engine's line."""
    import tempfile
    try:
        stderr = _os.dup(2)
    except OSError:  # descriptor 2 closed: nothing to hold
        yield
        return
    with tempfile.TemporaryFile() as held:
        _os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            _os.dup2(stderr, 2)
            _os.close(stderr)
            held.seek(0)
            rest = b"".join(line for line in held.read().splitlines(keepends=True)
                            if _ENGINE_LINE not in line)
            if rest:
                _os.write(2, rest)


def mxnet_load_error():
    """None where MXNet loads, else why not, in one line (what a command prints before anything
    imports it)."""
    try:
        require_mxnet()
    except ImportError as exc:
        return str(exc)
    return None


def _register_ivon(mxnet):
    """Name IVON (``learning/ivon.py``) in MXNet's optimizers, so that ``gluon.Trainer(params,
    "ivon", ...)`` finds it with the package imported: a constructor that imports the module
    on first use (whose class then registers itself)."""
    def ivon(**kwargs):
        return _importlib.import_module(".learning.ivon", __name__).IVON(**kwargs)
    mxnet.optimizer.Optimizer.opt_registry.setdefault("ivon", ivon)


class _AfterMXNetImport:
    """A finder that lets MXNet's own import run, then registers IVON in it: the package is
    often imported before MXNet, and loads none itself."""

    def find_spec(self, name, path=None, target=None):
        if name != "mxnet":
            return None
        _sys.meta_path.remove(self)
        spec = _importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _register_ivon(module)
        spec.loader.exec_module = exec_module
        return spec


if _sys.modules.get("mxnet") is not None:
    _register_ivon(_sys.modules["mxnet"])
elif "mxnet" not in _sys.modules:  # (None there: a program that keeps MXNet out)
    _sys.meta_path.insert(0, _AfterMXNetImport())


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

import os
import signal

# The tests run the commands in this process as from a terminal: SIGINT raises
# KeyboardInterrupt, also where the test run was started in the background (``pytest &``, a CI
# runner: SIGINT ignored, which the commands would keep ignoring, as they do for a user)
signal.signal(signal.SIGINT, signal.default_int_handler)

# The tests read MNIST from $GLUON_BBB_DATA, else from where the training command downloads it
# (~/.mxnet/datasets/mnist): a user's clone needs no variable once `python train_mnist.py` has
# run. The directory found is given to every command the tests start.
_DOWNLOADED = os.path.expanduser(os.path.join("~", ".mxnet", "datasets", "mnist"))
if not os.environ.get("GLUON_BBB_DATA") and os.path.isdir(_DOWNLOADED):
    os.environ["GLUON_BBB_DATA"] = _DOWNLOADED
_NO_MNIST = ("no MNIST for the tests: set GLUON_BBB_DATA to a directory holding the four MNIST "
             "files, or run `python train_mnist.py` once, which downloads them to %s"
             % _DOWNLOADED)

# pytest-xdist's workers share the cores: each worker, and every command it starts
# (commands.user_env keeps this), runs its share of OpenMP threads, since threads beyond the
# cores spin against each other and slow every process down. Without workers the tests hold
# the team at the cores granted: a team that follows the load (learning/threads.py) trains
# other bits, and runs compared bit for bit (a resume against the whole run) must train on one
# team whatever else the machine runs; the tests of the following set their own.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0))
                                           // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
else:
    os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))

import numpy as np  # noqa: E402
import gluon_bbb  # noqa: E402  (before MXNet: its thread and engine settings are read as it loads)
mx = gluon_bbb.require_mxnet()
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The property tests' examples: a bounded number, so the fast tier stays within its two
# minutes (GLUON_BBB_EXAMPLES raises it for a longer search); no deadline, since a first
# example pays for MXNet's operator setup.
settings.register_profile("gluon_bbb", max_examples=int(os.environ.get("GLUON_BBB_EXAMPLES", 40)),
                          deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
settings.load_profile("gluon_bbb")

# A context distinct from cpu(0): an array created without ctx= shows up as cpu(0).
CTX = mx.cpu(1)


# The MNIST-format dataset the tests read (the full one is the learning checks'): MNIST's first
# 6,000 training and 1,000 test images
SMALL_MNIST = {"train": 6000, "t10k": 1000}


def shared_directory(tmp_path_factory):
    """The test run's temporary directory, which its pytest-xdist workers' own are in."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def mnist_dirs(tmp_path_factory):
    """(full, small): $GLUON_BBB_DATA's four files uncompressed, and the dataset of their
    first ``SMALL_MNIST`` images, made once for every worker of the run (in the directory
    pytest-xdist's workers share); $GLUON_BBB_DATA then names the small one for every test and
    the commands it runs: a command reads it in a hundredth of a second, and scores a test set
    of 1,000 images."""
    import fcntl
    import gzip
    import shutil
    import struct
    source = mnist_dir()
    if not source:
        return None, None
    from gluon_bbb.data import IDX_FILES, find_idx_file
    shared = shared_directory(tmp_path_factory)
    full, small = shared / "mnist", shared / "mnist-small"
    with open(str(shared / "mnist.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not small.exists():
            for made in (full, small):
                shutil.rmtree(str(made) + ".partial", ignore_errors=True)
                os.makedirs(str(made) + ".partial")
            for stem in IDX_FILES.values():
                path = find_idx_file(source, stem)
                if path is None:  # the tests that need MNIST say what is missing
                    return None, None
                with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                    content = f.read()
                with open(os.path.join(str(full) + ".partial", stem), "wb") as f:
                    f.write(content)
                ndim, count = content[3], SMALL_MNIST[stem.split("-")[0]]
                shape = (count,) + struct.unpack(">%dI" % ndim, content[4:4 + 4 * ndim])[1:]
                size = int(np.prod(shape))
                with open(os.path.join(str(small) + ".partial", stem), "wb") as f:
                    f.write(content[:4] + struct.pack(">%dI" % ndim, *shape)
                            + content[4 + 4 * ndim:4 + 4 * ndim + size])
            for made in (full, small):
                os.rename(str(made) + ".partial", str(made))
    os.environ["GLUON_BBB_DATA"] = str(small)
    return str(full), str(small)


@pytest.fixture
def ctx():
    return CTX


def mnist_dir():
    return os.environ.get("GLUON_BBB_DATA")


@pytest.fixture(scope="session")
def mnist(mnist_dirs):
    """The small dataset of real MNIST images (``SMALL_MNIST``)."""
    from gluon_bbb import load_mnist
    if not mnist_dirs[1]:
        pytest.fail(_NO_MNIST)
    return load_mnist(mnist_dirs[1])


@pytest.fixture(scope="session")
def full_mnist_dir(mnist_dirs):
    """The directory of the whole of MNIST (uncompressed), which the learning checks read."""
    if not mnist_dirs[0]:
        pytest.fail(_NO_MNIST)
    return mnist_dirs[0]


@pytest.fixture(scope="session")
def full_mnist(full_mnist_dir):
    """All of MNIST: $GLUON_BBB_DATA's files (CI sets it to ../shared/mnist)."""
    from gluon_bbb import load_mnist
    return load_mnist(full_mnist_dir)


@pytest.fixture
def native_kernels():
    """The native library; tests that need it skip where it is not built, except where
    $GLUON_BBB_REQUIRE_NATIVE is set (.ci/run sets it: CI builds it, so it must be there)."""
    from gluon_bbb.native import library as native
    if not native.available():
        if os.environ.get("GLUON_BBB_REQUIRE_NATIVE"):
            pytest.fail("GLUON_BBB_REQUIRE_NATIVE is set but %s" % native.unavailable_reason())
        pytest.skip(native.unavailable_reason())
    return native


@pytest.fixture
def native_operators():
    """The native MXNet operators (``native/operators.py``), under the same rule as
    ``native_kernels``."""
    from gluon_bbb.native import operators
    if not operators.available():
        if os.environ.get("GLUON_BBB_REQUIRE_NATIVE"):
            pytest.fail("GLUON_BBB_REQUIRE_NATIVE is set but %s" % operators.unavailable_reason())
        pytest.skip(operators.unavailable_reason())
    return operators


# The tests' shared runs, each trained through the training command once per test run where a
# test first asks for it (by the first pytest-xdist worker to ask, the others waiting for it),
# copied into each worker's own directory and then only read: a test that changes one copies it
# (``runs.copy``). A few hundred images and units: what they show is what a run's
# files, flags and readers do, not what it learns (the slow tier's real trainings show that).
SMALL = ["--train-size", "256", "--num-hidden-units", "8", "--test-samples", "2", "--seed", "1"]
RUNS = {
    # Bayes by Backprop's MLP after 2 epochs of Adam on 2,000 images: 0.85 test accuracy and 0.90
    # on its 1,000 validation images (measured, seed 0): a run compress can prune by its
    # validation error
    "mlp": ["--train-size", "2000", "--num-hidden-units", "50", "--epochs", "2", "--seed", "0",
            "--validation", "1000", "--optimizer", "adam", "--learning-rate", "3e-3",
            "--rho-offset", "-5", "--test-samples", "2"],
    # the smallest run, without validation images (SGD, the tutorial's settings)
    "small": ["--epochs", "1"] + SMALL,
    # Adam at 0.1 overshoots: validation accuracy 0.211, 0.254, 0.159, 0.184 over 4 epochs
    # (test accuracy 0.210, 0.236, 0.158, 0.187; measured), so its best epoch, 2, is not its last
    "overshooting": ["--train-size", "256", "--num-hidden-units", "16", "--epochs", "4",
                     "--seed", "0", "--validation", "1000", "--optimizer", "adam",
                     "--learning-rate", "0.1", "--test-samples", "0"],
    "lenet": ["--network", "conv:4:5,relu,pool:2,dense:16,relu,dense:10", "--epochs", "1",
              "--validation", "1000"] + SMALL,
    "ivon": ["--model", "ivon", "--epochs", "1", "--validation", "1000"] + SMALL,
    "mcdropout": ["--model", "mcdropout", "--epochs", "1"] + SMALL,
    "deterministic": ["--model", "deterministic", "--epochs", "1", "--test-samples", "0",
                      "--seed", "1"] + SMALL[:4],
    # sparse variational dropout, removing what its prior switches off
    # its prior switches 9% of the weights off (measured)
    "sparse": ["--prior", "log-uniform", "--parametrization", "log-variance", "--estimator",
               "lrt", "--remove-switched-off", "--optimizer", "adam", "--rho-offset", "-10",
               "--mu-scale", "0.05", "--epochs", "2", "--validation", "1000"] + SMALL,
}


class Runs:
    """``runs[kind]``: the run directory of ``RUNS[kind]``, this worker's copy of the run trained
    once in ``shared`` (the directory the workers share) on first use."""

    def __init__(self, root, shared):
        self.root, self.shared, self.made = root, shared, {}

    def __getitem__(self, kind):
        if kind not in self.made:
            import fcntl
            import shutil
            from commands import TRAIN, run
            trained, out = self.shared / kind, self.root / kind
            with open(str(self.shared / (kind + ".lock")), "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not (self.shared / (kind + ".done")).exists():
                    shutil.rmtree(str(trained), ignore_errors=True)
                    proc = run(TRAIN, "--out", trained, *RUNS[kind])
                    assert proc.returncode == 0, proc.stderr
                    (self.shared / (kind + ".done")).touch()
            shutil.copytree(str(trained), str(out))
            self.made[kind] = out
        return self.made[kind]

    def copy(self, kind, directory, name=None):
        """A copy of ``runs[kind]`` in ``directory`` (as ``name``, default the kind's)."""
        import shutil
        target = directory / (name or kind)
        shutil.copytree(self[kind], target)
        return target


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    shared = shared_directory(tmp_path_factory) / "runs"
    shared.mkdir(exist_ok=True)
    return Runs(tmp_path_factory.mktemp("runs"), shared)

import os

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


@pytest.fixture
def ctx():
    return CTX


def mnist_dir():
    return os.environ.get("GLUON_BBB_DATA")


@pytest.fixture(scope="session")
def mnist():
    """The real MNIST files named by $GLUON_BBB_DATA (CI sets it to ../shared/mnist)."""
    from gluon_bbb import load_mnist
    directory = mnist_dir()
    if not directory:
        pytest.fail(_NO_MNIST)
    return load_mnist(directory)


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


# Adam at 0.03 on 1000 images overshoots: validation accuracy 0.602, 0.722, 0.802, 0.790,
# 0.763 over the 5 epochs (measured), so the best epoch, 3, is not the last.
OVERSHOOTING = dict(train_size=1000, epochs=5, seed=0, validation=10000, num_hidden_units=50,
                    optimizer="adam", learning_rate=0.03)


@pytest.fixture(scope="module")
def overshooting_run(tmp_path_factory, mnist):
    """(run directory, history) of a run with a validation set whose best epoch is not its
    last (``OVERSHOOTING``)."""
    from gluon_bbb import Config, train
    run_dir = str(tmp_path_factory.mktemp("overshooting"))
    result = train(Config.from_dict(OVERSHOOTING), mnist, CTX, out_dir=run_dir,
                   log=lambda line: None)
    return run_dir, result.history


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, mnist):
    """A short run with a validation set, written as the training command writes it."""
    from gluon_bbb import Config, train
    run_dir = str(tmp_path_factory.mktemp("compress") / "run")
    train(Config(train_size=5000, epochs=2, seed=0, num_hidden_units=100, validation=2000,
                 optimizer="adam", rho_offset=-5.0), mnist, mx.cpu(), out_dir=run_dir,
          log=lambda line: None)
    return run_dir

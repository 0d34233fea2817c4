import os

import mxnet as mx
import pytest

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
        pytest.fail("set GLUON_BBB_DATA to the directory holding the MNIST IDX files")
    return load_mnist(directory)


@pytest.fixture
def native_kernels():
    """The native library; tests that need it skip where it is not built, except where
    $GLUON_BBB_REQUIRE_NATIVE is set (.ci/run sets it: CI builds it, so it must be there)."""
    from gluon_bbb import native
    if not native.available():
        if os.environ.get("GLUON_BBB_REQUIRE_NATIVE"):
            pytest.fail("GLUON_BBB_REQUIRE_NATIVE is set but %s" % native.unavailable_reason())
        pytest.skip(native.unavailable_reason())
    return native

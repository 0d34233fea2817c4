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

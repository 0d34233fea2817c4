"""The elementwise helpers every formula shares, each written once for any operator set ``F``
(MXNet's ``nd`` by default, or ``sym``): the constants, ``softplus`` and its derivative
``sigmoid`` (rho floored as the C kernels floor it), the log density of a Gaussian, and the
sum of all entries."""
import math

from ..errors import require_positive  # noqa: F401 (where a user's prior finds it)


LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# rho is floored here in softplus and sigmoid, as in the C kernels (_fused.c): sigma bottoms
# out at softplus(-80) = 1.8e-35, so log sigma and 1/sigma stay finite for any rho
SOFTPLUS_FLOOR = -80.0
# added to every variance the local reparametrization takes the square root of: a unit
# whose inputs and bias noise are all 0 has variance 0, where sqrt's gradient is infinite
LRT_VARIANCE_FLOOR = 1e-8


def operators(F=None):
    """``F``, or MXNet's NDArray operators where none is given."""
    if F is None:
        from mxnet import nd as F
    return F


def softplus(x, F=None):
    """log(1 + exp(x)) elementwise, with x floored at ``SOFTPLUS_FLOOR`` as in the C kernels:
    relu(x) - log1p(-sigmoid(-|x|)), exact in both tails, no overflow for large x."""
    F = operators(F)
    x = F.maximum(x, SOFTPLUS_FLOOR)
    positive_part = F.relu(x)
    return positive_part - F.log1p(-sigmoid(x - 2.0 * positive_part, F))


def sigmoid(x, F=None):
    """1 / (1 + exp(-x)) elementwise, the derivative of ``softplus``."""
    return operators(F).Activation(x, act_type="sigmoid")


def total(x, F=None):
    """The sum of all entries of ``x``, shape (1,), as a BLAS dot with ones (``nd.sum`` reduces
    on one thread: docs/PERFORMANCE.md)."""
    F = operators(F)
    flat = x.reshape((-1,))
    return F.dot(flat, F.ones_like(flat))


def log_gaussian(x, mu, sigma, F=None):
    """Elementwise log N(x | mu, sigma^2); mu and sigma broadcast against x."""
    return -LOG_SQRT_2PI - operators(F).log(sigma) - (x - mu) ** 2 / (2.0 * sigma ** 2)

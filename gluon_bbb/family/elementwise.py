"""The elementwise helpers every formula shares, each written once for any operator set ``F``
(MXNet's ``nd`` by default, or ``sym``): the constants, ``softplus`` and its derivative
``sigmoid`` (rho floored as the C kernels floor it), the log density of a Gaussian, and the
sum of all entries."""
import math

from ..errors import ConfigError, is_real

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# rho is floored here in softplus and sigmoid, as in the C kernels (_fused.c): sigma bottoms
# out at softplus(-80) = 1.8e-35, so log sigma and 1/sigma stay finite for any rho
SOFTPLUS_FLOOR = -80.0
# added to every variance the local reparametrization takes the square root of: a unit
# whose inputs and bias noise are all 0 has variance 0, where sqrt's gradient is infinite
LRT_VARIANCE_FLOOR = 1e-8
# float32's smallest normal number and its largest (numpy.finfo(numpy.float32)): parameters and
# their updates are float32, where a positive setting outside is 0 or infinity
FLOAT32_TINY = 1.1754943508222875e-38
FLOAT32_MAX = 3.4028234663852886e38


def require_positive(field, value):
    """``value``; ConfigError naming ``field`` unless it is a positive float32 normal number."""
    if not (is_real(value) and FLOAT32_TINY <= value <= FLOAT32_MAX):
        raise ConfigError(field, value, "a finite number > 0 (from %.3g to %.3g: float32's "
                          "normal numbers)" % (FLOAT32_TINY, FLOAT32_MAX))
    return value


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

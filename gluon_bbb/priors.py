"""The priors P(w) over every weight: a Gaussian and the paper's scale mixture of two.

A prior is an object that owns its config.json name, its hyper-parameters (read from a
``Config`` by ``from_config``), its log density and gradient on NDArrays (the ndarray backend and
the tutorial's ``combined_loss`` take it as ``log_prior``), the arguments the C kernels take for
it, and whether its KL divergence has a closed form. Called on an array it gives the summed log
density, shape (1,).

Like ``modes.py`` this module imports no MXNet when imported (a config is checked where MXNet is
not loaded); the density's operators come with the first call.
"""
import math

from .elementwise import LOG_SQRT_2PI, sigmoid, softplus, total
from .errors import ConfigError
# what the C kernels call each prior's density (_fused.c)
GAUSSIAN_KERNEL, SCALE_MIXTURE_KERNEL = 0, 1


def _nd():
    from mxnet import nd
    return nd


class GaussianPrior:
    """P(w) = N(w | 0, sigma_p^2) for every weight."""
    name = "gaussian"
    has_closed_form_kl = True

    def __init__(self, sigma_p=1.0):
        self.sigma_p = sigma_p

    @classmethod
    def from_config(cls, config):
        return cls(config.sigma_p)

    def __call__(self, x):
        flat = x.reshape((-1,))
        return (_nd().dot(flat, flat) * (-0.5 / self.sigma_p ** 2)
                - x.size * (LOG_SQRT_2PI + math.log(self.sigma_p)))

    def log_density_and_gradient(self, x):
        """(the summed log density (1,), elementwise d log P / dx)."""
        return self(x), x * (-1.0 / self.sigma_p ** 2)

    def closed_form_kl(self, mu, sigma):
        """KL(N(mu, sigma^2) || N(0, sigma_p^2)) elementwise, with its derivatives with respect
        to mu and sigma: (log(sigma_p / sigma) + (sigma^2 + mu^2) / (2 sigma_p^2) - 1/2,
        mu / sigma_p^2, sigma / sigma_p^2 - 1 / sigma)."""
        nd = _nd()
        scale = 1.0 / self.sigma_p ** 2
        value = (nd.square(sigma) + nd.square(mu)) * (0.5 * scale) - nd.log(sigma) \
            + (math.log(self.sigma_p) - 0.5)
        return value, mu * scale, sigma * scale - 1.0 / sigma

    def forward_closed_form_kl(self, mu, sigma):
        """KL(N(0, sigma_p^2) || N(mu, sigma^2)) elementwise, with its derivatives with respect
        to mu and sigma: (log(sigma / sigma_p) + (sigma_p^2 + mu^2) / (2 sigma^2) - 1/2,
        mu / sigma^2, 1 / sigma - (sigma_p^2 + mu^2) / sigma^3)."""
        nd = _nd()
        spread = self.sigma_p ** 2 + nd.square(mu)
        inverse_variance = 1.0 / nd.square(sigma)
        value = nd.log(sigma) + spread * inverse_variance * 0.5 - (math.log(self.sigma_p) + 0.5)
        return value, mu * inverse_variance, 1.0 / sigma - spread * inverse_variance / sigma

    # standard normals one sample of the prior takes per weight
    sample_normals = 1

    def sample(self, normals, size):
        """``size`` weights drawn from the prior, from ``size * sample_normals`` standard
        normals."""
        return normals[:size] * self.sigma_p

    def kernel_args(self):
        """(density, pi, sigma1, sigma2) as ``bbb_kl_gradients`` takes them."""
        return GAUSSIAN_KERNEL, 0.0, self.sigma_p, 0.0


class ScaleMixturePrior:
    """P(w) = pi N(w | 0, sigma_p1^2) + (1 - pi) N(w | 0, sigma_p2^2), 0 < pi < 1.

    With a, b the log densities of the two weighted components and m = max(a, b),
    log P = m + softplus(min(a, b) - m): finite for any finite x (``softplus`` is stable in
    both tails), where the tutorial's log(pi N1 + (1-pi) N2) gives log(0) once both densities
    underflow (|x| ~ 15). The first component's share of the density is sigmoid(a - b).
    """
    name = "scale_mixture"
    has_closed_form_kl = False

    def __init__(self, pi=0.25, sigma_p1=0.75, sigma_p2=0.1):
        if not 0.0 < pi < 1.0:
            raise ValueError("a scale mixture needs 0 < pi < 1 (from_config turns pi = 0 or 1 "
                             "into its one Gaussian), got %r" % (pi,))
        self.pi, self.sigma_p1, self.sigma_p2 = pi, sigma_p1, sigma_p2

    @classmethod
    def from_config(cls, config):
        """The config's mixture; pi = 1 or 0 is its one remaining Gaussian."""
        if config.pi in (0.0, 1.0):
            return GaussianPrior(config.sigma_p1 if config.pi == 1.0 else config.sigma_p2)
        return cls(config.pi, config.sigma_p1, config.sigma_p2)

    def __call__(self, x):
        return self.log_density_and_gradient(x, gradient=False)[0]

    def log_density_and_gradient(self, x, gradient=True):
        """(the summed log density (1,), elementwise d log P / dx or None), where
        d log P / dx = -x (share1 / s1^2 + share2 / s2^2)."""
        nd = _nd()
        x2 = nd.square(x)
        k1, k2 = 0.5 / self.sigma_p1 ** 2, 0.5 / self.sigma_p2 ** 2
        log_first = (math.log(self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p1)) - k1 * x2
        log_second = (math.log1p(-self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p2)) - k2 * x2
        larger = nd.maximum(log_first, log_second)
        log_density = total(larger + softplus(nd.minimum(log_first, log_second) - larger))
        if not gradient:
            return log_density, None
        # a - b from x^2 directly (not as a difference of two large numbers), and both shares
        # from it: 1 - share1 would lose all float32 precision where share1 is near 1
        log_ratio = (math.log(self.pi / (1.0 - self.pi)) + math.log(self.sigma_p2 / self.sigma_p1)
                     + (k2 - k1) * x2)
        return log_density, x * -(sigmoid(log_ratio) * (2.0 * k1)
                                  + sigmoid(-log_ratio) * (2.0 * k2))

    sample_normals = 2

    def sample(self, normals, size):
        """A normal scaled by sigma_p1 where a second normal falls below the pi-quantile
        (probability pi), by sigma_p2 otherwise."""
        import statistics
        first = normals[size:2 * size] < statistics.NormalDist().inv_cdf(self.pi)
        return normals[:size] * (first * (self.sigma_p1 - self.sigma_p2) + self.sigma_p2)

    def kernel_args(self):
        return SCALE_MIXTURE_KERNEL, self.pi, self.sigma_p1, self.sigma_p2


PRIORS = {prior.name: prior for prior in (GaussianPrior, ScaleMixturePrior)}


def prior_kind(name):
    """The prior class config.json's ``prior`` names (``scale-mixture`` spelt either way)."""
    prior = PRIORS.get(str(name).replace("-", "_"))
    if prior is None:
        raise ConfigError("prior", name, "one of %s" % ", ".join(PRIORS))
    return prior


def prior_for(config):
    """The config's prior object (a scale mixture with pi = 1 or 0 is its one Gaussian)."""
    return prior_kind(config.prior).from_config(config)


def gaussian_prior(x, sigma_p=1.0):
    """Summed log density of N(0, sigma_p^2) over all elements of x; shape (1,)."""
    return GaussianPrior(sigma_p)(x)


def scale_mixture_prior(x, pi=0.25, sigma_p1=0.75, sigma_p2=0.1):
    """Summed log density of pi N(0, sigma_p1^2) + (1 - pi) N(0, sigma_p2^2) over x; shape (1,).
    pi = 0 or 1 is the remaining Gaussian."""
    if pi in (0.0, 1.0):
        return gaussian_prior(x, sigma_p1 if pi == 1.0 else sigma_p2)
    return ScaleMixturePrior(pi, sigma_p1, sigma_p2)(x)

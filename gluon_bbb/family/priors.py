"""The priors P(w) over every weight: the documented base ``Prior``, a user's own prior's
parent, the built-in Gaussian, the paper's scale mixture of two, sparse variational dropout's
log-uniform prior and ``NoPrior`` (a KL term of 0, for weights under gates), and
``GatedPrior``, which puts a network's gates under a prior of their own (group sparsity)."""
import inspect
import math

from ..errors import check_proportion, require_positive
from ..native import table
from .elementwise import LOG_SQRT_2PI, operators, sigmoid, softplus, total
from .choices import Registry

KNOWN = Registry("prior")


def describe_prior(name, settings):
    """A prior in words, ``laplace(scale=0.1)``, from its name and settings."""
    return "%s(%s)" % (name, ", ".join("%s=%r" % item for item in settings.items()))


def _nd():
    from mxnet import nd
    return nd


class Prior:
    """P(w), the same density for every weight. Subclasses set ``name`` (config.json's word
    for it) and write ``log_density``; the rest has defaults (docs/EXTENDING.md)."""
    name = None
    sample_normals = None
    has_forward_closed_form_kl = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        KNOWN.add(cls)

    @classmethod
    def from_settings(cls, **settings):
        """The prior of these settings (``settings()``'s names)."""
        return cls(**settings)

    @classmethod
    def setting_names(cls):
        """The names of the settings that rebuild a prior of this class."""
        return [name for name, parameter in inspect.signature(cls.__init__).parameters.items()
                if name != "self" and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD,
                                                         parameter.KEYWORD_ONLY)]

    def log_density(self, x, F=None):
        """log P(x) elementwise."""
        raise NotImplementedError

    @property
    def has_log_density(self):
        """False for an improper prior that gives only its KL (the Monte Carlo KL needs the
        density)."""
        return type(self).log_density is not Prior.log_density

    def __call__(self, x, F=None):
        return total(self.log_density(x, F), F)

    def log_density_and_gradient(self, x):
        """(the summed log density (1,), elementwise d log P / dx), by autograd."""
        from mxnet import autograd
        x = x.copy()
        x.attach_grad()
        with autograd.record():
            log_density = self(x)
        log_density.backward()
        return log_density.detach(), x.grad

    def gradient_precision(self, x):
        """-(d log P / dx) / x elementwise: the precision of the Gaussian about 0 whose log
        density has P's slope at x (what IVON's update adds to the data's curvature); from
        ``log_density_and_gradient``, taken at 1e-30 where |x| is smaller (the limit at 0)."""
        nd = _nd()
        safe = nd.where(nd.abs(x) < 1e-30, nd.ones_like(x) * 1e-30, x)
        return -self.log_density_and_gradient(safe)[1] / safe

    kl = None  # a subclass's closed form: kl(self, mu, sigma, F=None), elementwise

    def switched_off(self, mu, sigma):
        """The weights the posterior N(mu, sigma^2) has switched off under this prior (a mask
        of mu's shape), for a prior that prunes as it trains; None for one with no such rule
        (pruning then ranks by |mu| / sigma at proportions the user picks)."""
        return None

    @property
    def has_switched_off_rule(self):
        """Whether ``switched_off`` says which weights the posterior has switched off (a
        subclass that writes it has such a rule)."""
        return type(self).switched_off is not Prior.switched_off

    @property
    def has_closed_form_kl(self):
        """Whether ``kl`` gives this prior's closed form."""
        return type(self).kl is not None

    def regions(self, size=None):
        """``[(start, stop, prior)]``: the prior of each run of entries of the flat parameter
        vector (of ``size`` entries), as the C kernels take them, one prior a call: a prior
        that holds every entry itself, ``[(0, size, self)]``."""
        return [(0, size, self)]

    def closed_form_kl(self, mu, sigma):
        """(KL(N(mu, sigma^2) || P) elementwise, its derivatives with respect to mu and sigma),
        the derivatives by autograd of ``kl``."""
        from mxnet import autograd
        mu, sigma = mu.copy(), sigma.copy()
        mu.attach_grad()
        sigma.attach_grad()
        with autograd.record():
            value = self.kl(mu, sigma)
        value.backward()
        return value.detach(), mu.grad, sigma.grad

    def settings(self):
        """The keyword arguments that rebuild this prior (``type(self)(**settings())``)."""
        return {name: getattr(self, name) for name in self.setting_names()
                if hasattr(self, name)}

    def describe(self):
        """The prior in words: its name and settings."""
        return describe_prior(self.name, self.settings())

    def __eq__(self, other):
        return type(self) is type(other) and self.settings() == other.settings()

    def __hash__(self):
        return hash(type(self))


class GaussianPrior(Prior):
    """P(w) = N(w | 0, sigma_p^2) for every weight. Its fast paths (the sum as a dot product,
    the written gradients and closed forms, the sampler) are this class's own: a subclass,
    which may change the density, takes ``Prior``'s, and a ``kl`` only where it writes one."""
    name = "gaussian"

    def __init__(self, sigma_p=1.0):
        self.sigma_p = require_positive("sigma_p", sigma_p)

    def log_density(self, x, F=None):
        return (operators(F).square(x) * (-0.5 / self.sigma_p ** 2)
                - (LOG_SQRT_2PI + math.log(self.sigma_p)))

    def __call__(self, x, F=None):
        if F is not None or type(self) is not GaussianPrior:
            return super().__call__(x, F)
        # the sum of log_density in one BLAS dot of x with itself
        flat = x.reshape((-1,))
        return (_nd().dot(flat, flat) * (-0.5 / self.sigma_p ** 2)
                - x.size * (LOG_SQRT_2PI + math.log(self.sigma_p)))

    @property
    def has_closed_form_kl(self):
        return type(self) is GaussianPrior or type(self).kl is not GaussianPrior.kl

    @property
    def has_forward_closed_form_kl(self):
        return type(self) is GaussianPrior

    def kl(self, mu, sigma, F=None):
        """KL(N(mu, sigma^2) || N(0, sigma_p^2)) elementwise."""
        F = operators(F)
        return ((F.square(sigma) + F.square(mu)) * (0.5 / self.sigma_p ** 2) - F.log(sigma)
                + (math.log(self.sigma_p) - 0.5))

    def log_density_and_gradient(self, x):
        """(the summed log density (1,), elementwise d log P / dx)."""
        if type(self) is not GaussianPrior:
            return super().log_density_and_gradient(x)
        return self(x), x * (-1.0 / self.sigma_p ** 2)

    def gradient_precision(self, x):
        """1 / sigma_p^2 at every x."""
        if type(self) is not GaussianPrior:
            return super().gradient_precision(x)
        return _nd().ones_like(x) * (1.0 / self.sigma_p ** 2)

    def closed_form_kl(self, mu, sigma):
        """``kl`` with its derivatives written out: mu / sigma_p^2 and
        sigma / sigma_p^2 - 1 / sigma."""
        if type(self) is not GaussianPrior:
            return super().closed_form_kl(mu, sigma)
        scale = 1.0 / self.sigma_p ** 2
        return self.kl(mu, sigma), mu * scale, sigma * scale - 1.0 / sigma

    def forward_closed_form_kl(self, mu, sigma):
        """KL(N(0, sigma_p^2) || N(mu, sigma^2)) elementwise, with its derivatives with respect
        to mu and sigma: (log(sigma / sigma_p) + (sigma_p^2 + mu^2) / (2 sigma^2) - 1/2,
        mu / sigma^2, 1 / sigma - (sigma_p^2 + mu^2) / sigma^3)."""
        nd = _nd()
        spread = self.sigma_p ** 2 + nd.square(mu)
        inverse_variance = 1.0 / nd.square(sigma)
        value = nd.log(sigma) + spread * inverse_variance * 0.5 - (math.log(self.sigma_p) + 0.5)
        return value, mu * inverse_variance, 1.0 / sigma - spread * inverse_variance / sigma

    @property
    def sample_normals(self):
        """The standard normals one sample of the prior takes per weight (None: no sampler)."""
        return 1 if type(self) is GaussianPrior else None

    def sample(self, normals, size):
        """``size`` weights drawn from the prior, from ``size * sample_normals`` standard
        normals."""
        return normals[:size] * self.sigma_p


class ScaleMixturePrior(Prior):
    """P(w) = pi N(w | 0, sigma_p1^2) + (1 - pi) N(w | 0, sigma_p2^2), 0 < pi < 1."""
    name = "scale_mixture"

    def __init__(self, pi=0.25, sigma_p1=0.75, sigma_p2=0.1):
        if not 0.0 < check_proportion(pi, "pi") < 1.0:
            raise ValueError("a scale mixture needs 0 < pi < 1 (from_settings turns pi = 0 or "
                             "1 into its one Gaussian), got %r" % (pi,))
        self.pi = pi
        self.sigma_p1 = require_positive("sigma_p1", sigma_p1)
        self.sigma_p2 = require_positive("sigma_p2", sigma_p2)

    @classmethod
    def from_settings(cls, pi=0.25, sigma_p1=0.75, sigma_p2=0.1):
        """The mixture; pi = 1 or 0 is its one remaining Gaussian."""
        if check_proportion(pi, "pi") not in (0.0, 1.0):
            return cls(pi, sigma_p1, sigma_p2)  # which checks the scales
        require_positive("sigma_p1", sigma_p1)  # the unused one too
        require_positive("sigma_p2", sigma_p2)
        return GaussianPrior(sigma_p1 if pi == 1.0 else sigma_p2)

    def log_density(self, x, F=None):
        F = operators(F)
        return self._log_density_of_square(F.square(x), F)

    def _log_density_of_square(self, x2, F):
        """``log_density`` from x^2 (which its gradient takes too)."""
        k1, k2 = 0.5 / self.sigma_p1 ** 2, 0.5 / self.sigma_p2 ** 2
        log_first = (math.log(self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p1)) - k1 * x2
        log_second = (math.log1p(-self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p2)) - k2 * x2
        larger = F.maximum(log_first, log_second)
        return larger + softplus(F.minimum(log_first, log_second) - larger, F)

    def log_density_and_gradient(self, x):
        """(the summed log density (1,), elementwise d log P / dx), where
        d log P / dx = -x (share1 / s1^2 + share2 / s2^2); a subclass's by autograd."""
        if type(self) is not ScaleMixturePrior:
            return super().log_density_and_gradient(x)
        x2 = _nd().square(x)
        return total(self._log_density_of_square(x2, _nd())), x * -self._precision_of_square(x2)

    def gradient_precision(self, x):
        """share1 / s1^2 + share2 / s2^2: each component's precision weighed by its share of
        the density at x."""
        if type(self) is not ScaleMixturePrior:
            return super().gradient_precision(x)
        return self._precision_of_square(_nd().square(x))

    def _precision_of_square(self, x2):
        k1, k2 = 0.5 / self.sigma_p1 ** 2, 0.5 / self.sigma_p2 ** 2
        # a - b from x^2 directly (not as a difference of two large numbers), and both shares
        # from it: 1 - share1 would lose all float32 precision where share1 is near 1
        log_ratio = (math.log(self.pi / (1.0 - self.pi)) + math.log(self.sigma_p2 / self.sigma_p1)
                     + (k2 - k1) * x2)
        return sigmoid(log_ratio) * (2.0 * k1) + sigmoid(-log_ratio) * (2.0 * k2)

    @property
    def sample_normals(self):
        return 2 if type(self) is ScaleMixturePrior else None

    def sample(self, normals, size):
        """A normal scaled by sigma_p1 where a second normal falls below the pi-quantile
        (probability pi), by sigma_p2 otherwise."""
        import statistics
        first = normals[size:2 * size] < statistics.NormalDist().inv_cdf(self.pi)
        return normals[:size] * (first * (self.sigma_p1 - self.sigma_p2) + self.sigma_p2)


class LogUniformPrior(Prior):
    """The log-uniform prior of sparse variational dropout (Molchanov et al. 2017), p(|w|)
    proportional to 1 / |w|: improper, so it has no density to estimate log P with, only the
    KL(N(mu, sigma^2) || P) up to a constant, by the paper's approximation in log alpha =
    log sigma^2 - log mu^2 (``kl``)."""
    name = "log_uniform"
    # the constants _fused.c is compiled with, in the table's order
    K1, K2, K3, LOG_ALPHA_LIMIT, PRUNE_LOG_ALPHA = table.LOG_UNIFORM_CONSTANTS.values()

    def log_alpha(self, mu, sigma, F=None):
        """log sigma^2 - log mu^2 elementwise, clipped."""
        F = operators(F)
        return F.clip(2.0 * F.log(sigma) - F.log(F.square(mu) + 1e-8), -self.LOG_ALPHA_LIMIT,
                      self.LOG_ALPHA_LIMIT)

    def switched_off(self, mu, sigma):
        return self.log_alpha(mu, sigma) > self.PRUNE_LOG_ALPHA

    def kl(self, mu, sigma, F=None):
        log_alpha = self.log_alpha(mu, sigma, F)
        return (self.K1 - self.K1 * sigmoid(self.K2 + self.K3 * log_alpha, F)
                + 0.5 * softplus(-log_alpha, F))


class NoPrior(Prior):
    """No prior on these weights: their KL term is 0, so the ELBO's complexity term is the
    rest of the network's (a gated network's gates, under ``Config.gate_prior``) and each
    weight's mean and noise are trained by the data term alone, which shrinks the noise: the
    weights are all but deterministic, as structured Bayesian pruning (Neklyudov et al. 2017)
    trains its weights under noisy gates."""
    name = "none"

    def kl(self, mu, sigma, F=None):
        return operators(F).zeros_like(mu)


def prior_words(prior):
    """A prior as a message names it: its config word, or its description (``GatedPrior``)."""
    return prior.name.replace("_", "-") if prior.name else prior.describe()


def removed(prior, mu, sigma):
    """1 where a run that removes what its prior switches off (``Config.remove_switched_off``)
    has taken the entry out of the network, 0 elsewhere: the prior's rule switches it off, or
    its mean is exactly 0, as a removed entry's is (a live mean is never exactly 0), so that
    the mask read from saved parameters is the one they were saved with."""
    return 1.0 - (1.0 - prior.switched_off(mu, sigma)) * (mu != 0)


def prior_kind(name):
    """The prior class config.json's ``prior`` names (``scale-mixture`` spelt either way): a
    built-in one or a user's subclass defined in this process."""
    return KNOWN.kind(name)


def gaussian_prior(x, sigma_p=1.0):
    """Summed log density of N(0, sigma_p^2) over all elements of x; shape (1,)."""
    return GaussianPrior(sigma_p)(x)


def scale_mixture_prior(x, pi=0.25, sigma_p1=0.75, sigma_p2=0.1):
    """Summed log density of pi N(0, sigma_p1^2) + (1 - pi) N(0, sigma_p2^2) over x; shape (1,).
    pi = 0 or 1 is the remaining Gaussian."""
    return ScaleMixturePrior.from_settings(pi, sigma_p1, sigma_p2)(x)


class GatedPrior(Prior):
    """A network's weights under ``weights`` and its gates' factors (``networks.layers.Gate``) under a
    prior of their own, ``gates``: Bayesian Compression's group normal-Jeffreys prior (Louizos
    et al. 2017) with log-uniform gates and N(0, 1) weights."""
    name = None  # Config names its parts: prior and gate_prior

    def __init__(self, weights, gates, sizes, gate_arrays):
        self.weights, self.gates = weights, gates
        self.sizes, self.gate_arrays = tuple(sizes), tuple(gate_arrays)
        self._masks = {}

    def _gate_mask(self, x):
        """1 at the gates' entries of a flat vector like ``x``, 0 elsewhere (cached)."""
        if x.size != sum(self.sizes):
            raise ValueError("the gated prior holds %d parameters, not %d"
                             % (sum(self.sizes), x.size))
        key = (x.context, x.dtype)
        if key not in self._masks:
            import numpy as np
            flags = np.concatenate([np.full(size, i in self.gate_arrays, dtype=np.float32)
                                    for i, size in enumerate(self.sizes)])
            self._masks[key] = _nd().array(flags, ctx=x.context, dtype=x.dtype)
        return self._masks[key]

    def _each(self, x, gates, weights):
        """``gates`` at the gates' entries, ``weights`` elsewhere."""
        return _nd().where(self._gate_mask(x), gates, weights)

    @property
    def has_log_density(self):
        return self.weights.has_log_density and self.gates.has_log_density

    def log_density(self, x, F=None):
        return self._each(x, self.gates.log_density(x, F), self.weights.log_density(x, F))

    @property
    def has_closed_form_kl(self):
        return self.weights.has_closed_form_kl and self.gates.has_closed_form_kl

    def kl(self, mu, sigma, F=None):
        return self._each(mu, self.gates.kl(mu, sigma, F), self.weights.kl(mu, sigma, F))

    def closed_form_kl(self, mu, sigma):
        return tuple(self._each(mu, gates, weights) for gates, weights in zip(
            self.gates.closed_form_kl(mu, sigma), self.weights.closed_form_kl(mu, sigma)))

    def describe(self):
        return "%s with %s gates" % (self.weights.describe(), self.gates.describe())

    def regions(self, size=None):
        """The runs of entries each part holds: consecutive arrays of the same part make one
        region (a subclass's: the whole vector, one prior)."""
        if type(self) is not GatedPrior:
            return super().regions(size)
        if size is not None and size != sum(self.sizes):
            raise ValueError("the gated prior holds %d parameters, not %d"
                             % (sum(self.sizes), size))
        found, start = [], 0
        for i, array_size in enumerate(self.sizes):
            part = self.gates if i in self.gate_arrays else self.weights
            if found and found[-1][2] is part:
                found[-1] = (found[-1][0], start + array_size, part)
            else:
                found.append((start, start + array_size, part))
            start += array_size
        return found


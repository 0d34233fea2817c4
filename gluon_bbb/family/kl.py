"""The KL term: how a step estimates it (``KLEstimate``: Monte Carlo at the sampled weights,
the closed form, either direction) and how an epoch weighs it across its mini-batches
(``KLWeighting``: 1/M, or the paper's 2^(M-i) / (2^M - 1)). Imports no MXNet when imported."""
import math

from ..errors import ConfigError
from .choices import Choice, named, names
from .elementwise import LOG_SQRT_2PI, total
from .priors import prior_words


class KLEstimate(Choice):
    """How the step estimates the KL term: ``name`` (``mc``, ``analytic``), ``direction``
    (``reverse``: KL(q || P), the ELBO's; ``forward``: KL(P || q))."""
    direction = "reverse"
    per_draw = False
    prior_draws = False

    @classmethod
    def named(cls, name, direction):
        return name == cls.name and direction == cls.direction

    def check(self, prior):
        pass

    def prior_noise_size(self, prior, size):
        """Standard normals one draw of a prior sample of ``size`` entries takes."""
        return 0

    def closed_term(self, prior, mu, sigma, kl_weight):
        """``(kl_weight * value (1,), d/dmu or None, d/dsigma)``, weighted, added once a step
        (None where there is nothing to add)."""
        raise NotImplementedError


class MonteCarloKL(KLEstimate):
    """log q(w) - log P(w) at the sampled weights, the tutorial's estimate; -log sigma summed
    once, the rest per draw."""
    name = "mc"
    per_draw = True

    def check(self, prior):
        if not prior.has_log_density:
            raise ConfigError("kl", self.name, "analytic with the %s prior (an improper prior: "
                              "it gives its KL, not a density to estimate log P with)"
                              % prior_words(prior))

    def closed_term(self, prior, mu, sigma, kl_weight):
        from mxnet import nd
        return -(kl_weight * total(nd.log(sigma))), None, -kl_weight / sigma


class ClosedFormKL(KLEstimate):
    """The closed-form KL(N(mu, sigma^2) || P), for a prior that has one."""
    name = "analytic"

    def check(self, prior):
        if not prior.has_closed_form_kl:
            raise ConfigError("kl", self.name, "mc with the %s prior (its KL has no closed "
                              "form)" % prior_words(prior))

    def closed_term(self, prior, mu, sigma, kl_weight):
        return _weighted(prior.closed_form_kl(mu, sigma), kl_weight)


class ForwardMonteCarloKL(KLEstimate):
    """KL(P || q) by Monte Carlo: log P(w) - log q(w) at a sample w of the prior, drawn per
    draw (the gradient flows through log q alone)."""
    name = "mc"
    direction = "forward"
    prior_draws = True

    def check(self, prior):
        if getattr(prior, "sample_normals", None) is None:
            raise ConfigError("kl_direction", self.direction, "reverse with the %s prior (the "
                              "forward Monte Carlo KL draws from the prior, and it has no "
                              "sampler)" % prior_words(prior))

    def prior_noise_size(self, prior, size):
        return size * prior.sample_normals

    def prior_term(self, prior, mu, sigma, noise):
        """``(sum of log P(w) - log q(w), d/dmu, d/dsigma)`` at the prior sample of
        ``noise``."""
        from mxnet import nd
        w = prior.sample(noise, mu.size)
        z = (w - mu) / sigma
        log_q_sum = -total(nd.log(sigma)) - 0.5 * total(z * z) - mu.size * LOG_SQRT_2PI
        return prior(w) - log_q_sum, -z / sigma, (1.0 - z * z) / sigma

    def closed_term(self, prior, mu, sigma, kl_weight):
        return None, None, None


class ForwardClosedFormKL(ClosedFormKL):
    """The closed-form KL(P || N(mu, sigma^2)), for a prior that has one."""
    direction = "forward"

    def check(self, prior):
        if not getattr(prior, "has_forward_closed_form_kl", False):
            raise ConfigError("kl", self.name, "mc with the %s prior in the forward direction "
                              "(its KL(P || q) has no closed form here)"
                              % prior_words(prior))

    def closed_term(self, prior, mu, sigma, kl_weight):
        return _weighted(prior.forward_closed_form_kl(mu, sigma), kl_weight)


def _weighted(terms, kl_weight):
    """A closed form's (elementwise value, d/dmu, d/dsigma), summed and weighted."""
    value, d_mu, d_sigma = terms
    return kl_weight * total(value), kl_weight * d_mu, kl_weight * d_sigma


KL_ESTIMATES = (MonteCarloKL(), ClosedFormKL(), ForwardMonteCarloKL(), ForwardClosedFormKL())
KL_DIRECTIONS = ("reverse", "forward")


def kl_estimate(name, direction="reverse"):
    """The KL estimate ``name`` (``mc``, ``analytic``) in ``direction``."""
    if isinstance(name, KLEstimate):
        return name
    if direction not in KL_DIRECTIONS:
        raise ConfigError("kl_direction", direction, "one of %s" % ", ".join(KL_DIRECTIONS))
    for choice in KL_ESTIMATES:
        if choice.named(name, direction):
            return choice
    raise ConfigError("kl", name, "one of %s" % ", ".join(names(KL_ESTIMATES)))


# The KL weighting of the mini-batches of an epoch.

class KLWeighting(Choice):
    def weights(self, num_batches):
        """The KL weight of each mini-batch i = 1..M of an epoch (M floats summing to 1)."""
        raise NotImplementedError


class UniformWeighting(KLWeighting):
    """1/M for every mini-batch."""
    name = "uniform"

    def weights(self, num_batches):
        return [1.0 / num_batches] * num_batches


class BlundellWeighting(KLWeighting):
    """2^(M-i) / (2^M - 1) (the paper's section 3.4), written as 2^-i / (1 - 2^-M) so that no
    2^M is formed (it overflows a float for M > 1023)."""
    name = "blundell"

    def weights(self, num_batches):
        normalizer = -math.expm1(-num_batches * math.log(2.0))
        return [math.ldexp(1.0, -i) / normalizer for i in range(1, num_batches + 1)]


KL_WEIGHTINGS = (UniformWeighting(), BlundellWeighting())


def kl_weighting(name):
    return named(KLWeighting, KL_WEIGHTINGS, name, "kl_weighting")


# The learning-rate schedule over the epochs of a run.

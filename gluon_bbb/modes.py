"""The choices a run makes besides its sizes, as small objects: the model kind, the weight
estimator, the KL estimate and the KL weighting of the mini-batches (the prior is the fifth, in
``priors.py``). Each owns its name in config.json, its validation, what it hands the C kernels
and how it predicts; the rest of the package asks the object instead of comparing strings, so
a new choice is one class here (and, where the native backend serves it, its kernel).

``config.json`` keeps the names (``model: "bbb"``). ``model_kind("mlp")``, the name a
deterministic run had before ``deterministic``, still reads.

Imports no MXNet (a config is checked where MXNet is not loaded: the sweep's own process);
what computes on arrays imports it when called.
"""
import math

from .errors import ConfigError


def _named(kind, choices, name, field):
    """The object of ``choices`` called ``name`` (a name, or one of the objects itself);
    ConfigError naming ``field`` otherwise."""
    if isinstance(name, kind):
        return name
    for choice in choices:
        if name == choice.name or name in choice.aliases:
            return choice
    raise ConfigError(field, name, "one of %s" % ", ".join(c.name for c in choices))


class Choice:
    """A named choice; ``aliases`` are older names that still read."""
    name = None
    aliases = ()

    def __str__(self):
        return self.name

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, self.name)

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


# The model kind: what is learnt and how it predicts.

class ModelKind(Choice):
    """What a run learns. ``learns_sigma``: a posterior N(mu, sigma^2) over every weight (the
    rest train mu alone). ``prediction_draws``: what a Monte Carlo prediction draws, in words
    (None: it predicts with the mean weights only)."""
    learns_sigma = False
    prior_as_weight_decay = False
    prediction_draws = None
    pruning_criterion = ("magnitude", "magnitude |w|")

    def network(self, network, dropout):
        """The network this kind trains, given the described one."""
        return network

    def prediction_sigmas(self, rhos):
        """The standard deviations a prediction draws weights with: None where it keeps the
        mean weights (and draws dropout masks, if the network has dropout)."""
        return None

    def ranking_sigmas(self, mus, rhos):
        """The sigmas that rank parameters for pruning by |mu| / sigma: the posterior's, or
        ones (magnitude pruning) where the kind learns none."""
        sigmas = self.prediction_sigmas(rhos)
        return sigmas if sigmas is not None else [mu.ones_like() for mu in mus]

    @property
    def default_test_samples(self):
        return 10 if self.prediction_draws else 0

    def check_test_samples(self, num_samples, maximum, field="test_samples"):
        """ConfigError unless ``num_samples`` draws suit this kind's predictive (0 where it
        draws nothing, 1 to ``maximum`` otherwise)."""
        if not self.prediction_draws:
            if num_samples != 0:
                raise ConfigError(field, num_samples, "0 for a deterministic network (model %s "
                                  "has no weight distribution to sample)" % self.name)
        elif isinstance(num_samples, bool) or not isinstance(num_samples, int) or not (
                1 <= num_samples <= maximum):
            raise ConfigError(field, num_samples, "an integer in [1, %d]" % maximum)


class BayesByBackprop(ModelKind):
    """A Gaussian posterior over every weight, trained by the tutorial's loss."""
    name = "bbb"
    learns_sigma = True
    prediction_draws = "weight samples"
    pruning_criterion = ("snr", "signal-to-noise ratio |mu|/sigma")

    def prediction_sigmas(self, rhos):
        from .model import transform_rhos
        return transform_rhos(rhos)


class MCDropout(ModelKind):
    """Monte Carlo dropout (Gal and Ghahramani 2016): the mean weights trained with dropout after
    every hidden ReLU and the prior as weight decay, (1/M)(-log P(w)) - log P(D_i | w);
    predictions average dropout masks."""
    name = "mcdropout"
    prior_as_weight_decay = True
    prediction_draws = "dropout masks"
    pruning_criterion = ("magnitude", "magnitude |w| (Monte Carlo dropout has no sigma)")

    def network(self, network, dropout):
        return network.with_dropout(dropout)


class Deterministic(ModelKind):
    """A deterministic network of the same shape: the likelihood alone, no prior."""
    name = "deterministic"
    aliases = ("mlp",)
    pruning_criterion = ("magnitude", "magnitude |w| (a deterministic network has no sigma)")


MODEL_KINDS = (BayesByBackprop(), MCDropout(), Deterministic())


def model_kind(name):
    return _named(ModelKind, MODEL_KINDS, name, "model")


# The weight estimator: how one draw of the noise gives the network's output.

class Estimator(Choice):
    """How a step draws the network's noise. ``native``: the C kernels implement it.
    ``check(network)``: ConfigError where it cannot draw that network. ``draw`` runs the
    network's data term for one draw of the ndarray backend (``ndarray_backend.py``)."""
    native = False

    def check(self, network):
        pass

    def noise_size(self, graph, batch_size, kl):
        """Standard normals one draw takes for a mini-batch of ``batch_size``."""
        raise NotImplementedError

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        """``(nll, dNLL/dmu, dNLL/dsigma or None, w, eps_w)`` of one draw ``eps`` on the flat
        mu and sigma: ``w = mu + sigma * eps_w`` are the weights the KL estimate takes (None
        where ``kl`` needs none); None for dNLL/dsigma: it is dNLL/dw * eps_w, with the KL's
        gradient added to dNLL/dw first."""
        raise NotImplementedError


class WeightSampling(Estimator):
    """w = mu + sigma * eps for every weight, the tutorial's estimator."""
    name = "sample"
    native = True

    def noise_size(self, graph, batch_size, kl):
        return graph.layout.size

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        w = mu + sigma * eps
        nll, grad_w = graph.nll_and_grad(X, y, w)
        return nll, grad_w, None, w, eps


class LocalReparametrization(Estimator):
    """Each dense layer's pre-activations drawn from their Gaussian (Kingma et al. 2015); a
    weight sample beside them where the KL is estimated at sampled weights."""
    name = "lrt"

    def noise_size(self, graph, batch_size, kl):
        return graph.lrt_noise_size(batch_size) + (graph.layout.size if kl.per_draw else 0)

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        split = graph.lrt_noise_size(X.shape[0])
        nll, grad_mu, grad_sigma = graph.lrt_nll_and_grads(X, y, mu, sigma, eps[:split])
        eps_w = eps[split:]
        return nll, grad_mu, grad_sigma, mu + sigma * eps_w if kl.per_draw else None, eps_w

    def check(self, network):
        if not network.dense_only:
            raise ConfigError("estimator", self.name, "sample for a network of other layers "
                              "than dense and relu (lrt draws the pre-activations of dense "
                              "layers)")


ESTIMATORS = (WeightSampling(), LocalReparametrization())


def estimator(name):
    return _named(Estimator, ESTIMATORS, name, "estimator")


# The KL estimate.

class KLEstimate(Choice):
    """How the step estimates KL(q || P). ``kernel_code``: what the C kernels take.
    ``per_draw``: estimated at each draw's weights (else once, in closed form)."""
    kernel_code = None
    per_draw = True

    def check(self, prior):
        pass


class MonteCarloKL(KLEstimate):
    """log q(w) - log P(w) at the sampled weights, the tutorial's estimate."""
    name = "mc"
    kernel_code = 0


class ClosedFormKL(KLEstimate):
    """The closed-form KL(N(mu, sigma^2) || P), for a prior that has one."""
    name = "analytic"
    kernel_code = 1
    per_draw = False

    def check(self, prior):
        if not prior.has_closed_form_kl:
            raise ConfigError("kl", self.name, "mc with the %s prior (its KL has no closed "
                              "form)" % prior.name.replace("_", "-"))


KL_ESTIMATES = (MonteCarloKL(), ClosedFormKL())


def kl_estimate(name):
    return _named(KLEstimate, KL_ESTIMATES, name, "kl")


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
    return _named(KLWeighting, KL_WEIGHTINGS, name, "kl_weighting")


def names(choices):
    """The config.json names of ``choices``, in order (for --help and argparse)."""
    return tuple(choice.name for choice in choices)

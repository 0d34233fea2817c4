"""The choices a run makes besides its sizes, as small objects: the model kind, the weight
estimator, the KL estimate, the KL weighting of the mini-batches and the learning-rate schedule
(the prior is the sixth, in ``priors.py``, the parametrization of sigma the seventh, in
``parametrizations.py``). Each owns its name in config.json, its validation, its code in the C
kernels' table (``kernels.py``) and how it predicts or what it computes; the rest of the
package asks the object instead of comparing strings, so a new choice is one class (a user's
estimator in their own script: docs/EXTENDING.md), and, where the C kernels are to serve it,
their function and a row of ``kernels.SERVED``.

``config.json`` keeps the names (``model: "bbb"``). ``model_kind("mlp")``, the name a
deterministic run had before ``deterministic``, still reads.

Imports no MXNet (a config is checked where MXNet is not loaded: the sweep's own process);
what computes on arrays imports it when called.
"""
import math

from . import kernels
from .elementwise import LOG_SQRT_2PI, LRT_VARIANCE_FLOOR, total
from .errors import ConfigError
from .registry import register


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

    def prediction_sigmas(self, rhos, parametrization):
        """The standard deviations a prediction draws weights with, from ``rhos`` by
        ``parametrization`` (``parametrizations.py``): None where it keeps the mean weights
        (and draws dropout masks, if the network has dropout)."""
        return None

    def ranking_sigmas(self, mus, rhos, parametrization):
        """The sigmas that rank parameters for pruning by |mu| / sigma: the posterior's, or
        ones (magnitude pruning) where the kind learns none."""
        sigmas = self.prediction_sigmas(rhos, parametrization)
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

    def prediction_sigmas(self, rhos, parametrization):
        return parametrization.sigmas(rhos)


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

_ESTIMATOR_KINDS = {}


class Estimator(Choice):
    """How a step draws the network's noise. A subclass with a ``name`` is one that ``Config``
    and ``estimator()`` accept once it is defined (a user's own, from their script): it
    writes ``noise_size`` and ``draw`` (the ndarray backend, ``ndarray_backend.py``) and
    ``block_output`` (the Gluon blocks). ``check(network)``: ConfigError where it cannot draw
    that network. ``kernel_data_kind``: its code in the C kernels' table (``kernels.py``), for
    an estimator they serve (``native.py`` holds its data term there); None for the others."""
    kernel_data_kind = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register(_ESTIMATOR_KINDS, cls, "estimator")

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

    def block_output(self, F, apply, x, mus, sigmas, epsilons, convolution):
        """A Gluon block's output (``blocks.py``): ``apply(F, x, weight, bias)`` its operator,
        ``epsilons`` its weight sample (all zeros while it uses its mean weights); per-example
        noise, where the estimator needs any, comes from MXNet's generator."""
        raise NotImplementedError


class WeightSampling(Estimator):
    """w = mu + sigma * eps for every weight, the tutorial's estimator."""
    name = "sample"
    kernel_data_kind = kernels.DATA_TERMS["sample"]  # dNLL/dw: both gradients at once

    def noise_size(self, graph, batch_size, kl):
        return graph.layout.size

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        w = mu + sigma * eps
        nll, grad_w = graph.nll_and_grad(X, y, w)
        return nll, grad_w, None, w, eps

    def block_output(self, F, apply, x, mus, sigmas, epsilons, convolution):
        from .model import transform_gaussian_samples
        return apply(F, x, *transform_gaussian_samples(mus, sigmas, epsilons))


class _NoisyNetwork(Estimator):
    """An estimator whose network takes noise of its own beside the parameters (graph inputs:
    mu, a second array of each parameter's shape, and ``noise_shapes``)."""

    def check(self, network):
        if not network.linear_layers_only:
            raise ConfigError("estimator", self.name, "sample for a network with layers of "
                              "weights other than dense, conv and gate (%s draws those "
                              "layers' outputs)" % self.name)

    def noise_shapes(self, network, batch_size):
        raise NotImplementedError

    def data_noise_size(self, graph, batch_size):
        return sum(math.prod(shape) for shape in self.noise_shapes(graph.network, batch_size))


class LocalReparametrization(_NoisyNetwork):
    """Each dense or convolution layer's pre-activations drawn from their Gaussian (Kingma et
    al. 2015): per example and unit, so examples share no noise. A weight sample beside them
    where the KL is estimated at sampled weights."""
    name = "lrt"
    kernel_data_kind = kernels.DATA_TERMS["lrt"]  # dNLL/dmu and dNLL/dsigma

    @property
    def net(self):
        from .model import lrt_net
        return lrt_net

    def noise_shapes(self, network, batch_size):
        from .network import Gate
        return [layer.noise_shape(batch_size, inp) if isinstance(layer, Gate)
                else (batch_size,) + tuple(out) for layer, inp, out in network.linear_layers()]

    def noise_size(self, graph, batch_size, kl):
        return self.data_noise_size(graph, batch_size) + (graph.layout.size if kl.per_draw else 0)

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        split = self.data_noise_size(graph, X.shape[0])
        nll, grad_mu, grad_sigma = graph.noisy_nll_and_grads(self, X, y, mu, sigma, eps[:split])
        eps_w = eps[split:]
        return nll, grad_mu, grad_sigma, mu + sigma * eps_w if kl.per_draw else None, eps_w

    def block_output(self, F, apply, x, mus, sigmas, epsilons, convolution):
        mean = apply(F, x, *mus)
        variance = apply(F, F.square(x), F.square(sigmas[0]), F.square(sigmas[1]))
        # no noise while the block uses its mean weights (its weight sample all zeros); the
        # products with ones tie the samples' shapes to the means' (deferred initialization)
        drawing = F.sign(sum(F.sum(F.abs(eps * F.ones_like(mu)))
                             for eps, mu in zip(epsilons, mus)))
        return mean + F.broadcast_mul(F.sqrt(variance + LRT_VARIANCE_FLOOR)
                                      * F.random.normal_like(mean), drawing)


class Flipout(_NoisyNetwork):
    """One weight perturbation sigma * eps for the mini-batch, decorrelated example by example
    by random signs on each layer's inputs and outputs (Wen et al. 2018); the perturbed weights
    mu + sigma * eps are the KL's weight sample."""
    name = "flipout"
    kernel_data_kind = kernels.DATA_TERMS["flipout"]  # dNLL/dmu and dNLL/d(sigma eps)

    @property
    def net(self):
        from .model import flipout_net
        return flipout_net

    def noise_shapes(self, network, batch_size):
        from .network import Conv2D, Gate
        shapes = []
        for layer, inp, out in network.linear_layers():
            if isinstance(layer, Gate):
                shapes.append(layer.noise_shape(batch_size, inp))
            elif isinstance(layer, Conv2D):
                shapes += [(batch_size, inp[0], 1, 1), (batch_size, out[0], 1, 1)]
            else:
                shapes += [(batch_size, math.prod(inp)), (batch_size, math.prod(out))]
        return shapes

    def noise_size(self, graph, batch_size, kl):
        return graph.layout.size + self.data_noise_size(graph, batch_size)

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        eps_w = eps[:graph.layout.size]
        delta = sigma * eps_w
        nll, grad_mu, grad_delta = graph.noisy_nll_and_grads(
            self, X, y, mu, delta, eps[graph.layout.size:])
        return nll, grad_mu, grad_delta * eps_w, mu + delta, eps_w

    def block_output(self, F, apply, x, mus, sigmas, epsilons, convolution):
        deltas = [sigma * eps for sigma, eps in zip(sigmas, epsilons)]
        mean = apply(F, x, *mus)
        # signs over the inputs' channels (a convolution's, the same at every position) or
        # features, and over the outputs'
        inputs = x if convolution else F.flatten(x)
        shaped_in = F.mean(inputs, axis=(2, 3), keepdims=True) if convolution else inputs
        signs_in = F.sign(F.random.normal_like(shaped_in))
        perturbation = apply(F, F.broadcast_mul(inputs, signs_in), *deltas)
        shaped_out = (F.mean(perturbation, axis=(2, 3), keepdims=True) if convolution
                      else perturbation)
        return mean + F.broadcast_mul(perturbation, F.sign(F.random.normal_like(shaped_out)))


ESTIMATORS = (WeightSampling(), LocalReparametrization(), Flipout())


def estimator(name):
    """The estimator ``name`` names (a built-in one, or a user's subclass defined in this
    process), or the object itself."""
    return _named(Estimator, [kind() for kind in _ESTIMATOR_KINDS.values()], name, "estimator")


# The KL estimate: its direction and how it is estimated.

class KLEstimate(Choice):
    """How the step estimates the KL term: ``name`` (``mc``, ``analytic``), ``direction``
    (``reverse``: KL(q || P), the ELBO's; ``forward``: KL(P || q)). ``kernel_code``: its code in
    the C kernels' table (``kernels.py``), None where they do not serve it. ``per_draw``:
    estimated at each draw's sampled weights; ``prior_draws``: at samples of the prior, per
    draw; ``closed_term`` gives the rest, once a step."""
    direction = "reverse"
    kernel_code = None
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
    kernel_code = kernels.KL_ESTIMATES["mc"]
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
    kernel_code = kernels.KL_ESTIMATES["analytic"]

    def check(self, prior):
        if not prior.has_closed_form_kl:
            raise ConfigError("kl", self.name, "mc with the %s prior (its KL has no closed "
                              "form)" % prior_words(prior))

    def closed_term(self, prior, mu, sigma, kl_weight):
        return _weighted(prior.closed_form_kl(mu, sigma), kl_weight)


class ForwardMonteCarloKL(KLEstimate):
    """KL(P || q) by Monte Carlo: log P(w) - log q(w) at a sample w of the prior, drawn per
    draw (the gradient flows through log q alone). Mass covering: q is pulled to cover every
    region the prior gives mass, where the reverse direction seeks one mode."""
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
    kernel_code = None

    def check(self, prior):
        if not getattr(prior, "has_forward_closed_form_kl", False):
            raise ConfigError("kl", self.name, "mc with the %s prior in the forward direction "
                              "(its KL(P || q) has no closed form here)"
                              % prior_words(prior))

    def closed_term(self, prior, mu, sigma, kl_weight):
        return _weighted(prior.forward_closed_form_kl(mu, sigma), kl_weight)


def prior_words(prior):
    """A prior as a message names it: its config word, or its description (``GatedPrior``)."""
    return prior.name.replace("_", "-") if prior.name else prior.describe()


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
    return _named(KLWeighting, KL_WEIGHTINGS, name, "kl_weighting")


# The learning-rate schedule over the epochs of a run.

class LearningRateSchedule(Choice):
    def rate(self, config, epoch):
        """The learning rate of epoch ``epoch`` (0-based) of a run of ``config``."""
        raise NotImplementedError


class StepDecay(LearningRateSchedule):
    """``learning_rate`` multiplied by ``lr_decay_factor`` every ``lr_decay_every`` epochs
    (0: constant)."""
    name = "step"

    def rate(self, config, epoch):
        if not config.lr_decay_every:
            return config.learning_rate
        return config.learning_rate * config.lr_decay_factor ** (epoch // config.lr_decay_every)


class LinearToZero(LearningRateSchedule):
    """``learning_rate`` falling linearly to 0 at the end of the run: learning_rate *
    (epochs - epoch) / epochs, as sparse variational dropout's code trains (Molchanov et al.
    2017). The run's length sets every epoch's rate, so a resumed run trains on only with the
    same ``epochs``."""
    name = "linear"

    def rate(self, config, epoch):
        return config.learning_rate * max(0.0, (config.epochs - epoch) / config.epochs)


LR_SCHEDULES = (StepDecay(), LinearToZero())


def lr_schedule(name):
    return _named(LearningRateSchedule, LR_SCHEDULES, name, "lr_schedule")


def names(choices):
    """The config.json names of ``choices``, in order (for --help and argparse)."""
    return tuple(dict.fromkeys(choice.name for choice in choices))  # each name once

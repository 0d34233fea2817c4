"""The model kind, what a run learns and how it predicts: Bayes by Backprop (a posterior over
every weight), Monte Carlo dropout (the mean weights trained with dropout, the prior as weight
decay) or a deterministic network. ``config.json`` keeps the name (``model: "bbb"``);
``model_kind("mlp")``, the name a deterministic run had before ``deterministic``, still reads."""
from ..errors import ConfigError, is_whole
from .choices import Choice, named


class ModelKind(Choice):
    """What a run learns. ``learns_sigma``: a posterior N(mu, sigma^2) over every weight (the
    rest train mu alone)."""
    learns_sigma = False
    prior_as_weight_decay = False
    natural_gradient = False
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
        elif not (is_whole(num_samples) and 1 <= num_samples <= maximum):
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


class IVONKind(BayesByBackprop):
    """The same posterior over every weight, fitted by IVON's natural-gradient update with an
    online Hessian estimate (``learning/ivon.py``; Shen et al. 2024) instead of reparametrized
    gradients: it predicts and prunes as Bayes by Backprop does."""
    name = "ivon"
    natural_gradient = True


MODEL_KINDS = (BayesByBackprop(), MCDropout(), Deterministic(), IVONKind())


def model_kind(name):
    return named(ModelKind, MODEL_KINDS, name, "model")

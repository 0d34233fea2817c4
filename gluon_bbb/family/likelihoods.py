"""Likelihoods: how a network's outputs score the targets, log P(y | x, w), and how many outputs
the network gives for them. A model is a network (``networks/layers.py``) and a likelihood; a new
likelihood is one class here."""
import math

from .elementwise import LOG_SQRT_2PI, operators
from ..errors import ConfigError
from ..networks.layers import LogVariance

# A predicted log variance is clipped to +-20 (standard deviations from 4.5e-5 to 22,000):
# exp(-log variance) stays finite in float32 however far an untrained head strays
LOG_VARIANCE_LIMIT = 20.0


def log_softmax_likelihood(yhat_linear, y_one_hot, F=None):
    """Per-example log p(y | x, w) from logits (batch, classes) and one-hot labels; (batch,)."""
    F = operators(F)
    return F.sum(y_one_hot * F.log_softmax(yhat_linear, axis=1), axis=1)


def clip_log_variance(log_variance, F):
    return F.clip(log_variance, -LOG_VARIANCE_LIMIT, LOG_VARIANCE_LIMIT)


def gaussian_log_likelihood(y, mean, log_variance, F=None):
    """Per-example log N(y | mean, exp(log_variance)), summed over the targets; y, mean and
    log_variance (batch, targets), the log variance clipped to +-LOG_VARIANCE_LIMIT; (batch,)."""
    F = operators(F)
    log_variance = clip_log_variance(log_variance, F)
    return F.sum(-LOG_SQRT_2PI - 0.5 * log_variance
                 - 0.5 * F.square(y - mean) * F.exp(-log_variance), axis=1)


class Categorical:
    """Class labels: the network gives one score per class."""
    head = ()
    classifies = True

    def network_outputs(self, num_outputs):
        return num_outputs

    def log_likelihood(self, output, y_one_hot, F):
        return log_softmax_likelihood(output, y_one_hot, F)

    def __str__(self):
        return "categorical"


class FixedNoise:
    """A noise standard deviation given in advance: the network gives the means alone."""
    head = ()
    outputs_per_target = 1

    def __init__(self, sd):
        self.sd = sd

    def mean_and_log_variance(self, output, F):
        return output, F.zeros_like(output) + 2.0 * math.log(self.sd)

    def __str__(self):
        return repr(self.sd)


class LearnedNoise:
    """One log variance per target, learnt as a weight: a ``LogVariance`` layer on top of the
    network's means gives the mean and the log variance."""
    name = "learned"
    outputs_per_target = 1

    def __init__(self):
        self.head = (LogVariance(),)

    def mean_and_log_variance(self, output, F):
        mean, log_variance = F.split(output, num_outputs=2, axis=1)
        return mean, clip_log_variance(log_variance, F)

    def __str__(self):
        return self.name


class HeteroscedasticNoise(LearnedNoise):
    """A mean and a log variance per target and input, both given by the network (Kendall and
    Gal 2017)."""
    name = "heteroscedastic"
    head = ()
    outputs_per_target = 2

    def __init__(self):
        pass


# the noises a word names in ``gaussian:WORD`` (any other word: a fixed standard deviation)
NAMED_NOISES = {noise.name: noise for noise in (LearnedNoise, HeteroscedasticNoise)}


class Gaussian:
    """Real targets with Gaussian noise: ``noise`` a standard deviation (a float, fixed), or
    an object of ``NAMED_NOISES`` or its name."""
    classifies = False

    def __init__(self, noise):
        if isinstance(noise, str):
            noise = NAMED_NOISES[noise]()
        self.noise = FixedNoise(noise) if isinstance(noise, float) else noise
        self.head = self.noise.head

    def network_outputs(self, num_outputs):
        """Columns of the described network's last dense layer for ``num_outputs`` targets."""
        return self.noise.outputs_per_target * num_outputs

    def mean_and_log_variance(self, output, F):
        """The predicted mean and log variance (clipped), each (batch, targets)."""
        return self.noise.mean_and_log_variance(output, F)

    def log_likelihood(self, output, y, F):
        mean, log_variance = self.mean_and_log_variance(output, F)
        return gaussian_log_likelihood(y, mean, log_variance, F)

    def __str__(self):
        return "gaussian:%s" % self.noise


# the likelihoods a config's ``likelihood`` names, before the colon
LIKELIHOODS = {"categorical": Categorical, "gaussian": Gaussian}
LIKELIHOOD_HELP = ("categorical, gaussian:NOISE_TOL (a fixed noise standard deviation), "
                   "gaussian:learned or gaussian:heteroscedastic")


def parse_likelihood(spec):
    """The likelihood a string names (``LIKELIHOOD_HELP``); ConfigError naming ``likelihood``
    otherwise."""
    name, colon, noise = str(spec).partition(":")
    kind = LIKELIHOODS.get(name)
    if kind is Categorical and not colon:
        return Categorical()
    if kind is Gaussian:
        if noise in NAMED_NOISES:
            return Gaussian(NAMED_NOISES[noise]())
        try:
            noise_tol = float(noise)
        except ValueError:
            noise_tol = None
        if noise_tol is not None and math.isfinite(noise_tol) and noise_tol > 0:
            return Gaussian(noise_tol)
    raise ConfigError("likelihood", spec, LIKELIHOOD_HELP)

"""The learning rate over a run's epochs: a step decay, or falling linearly to 0 at the run's
end (sparse variational dropout's). Imports no MXNet."""
import math

from ..family.choices import Choice, named


class LearningRateSchedule(Choice):
    # the config field that takes an epoch's rate toward 0, as a message names it
    decaying_field = "learning_rate"

    def rate(self, config, epoch):
        """The learning rate of epoch ``epoch`` (0-based) of a run of ``config``."""
        raise NotImplementedError


class StepDecay(LearningRateSchedule):
    """``learning_rate`` multiplied by ``lr_decay_factor`` every ``lr_decay_every`` epochs
    (0: constant)."""
    name = "step"
    decaying_field = "lr_decay_factor"

    def rate(self, config, epoch):
        if not config.lr_decay_every:
            return config.learning_rate
        return config.learning_rate * config.lr_decay_factor ** (epoch // config.lr_decay_every)


class LinearToZero(LearningRateSchedule):
    """``learning_rate`` falling linearly to 0 at the end of the run: learning_rate *
    (epochs - epoch) / epochs, as sparse variational dropout's code trains (Molchanov et al.
    2017)."""
    name = "linear"

    def rate(self, config, epoch):
        return config.learning_rate * max(0.0, (config.epochs - epoch) / config.epochs)


class CosineToZero(LearningRateSchedule):
    """``learning_rate`` annealed by a half cosine to 0 at the end of the run: learning_rate *
    (1 + cos(pi epoch / epochs)) / 2, as IVON's reference recipes train."""
    name = "cosine"

    def rate(self, config, epoch):
        return config.learning_rate * 0.5 * (1.0 + math.cos(math.pi * epoch / config.epochs))


LR_SCHEDULES = (StepDecay(), LinearToZero(), CosineToZero())


def lr_schedule(name):
    return named(LearningRateSchedule, LR_SCHEDULES, name, "lr_schedule")

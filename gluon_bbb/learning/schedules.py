"""What changes over a run's epochs (``Schedule``): the learning rate, by a step decay or
falling to 0 at the run's end, the KL term's warm-up factor and IVON's beta2. Imports no
MXNet."""
import math
from dataclasses import dataclass
from typing import Optional

from ..family.choices import Choice, named


class LearningRateSchedule(Choice):
    # the config field that takes an epoch's rate toward 0, as a message names it
    decaying_field = "learning_rate"

    def rate(self, schedule, epoch):
        """The learning rate of epoch ``epoch`` (0-based) under ``schedule``."""
        raise NotImplementedError


class StepDecay(LearningRateSchedule):
    """``learning_rate`` multiplied by ``lr_decay_factor`` every ``lr_decay_every`` epochs
    (0: constant)."""
    name = "step"
    decaying_field = "lr_decay_factor"

    def rate(self, schedule, epoch):
        if not schedule.lr_decay_every:
            return schedule.learning_rate
        return (schedule.learning_rate
                * schedule.lr_decay_factor ** (epoch // schedule.lr_decay_every))


class LinearToZero(LearningRateSchedule):
    """``learning_rate`` falling linearly to 0 at the end of the run: learning_rate *
    (epochs - epoch) / epochs, as sparse variational dropout's code trains (Molchanov et al.
    2017)."""
    name = "linear"

    def rate(self, schedule, epoch):
        return schedule.learning_rate * max(0.0, (schedule.epochs - epoch) / schedule.epochs)


class CosineToZero(LearningRateSchedule):
    """``learning_rate`` annealed by a half cosine to 0 at the end of the run: learning_rate *
    (1 + cos(pi epoch / epochs)) / 2, as IVON's reference recipes train."""
    name = "cosine"

    def rate(self, schedule, epoch):
        return schedule.learning_rate * 0.5 * (1.0 + math.cos(math.pi * epoch / schedule.epochs))


LR_SCHEDULES = (StepDecay(), LinearToZero(), CosineToZero())


def lr_schedule(name):
    return named(LearningRateSchedule, LR_SCHEDULES, name, "lr_schedule")


@dataclass(frozen=True)
class Schedule:
    """A run's epochs: ``kind``'s learning rates, the KL warm-up and IVON's beta2."""
    kind: LearningRateSchedule
    learning_rate: float
    epochs: int
    lr_decay_every: int = 0
    lr_decay_factor: float = 0.1
    kl_warmup_epochs: int = 0
    beta2: float = 0.99999
    late_beta2: Optional[float] = None
    late_epochs: int = 0

    def learning_rate_at(self, epoch):
        """The learning rate of epoch ``epoch`` (0-based)."""
        return self.kind.rate(self, epoch)

    def kl_factor_at(self, epoch):
        """What the KL term's weight is multiplied by in epoch ``epoch``: epoch /
        ``kl_warmup_epochs`` during the warm-up, then 1."""
        if not self.kl_warmup_epochs:
            return 1.0
        return min(1.0, epoch / self.kl_warmup_epochs)

    def beta2_at(self, epoch):
        """IVON's beta2 in epoch ``epoch``: ``late_beta2`` in the last ``late_epochs`` epochs,
        where the learning rate has fallen and the Hessian estimate can follow the curvature at
        the means without moving them, else ``beta2``."""
        if self.late_epochs and epoch >= self.epochs - self.late_epochs:
            return self.late_beta2
        return self.beta2

"""What a run trains with (``Plan``), its choices built from the config that names them
(``Config.build_plan``): the training step takes a plan and never reads a config; among them its
update rule, an object (``OPTIMIZERS``, IVON's ``IVONUpdate``). Imports no MXNet."""
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from ..errors import ConfigError, require_positive, require_real, require_whole
from .schedules import Schedule


@dataclass(frozen=True)
class IvonSettings:
    """IVON's settings (``learning/ivon.py``), a config's ``ivon``: ``ess`` None for the
    training set's size, ``clip_radius`` None for no clipping, ``late_beta2`` the Hessian
    estimate's momentum in the last ``late_epochs`` epochs, ``prior_at_draws`` whether the
    prior's gradient and precision are taken at the drawn weights rather than the means."""
    ess: Optional[int] = None
    hess_init: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99999
    weight_decay: float = 1e-4
    clip_radius: Optional[float] = None
    late_beta2: Optional[float] = None
    late_epochs: int = 0
    prior_at_draws: bool = False

    @classmethod
    def taken(cls, value, model_kind):
        """A config's ``ivon`` as these settings: ``value`` (or a dict of them), or the
        defaults, for a natural-gradient ``model_kind``; None for another (ConfigError where
        it is given)."""
        if value is None and model_kind.natural_gradient:
            value = cls()
        if isinstance(value, dict):
            names = [field.name for field in dataclasses.fields(cls)]
            unknown = sorted(set(value) - set(names))
            if unknown:
                raise ConfigError("ivon", unknown, "IVON's settings only: " + ", ".join(names))
            value = cls(**value)
        if value is not None and not model_kind.natural_gradient:
            raise ConfigError("ivon", value, "left unset for model %s (IVON's settings)"
                              % model_kind.name)
        if value is not None and not isinstance(value, cls):
            raise ConfigError("ivon", value, "IVON's settings (a dict of them)")
        return value

    def checked(self, epochs):
        """These settings, each number taken by its rule (``check_ivon_numbers``; ``ess`` a
        count of examples, ``late_epochs`` at most the run's ``epochs``); ConfigError naming the
        first that breaks one as its flag names it (``ivon_<name>``)."""
        numbers = dict(zip(("ess", "hess_init", "beta1", "beta2", "weight_decay", "clip_radius"),
                           check_ivon_numbers(
                               1 if self.ess is None else self.ess, self.hess_init, self.beta1,
                               self.beta2, self.weight_decay,
                               math.inf if self.clip_radius is None else self.clip_radius)))
        # the effective sample size a count of examples; None: the training images
        numbers["ess"] = (None if self.ess is None
                          else require_whole("ivon_ess", self.ess, 1, int(MAX_ESS)))
        if self.clip_radius is None:
            numbers["clip_radius"] = None
        numbers["late_epochs"] = require_whole("ivon_late_epochs", self.late_epochs, 0, epochs)
        if self.late_beta2 is not None:
            numbers["late_beta2"] = require_real("ivon_late_beta2", self.late_beta2, 0.0, 1.0,
                                                 low_open=True, high_open=True)
        checked = dataclasses.replace(self, **numbers)
        if checked.late_beta2 is not None and not checked.late_epochs:
            raise ConfigError("ivon_late_epochs", checked.late_epochs, "at least 1 with "
                              "{ivon_late_beta2} (the number of last epochs it is beta2 of)")
        if checked.late_beta2 is None and checked.late_epochs:
            raise ConfigError("ivon_late_beta2", checked.late_beta2, "given with "
                              "{ivon_late_epochs} (the beta2 of those last epochs)")
        return checked


# The ranges of IVON's numbers: an effective sample size of up to a trillion examples, the
# Hessian's start and the weight decay up to a million (the reference's runs: 0.01 to 1, and
# 1e-4 to 1e-3), so that the precision ess (h + wd) and a step's lr (h0 + wd) stay far inside
# float32; within them a setting that makes the steps too large is named when the loss diverges
MAX_ESS, MAX_HESS_INIT, MAX_WEIGHT_DECAY = 1e12, 1e6, 1e6


def check_ivon_numbers(ess, hess_init, beta1, beta2, weight_decay, clip_radius):
    """IVON's numbers as floats; ConfigError naming the first outside its range, as
    ``ivon_<name>``: ``ess``, ``hess_init`` and ``weight_decay`` float32 numbers > 0 up to
    ``MAX_ESS``, ``MAX_HESS_INIT`` and ``MAX_WEIGHT_DECAY``, the betas in (0, 1),
    ``clip_radius`` one > 0 or infinity (no clipping)."""
    checked = [require_positive("ivon_ess", ess, MAX_ESS),
               require_positive("ivon_hess_init", hess_init, MAX_HESS_INIT)]
    checked += [require_real("ivon_" + name, value, 0.0, 1.0, low_open=True, high_open=True)
                for name, value in (("beta1", beta1), ("beta2", beta2))]
    checked.append(require_positive("ivon_weight_decay", weight_decay, MAX_WEIGHT_DECAY))
    checked.append(math.inf if clip_radius == math.inf
                   else require_positive("ivon_clip_radius", clip_radius))
    return checked


class UpdateRule:
    """How the training step updates mu and rho from their gradients: ``create`` builds the
    MXNet optimizer once for a step, ``states`` its state for the vectors it updates;
    ``state_vectors`` counts the parameter-sized vectors that state holds (the step's memory
    estimate). A new rule is a subclass with its ``name`` and its entry in ``OPTIMIZERS``
    (``--optimizer`` offers what that holds); ``create`` makes MXNet's optimizer of the name."""
    name = None
    state_vectors = 0

    def create(self, plan, num_update=0, num_train=None, native=False):
        """The optimizer at the schedule's first learning rate, on the loss's gradient as it is
        (no rescaling, no weight decay: the prior is the KL's), ``num_update`` steps taken."""
        import mxnet as mx
        return mx.optimizer.create(self.name, learning_rate=plan.schedule.learning_rate,
                                   rescale_grad=1.0, wd=0.0, begin_num_update=num_update)

    def states(self, optimizer, mu, rho):
        """The optimizer's state of each vector it updates: mu's, then rho's."""
        return [optimizer.create_state(i, vector) for i, vector in enumerate((mu, rho))]


class SGD(UpdateRule):
    """Plain stochastic gradient descent, the tutorial's."""
    name = "sgd"


class Adam(UpdateRule):
    """Adam: two moments each of mu and rho."""
    name = "adam"
    state_vectors = 4


# the update rules --optimizer and a config's optimizer name
OPTIMIZERS = {rule.name: rule for rule in (SGD(), Adam())}


@dataclass(frozen=True)
class IVONUpdate(UpdateRule):
    """IVON's update (``learning/ivon.py``) with its ``settings``, a natural-gradient model
    kind's: mu and its Hessian estimate, sigma from the latter (rho = log sigma^2); the prior's
    density enters the update where the prior has one. Its state: momentum and Hessian."""
    settings: IvonSettings = IvonSettings()
    name = "ivon"
    state_vectors = 2

    def create(self, plan, num_update=0, num_train=None, native=False):
        import mxnet as mx  # IVON is "ivon" among MXNet's optimizers once gluon_bbb is imported
        ivon, schedule = self.settings, plan.schedule
        if (ivon.ess or num_train) is None:
            raise ConfigError("ivon_ess", None, "given where the training images are not known")
        return mx.optimizer.create(
            self.name, learning_rate=schedule.learning_rate, ess=ivon.ess or num_train,
            hess_init=ivon.hess_init, beta1=ivon.beta1, beta2=schedule.beta2,
            weight_decay=ivon.weight_decay,
            clip_radius=math.inf if ivon.clip_radius is None else ivon.clip_radius,
            prior=plan.prior if plan.prior.has_log_density else None,
            prior_at_draws=ivon.prior_at_draws, native=native, begin_num_update=num_update)

    def states(self, optimizer, mu, rho):
        return [optimizer.create_state(0, mu)]  # rho follows from the Hessian estimate


@dataclass(frozen=True, eq=False)
class Plan:
    """A run's network (``networks.network.Network``), likelihood, model kind, prior,
    estimator, KL estimate and parametrization (``family/``), its epochs' ``Schedule``, its
    ``UpdateRule`` and the numbers the step draws and starts with."""
    network: Any
    likelihood: Any
    model_kind: Any
    prior: Any
    estimator: Any
    kl: Any
    parametrization: Any
    schedule: Schedule
    optimizer: UpdateRule
    num_samples: int
    seed: Optional[int]
    mu_scale: float
    initial_rhos: Tuple[float, ...]
    remove_switched_off: bool
    kl_scale: float
    batch_size: int
    prior_description: str  # the prior as a message names it (its settings, its gates')

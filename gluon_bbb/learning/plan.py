"""What a run trains with (``Plan``), its choices built from the config that names them
(``Config.build_plan``): the training step takes a plan and never reads a config. Imports no
MXNet."""
import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from ..errors import ConfigError, is_real
from ..family.elementwise import require_positive
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


def check_ivon_numbers(ess, hess_init, beta1, beta2, weight_decay, clip_radius):
    """ConfigError naming the first of IVON's numbers outside its range, as ``ivon_<name>``:
    ``ess`` > 0, ``hess_init`` and ``weight_decay`` float32 numbers > 0, the betas in (0, 1),
    ``clip_radius`` one > 0 or infinity (no clipping)."""
    if not (is_real(ess) and ess > 0):
        raise ConfigError("ivon_ess", ess, "a number > 0")
    require_positive("ivon_hess_init", hess_init)
    require_positive("ivon_weight_decay", weight_decay)
    for name, value in (("beta1", beta1), ("beta2", beta2)):
        if not (is_real(value) and 0.0 < value < 1.0):
            raise ConfigError("ivon_" + name, value, "in (0, 1)")
    if clip_radius != math.inf:
        require_positive("ivon_clip_radius", clip_radius)


@dataclass(frozen=True, eq=False)
class Plan:
    """A run's network (``networks.layers.Network``), likelihood, model kind, prior,
    estimator, KL estimate and parametrization (``family/``), its epochs' ``Schedule``, its
    optimizer (``sgd``, ``adam``; IVON's settings for a natural-gradient model kind) and the
    numbers the step draws and starts with."""
    network: Any
    likelihood: Any
    model_kind: Any
    prior: Any
    estimator: Any
    kl: Any
    parametrization: Any
    schedule: Schedule
    optimizer: str
    ivon: Optional[IvonSettings]
    num_samples: int
    seed: Optional[int]
    mu_scale: float
    initial_rhos: Tuple[float, ...]
    remove_switched_off: bool
    kl_scale: float
    batch_size: int
    prior_description: str  # the prior as a message names it (its settings, its gates')

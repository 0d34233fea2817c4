"""What a run trains with (``Plan``), its choices built from the config that names them
(``Config.build_plan``): the training step takes a plan and never reads a config. Imports no
MXNet."""
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from .schedules import Schedule


@dataclass(frozen=True)
class IvonSettings:
    """IVON's settings (``learning/ivon.py``); ``ess`` None for the training set's size,
    ``prior`` the one that enters its update through its density (None: weight decay
    alone)."""
    ess: Optional[int]
    hess_init: float
    beta1: float
    weight_decay: float
    clip_radius: float
    prior: Any
    prior_at_draws: bool


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

"""One config object holding every hyper-parameter of a run, validated on construction."""
import dataclasses
import functools
import json
import math
import os
import pathlib
import sys
from dataclasses import dataclass
from typing import Optional, Union

from ..errors import FLOAT32_TINY, ConfigError, require_positive, require_real, require_whole
from ..family import parametrizations
from ..family.estimators import estimator
from ..family.kl import kl_estimate, kl_weighting
from ..family.likelihoods import parse_likelihood
from ..family.model_kinds import model_kind
from ..family.priors import (KNOWN as PRIORS, GatedPrior, Prior, describe_prior, prior_kind,
                             prior_words)
from ..networks.layers import Dropout
from ..networks.network import MAX_LAYERS, Network, mlp, parse_network
from .plan import OPTIMIZERS, IVONUpdate, IvonSettings, Plan
from .schedules import Schedule, lr_schedule


def _once(build):
    """A config's method whose object is built once: a config is never changed after it is
    made (``dataclasses.replace`` makes another), so each of its choices is resolved from its
    names once, and every module is handed that object."""
    @functools.wraps(build)
    def built(self):
        key = "_built_" + build.__name__
        if key not in self.__dict__:
            self.__dict__[key] = build(self)
        return self.__dict__[key]
    return built


# the networks that a config's size fields shape, by the name ``network`` gives them (any other
# description is network.parse_network's)
SIZED_BY_FIELDS = {"mlp": lambda config, outputs: mlp(
    config.num_inputs, config.num_hidden_units, config.num_hidden_layers, outputs)}
# Each weight sample of a step is a whole forward and backward pass: 1000 samples make a default
# epoch take hours, and the paper uses 1 to 10.
MAX_SAMPLES = 1000
# a run's epochs (a regression's full-batch steps): a million is days of the smallest network's
MAX_EPOCHS = 10 ** 6
# the whole-number fields: (name, least, most or None); those that may be None (unset)
WHOLE_FIELDS = (("num_inputs", 1, None), ("num_outputs", 1, None), ("num_hidden_units", 1, None),
                ("batch_size", 1, None), ("num_samples", 1, MAX_SAMPLES),
                ("num_hidden_layers", 0, MAX_LAYERS // 2 - 1), ("epochs", 0, MAX_EPOCHS),
                ("validation", 0, None), ("lr_decay_every", 0, None),
                ("kl_warmup_epochs", 0, None), ("train_size", 1, None), ("seed", 0, None))
OPTIONAL_FIELDS = ("train_size", "seed")


@dataclass
class Config:
    """Hyper-parameters of a run; defaults are the tutorial's Bayes-by-Backprop MLP. A prior's
    settings are one dict, ``prior_settings`` (the gates' own prior's ``gate_prior_settings``),
    IVON's one object, ``ivon``; ``from_dict`` also takes them flat, as the flags name them."""
    num_inputs: int = 784
    num_outputs: int = 10
    num_hidden_layers: int = 2
    num_hidden_units: int = 400
    batch_size: int = 128
    epochs: int = 10
    learning_rate: float = 0.001
    lr_decay_every: int = 0
    lr_decay_factor: float = 0.1
    lr_schedule: str = "step"
    optimizer: str = "sgd"
    num_samples: int = 1
    prior: Union[str, Prior] = "gaussian"
    mu_scale: float = 0.1
    rho_offset: float = -3.0
    kl_weighting: str = "uniform"
    kl_scale: float = 1.0
    model: str = "bbb"
    estimator: str = "sample"
    kl: str = "mc"
    kl_direction: str = "reverse"
    train_size: Optional[int] = None
    validation: int = 0
    seed: Optional[int] = None
    network: str = "mlp"
    likelihood: str = "categorical"
    dropout: float = 0.5
    parametrization: str = "softplus"
    prior_settings: Optional[dict] = None
    init_from: Optional[str] = None
    kl_warmup_epochs: int = 0
    gate_prior: Optional[str] = None
    gate_prior_settings: Optional[dict] = None
    gate_rho_offset: Optional[float] = None
    remove_switched_off: bool = False
    init_best_units: bool = False
    classes: Optional[dict] = None
    ivon: Optional[IvonSettings] = None

    def __new__(cls, *args, **values):
        fields = {field.name for field in dataclasses.fields(cls)}
        flat = sorted(set(values) & set(FLAT_FIELDS) - fields)
        if flat:
            raise TypeError("Config takes %s in its groups, prior_settings={...} or ivon={...} "
                            "(Config.from_dict takes them flat)" % ", ".join(flat))
        return super().__new__(cls)

    def __post_init__(self):
        self._take_prior()
        self.ivon = IvonSettings.taken(self.ivon, self.model_kind)
        # the names as config.json keeps them (mlp as it was, a user's object by its name)
        self.model = self.model_kind.name
        self.estimator = self.estimator_kind.name
        self.parametrization = self.parametrization_kind.name
        self._record_classes()
        self._take_numbers()
        if self.init_from is not None and not (isinstance(self.init_from, str)
                                               and self.init_from.strip()):
            raise ConfigError("init_from", self.init_from, "the path of a run directory or a "
                              "parameter file")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", self.optimizer, "one of %s" % ", ".join(OPTIMIZERS))
        kl_weighting(self.kl_weighting)  # ConfigError where it names none
        self.lr_schedule = self.lr_schedule_kind.name
        self._check_last_rate()
        network = self.build_network()  # ConfigError where the description is not one
        if self.gate_prior is not None:
            if not network.gate_positions():
                raise ConfigError("gate_prior", self.gate_prior, "left unset for a network "
                                  "without gates (it is the prior of the gate layers' "
                                  "factors)")
        if self.gate_rho_offset is not None:
            if not network.gate_positions():
                raise ConfigError("gate_rho_offset", self.gate_rho_offset, "left unset for a "
                                  "network without gates (it is the gates' initial rho)")
        if self.prior_defined and self.model_kind.prior_as_weight_decay:  # no KL: a density
            if not self.build_prior().has_log_density:
                raise ConfigError("prior", self.prior, "one with a density with model %s (its "
                                  "-log P(w) is the means' weight decay)" % self.model)
        elif self.prior_defined and not self.model_kind.natural_gradient:  # IVON takes no KL
            self.kl_kind.check(self.build_prior())
        self.estimator_kind.check(network)
        self._check_remove_switched_off()
        self._check_init_best_units(network)
        self._check_ivon()

    def _take_numbers(self):
        """Each number field checked by its kind's rule (``errors.py``) and kept as the Python
        number it is (a NumPy scalar taken as one), as config.json holds it."""
        for name, low, high in WHOLE_FIELDS:
            value = getattr(self, name)
            if value is not None or name not in OPTIONAL_FIELDS:
                setattr(self, name, require_whole(name, value, low, high))
        for name in ("learning_rate", "mu_scale", "kl_scale"):
            setattr(self, name, require_positive(name, getattr(self, name)))
        self.lr_decay_factor = require_real("lr_decay_factor", self.lr_decay_factor, 0.0, 1.0,
                                            low_open=True)
        self.dropout = require_real("dropout", self.dropout, *Dropout.RATES, words=(
            "in (0, 1) (from %.3g to 1 - 2^-24, as MXNet takes it)" % Dropout.RATES[0]))
        self.rho_offset = require_real("rho_offset", self.rho_offset)
        if self.gate_rho_offset is not None:
            self.gate_rho_offset = require_real("gate_rho_offset", self.gate_rho_offset)

    def _check_last_rate(self):
        """ConfigError where the schedule takes the learning rate below float32's smallest
        normal number by the last epoch (its rates never rise): that epoch would train nothing,
        or on rates that have lost their precision."""
        if not self.epochs:
            return
        last = self.build_schedule().learning_rate_at(self.epochs - 1)
        if last < FLOAT32_TINY:
            field = self.lr_schedule_kind.decaying_field
            raise ConfigError(field, getattr(self, field), "such that every epoch's learning "
                              "rate is at least float32's smallest normal number, %.3g: under "
                              "the %s schedule epoch %d's would be %.3g (a larger "
                              "{lr_decay_factor}, a longer {lr_decay_every} or fewer {epochs})"
                              % (FLOAT32_TINY, self.lr_schedule, self.epochs, last))

    def _check_ivon(self):
        """IVON's settings (``learning/ivon.py``), named as their flags name them; for ``--model
        ivon``: weights drawn (the estimator ``sample``), rho as log sigma^2 (``log_variance``:
        sigma = 1 / sqrt(ess (h + weight decay)) is stored so), and a prior with a density or
        none."""
        if self.ivon is None:
            return
        self.ivon = ivon = self.ivon.checked(self.epochs)
        if self.estimator_kind != estimator("sample"):
            raise ConfigError("estimator", self.estimator, "sample with model ivon (IVON draws "
                              "weights)")
        if self.parametrization_kind != parametrizations.LogVariance():
            raise ConfigError("parametrization", self.parametrization, "log-variance with model "
                              "ivon (its sigma is stored as rho = log sigma^2)")
        density = self.prior_defined and self.build_prior().has_log_density
        if ivon.prior_at_draws is not False and not (ivon.prior_at_draws is True and density):
            raise ConfigError("ivon_prior_at_draws", ivon.prior_at_draws,
                              "given with a {prior} that has a density")
        if self.prior_defined and not density and self.build_prior() != prior_kind("none")():
            raise ConfigError("prior", self.prior, "one with a density, or none, with model "
                              "ivon (its gradient enters IVON's update)")

    def _check_init_best_units(self, network):
        if not isinstance(self.init_best_units, bool):
            raise ConfigError("init_best_units", self.init_best_units, "true or false")
        if self.init_best_units and self.init_from is None:
            raise ConfigError("init_best_units", True, "false without {init_from} (it chooses "
                              "which of that run's units this run starts from)")
        if self.init_best_units and not network.gate_positions():
            raise ConfigError("init_best_units", True, "false for a network without gates (it "
                              "keeps the units of each gated layer)")

    def _check_remove_switched_off(self):
        if not isinstance(self.remove_switched_off, bool):
            raise ConfigError("remove_switched_off", self.remove_switched_off, "true or false")
        if not self.remove_switched_off:
            return
        if not self.model_kind.learns_sigma:
            raise ConfigError("remove_switched_off", True, "false for model %s (it learns no "
                              "posterior to switch weights off)" % self.model)
        if self.kl_kind.per_draw or self.kl_kind.prior_draws:
            raise ConfigError("remove_switched_off", True, "false with the Monte Carlo KL (the "
                              "removed weights' KL terms stay in the loss in closed form: "
                              "{kl} analytic)")
        if self.prior_defined and not self.build_prior().has_switched_off_rule:
            raise ConfigError("remove_switched_off", True, "false with the %s prior (it has "
                              "no rule that switches weights off; the log-uniform prior's is "
                              "log alpha > 3)" % prior_words(self.build_prior()))

    def _record_classes(self):
        """``classes``: where each class of the user's own among the run's choices (its prior,
        estimator, parametrization) is defined, ``{"estimator": "module:Class"}``, so that
        another process reading the run knows which module to import
        (``import_recorded_classes``); None for a run of built-in classes alone."""
        recorded = dict(self.classes or {})
        found = {"estimator": type(self.estimator_kind),
                 "parametrization": type(self.parametrization_kind),
                 "prior": prior_kind(self.prior) if self.prior_defined else None}
        for field, cls in found.items():
            if cls is not None and not cls.__module__.startswith("gluon_bbb."):
                recorded[field] = "%s:%s" % (cls.__module__, cls.__qualname__)
        self.classes = recorded or None

    def _take_prior(self):
        """``prior`` as its name, ``prior_settings`` as its settings (a prior object's; for a
        built-in prior its class's defaults where not given); likewise ``gate_prior``."""
        if isinstance(self.prior, Prior):
            if self.prior.name is None:
                raise ConfigError("prior", self.prior, "a Prior subclass with a name")
            self.prior, self.prior_settings = self.prior.name, self.prior.settings()
        self.prior, self.prior_settings = _named_settings("prior", self.prior,
                                                          self.prior_settings)
        if self.gate_prior is not None:
            self.gate_prior, self.gate_prior_settings = _named_settings(
                "gate_prior", self.gate_prior, self.gate_prior_settings)
        elif self.gate_prior_settings is not None:
            raise ConfigError("gate_prior_settings", self.gate_prior_settings, "left unset "
                              "without {gate_prior}")

    # the choices' objects (family/, learning/schedules.py), from the names config.json keeps
    @functools.cached_property
    def model_kind(self):
        return model_kind(self.model)

    @functools.cached_property
    def estimator_kind(self):
        return estimator(self.estimator)

    @functools.cached_property
    def kl_kind(self):
        return kl_estimate(self.kl, self.kl_direction)

    @functools.cached_property
    def kl_weighting_kind(self):
        return kl_weighting(self.kl_weighting)

    @functools.cached_property
    def lr_schedule_kind(self):
        return lr_schedule(self.lr_schedule)
    @functools.cached_property
    def update_rule(self):
        """The ``plan.UpdateRule`` the run trains with: IVON's with ``ivon`` for a
        natural-gradient model kind, else the one ``optimizer`` names."""
        if self.model_kind.natural_gradient:
            return IVONUpdate(self.ivon)
        return OPTIMIZERS[self.optimizer]

    @functools.cached_property
    def parametrization_kind(self):
        return parametrizations.parametrization(self.parametrization)

    @property
    def prior_defined(self):
        """Whether this process knows the class of the config's prior (a user's prior class
        is known once defined)."""
        try:
            prior_kind(self.prior)
        except ConfigError:
            return False
        return True

    @_once
    def build_prior(self):
        """The prior object (``family/priors.py``): the config's ``prior`` with its scales, or with
        ``prior_settings``. ConfigError for a user's prior whose class this process lacks."""
        if not self.prior_defined:
            raise ConfigError("prior", self.prior, "a prior class defined in this Python process "
                              "(the run was trained with a prior of its own, %s: define or import "
                              "that class, then train or resume from Python)"
                              % self.describe_prior())
        prior = _prior_of(self.prior, self.prior_settings)
        if self.gate_prior is None:
            return prior
        gates = _prior_of(self.gate_prior, self.gate_prior_settings)
        if gates == prior:
            return prior
        network = self.build_network()
        return GatedPrior(prior, gates, [math.prod(shape) for shape in network.param_shapes()],
                          network.gate_positions())

    def describe_prior(self):
        """The prior in words, its settings included, whether or not its class is known, and
        the gates' where they have their own."""
        words = (self.prior if PRIORS.built_in_kind(self.prior)
                 else describe_prior(self.prior, self.prior_settings))
        if self.gate_prior is not None and self.gate_prior != self.prior:
            words += " (gates: %s)" % self.gate_prior
        return words

    def predictive_sigmas(self, mus, rhos, parametrization=None):
        """The standard deviations a Monte Carlo prediction draws the weights with, from the
        arrays ``mus`` and ``rhos`` (by ``parametrization``, default this config's): the model
        kind's (None where it learns none), and, for a run that removes what its prior switches
        off (``remove_switched_off``), 0 for the weights it removed: it trained without them.
        Those are the ones whose mean is exactly 0, as such a run saves a removed weight's
        (``priors.removed``), so this needs no prior class (a user's may be undefined here)."""
        parametrization = parametrization or self.parametrization_kind
        sigmas = self.model_kind.prediction_sigmas(rhos, parametrization)
        if sigmas is None or not self.remove_switched_off:
            return sigmas
        from mxnet import nd
        return [nd.where(mu == 0, nd.zeros_like(sigma), sigma) for mu, sigma in zip(mus, sigmas)]

    @_once
    def build_schedule(self):
        """The run's ``schedules.Schedule``: each epoch's learning rate, KL factor and beta2."""
        ivon = self.ivon or IvonSettings()
        return Schedule(self.lr_schedule_kind, self.learning_rate, self.epochs,
                        self.lr_decay_every, self.lr_decay_factor, self.kl_warmup_epochs,
                        ivon.beta2, ivon.late_beta2, ivon.late_epochs)

    @_once
    def build_plan(self):
        """The ``plan.Plan`` the training step takes: this config's choices, built."""
        return Plan(self.build_network(), self.build_likelihood(), self.model_kind,
                    self.build_prior(), self.estimator_kind, self.kl_kind,
                    self.parametrization_kind, self.build_schedule(), self.update_rule,
                    self.num_samples, self.seed, self.mu_scale, tuple(self.initial_rhos()),
                    self.remove_switched_off, self.kl_scale, self.batch_size,
                    self.describe_prior())

    @_once
    def build_network(self):
        """The ``networks.network.Network`` this config describes: the described layers, the
        likelihood's head (``logvar`` for a learned noise) and, for ``mcdropout``, dropout
        after every hidden ReLU where the description has none."""
        likelihood = self.build_likelihood()
        outputs = likelihood.network_outputs(self.num_outputs)
        sized = SIZED_BY_FIELDS.get(self.network)
        network = (sized(self, outputs) if sized
                   else parse_network(self.network, self.num_inputs, outputs))
        if likelihood.head:
            network = Network(network.layers + list(likelihood.head), network.input_shape)
        return self.model_kind.network(network, self.dropout)

    @property
    def sized_by_fields(self):
        """Whether ``network`` names the MLP that ``num_hidden_layers`` and
        ``num_hidden_units`` size (rather than describing its layers)."""
        return self.network in SIZED_BY_FIELDS

    @_once
    def build_likelihood(self):
        """The ``family/likelihoods.py`` object this config names."""
        return parse_likelihood(self.likelihood)

    def layer_shapes(self):
        """Parameter shapes ``[W1, b1, ...]`` of this config's network (for the MLP
        ``[W1 (out, in), b1 (out,), ...]``)."""
        return self.build_network().param_shapes()

    def initial_rhos(self):
        """The initial rho of each parameter array: ``gate_rho_offset`` for the gates' arrays
        where it is set, ``rho_offset`` for the others."""
        network = self.build_network()
        gates = network.gate_positions() if self.gate_rho_offset is not None else ()
        return [self.gate_rho_offset if i in gates else self.rho_offset
                for i in range(len(network.param_shapes()))]

    def to_dict(self):
        """The fields as config.json keeps them (the gate prior's settings, IVON's and the
        user's classes only where the run has them)."""
        values = dataclasses.asdict(self)
        for name in ("gate_prior_settings", "ivon", "classes"):
            if values[name] is None:
                del values[name]
        return values

    def to_flat(self):
        """``to_dict()`` with the built-in priors' settings and IVON's flat, as the flags name
        them (``sigma_p``, ``ivon_ess``): ``from_dict`` takes it back."""
        values = self.to_dict()
        for field in ("gate_prior", "prior"):
            if PRIORS.built_in_kind(values[field]) and field + "_settings" in values:
                values.update(values.pop(field + "_settings"))
        values.update({"ivon_" + name: value
                       for name, value in (values.pop("ivon", None) or {}).items()})
        return values

    @classmethod
    def unknown_keys(cls, values):
        """The keys of ``values`` that ``from_dict`` does not know, sorted."""
        return sorted(set(values) - set(FLAT_FIELDS))

    @classmethod
    def from_dict(cls, values):
        """Build from a dict such as a run's config.json; unknown keys are an error. Its
        settings may be flat, as the flags, the presets and older config.json name them: a
        built-in prior's (``sigma_p``, ``pi``, ...) go to each of the run's built-in priors
        that takes them, IVON's (``ivon_ess``, ...) to ``ivon`` for model ivon; either is
        dropped where nothing takes it."""
        unknown = cls.unknown_keys(values)
        if unknown:
            raise ConfigError("config", unknown, "known fields only")
        values = dict(values)
        flat = {name: values.pop(name) for name in PRIOR_SETTING_NAMES if name in values}
        ivon = {name[len("ivon_"):]: values.pop(name) for name in IVON_DEFAULTS
                if name in values}
        for field in ("prior", "gate_prior"):
            kind = PRIORS.built_in_kind(values.get(field, getattr(cls, field)))
            taken = {name: flat[name] for name in (kind.setting_names() if kind else ())
                     if name in flat}
            if taken:
                values[field + "_settings"] = dict(values.get(field + "_settings") or {}, **taken)
        try:
            natural_gradient = model_kind(values.get("model", cls.model)).natural_gradient
        except ConfigError:
            natural_gradient = False  # the config names the model's error
        if ivon and natural_gradient:
            values["ivon"] = dict(values.get("ivon") or {}, **ivon)
        return cls(**values)


def flat_defaults():
    """Every setting's default, flat as ``Config.to_flat`` names them: the config's fields,
    IVON's and each built-in prior's settings (their names differ)."""
    defaults = dict(Config().to_flat(), **IVON_DEFAULTS)
    for kind in PRIORS.built_in():
        defaults.update(kind().settings())
    return defaults


def _prior_of(name, settings):
    """The prior ``name`` of ``settings`` (a built-in scale mixture with pi = 1 or 0 is its
    one Gaussian)."""
    kind = prior_kind(name)
    return (kind.from_settings if kind in PRIORS.built_in() else kind)(**settings)


def _named_settings(field, name, settings):
    """``(name, settings)`` of the prior of ``field`` (``prior``, ``gate_prior``), checked: a
    built-in prior's settings are its defaults with those given; a user's, those given (its
    defaults where none are), or those recorded where this process lacks its class."""
    words = field + "_settings"
    try:
        kind = prior_kind(name)
    except ConfigError:
        if settings is None or field == "gate_prior":
            raise
        kind = None  # a user's prior of a class this process lacks
    settings = {} if settings is None else settings
    if not (isinstance(settings, dict) and all(isinstance(k, str) for k in settings)):
        raise ConfigError(words, settings, "a dict of the prior's keyword arguments")
    built_in = kind in PRIORS.built_in()
    if built_in:  # its own rules come first: they name the setting, as its flag does
        settings = dict(kind().settings(), **settings)
        _check_prior(kind, settings, words)
    try:
        json.dumps(settings, allow_nan=False)
    except (TypeError, ValueError):
        raise ConfigError(words, settings, "a dict of the prior's keyword arguments, numbers "
                          "and strings that config.json can hold") from None
    if kind is not None and not built_in:
        _check_prior(kind, settings, words)
    return name if kind is None else kind.name, settings


def _check_prior(kind, settings, words):
    """Build the prior ``kind`` of ``settings``, which checks them: a built-in prior's
    ConfigError names its setting; any other refusal is one of ``words`` (a user's prior has no
    flags)."""
    try:
        _prior_of(kind.name, settings)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError) and kind in PRIORS.built_in():
            raise
        raise ConfigError(words, settings, "the arguments of prior %s (%s)"
                          % (kind.name, exc)) from None


def import_recorded_classes(values, where):
    """Import the modules that ``values`` (a run's config.json) records for the classes of the
    user's own among its choices (``Config.classes``), where this process does not define them
    yet."""
    import importlib
    from ..errors import CheckpointError
    from ..family import estimators, parametrizations, priors
    known = {"prior": priors.KNOWN, "estimator": estimators.KNOWN,
             "parametrization": parametrizations.KNOWN}
    classes = values.get("classes") or {}
    if not isinstance(classes, dict):
        return
    for field, place in sorted(classes.items()):
        name = values.get(field)
        if field not in known or not isinstance(place, str) or not isinstance(name, str):
            continue
        if name.replace("-", "_") in known[field]:
            continue
        module, _, qualname = place.partition(":")
        try:
            if module == "__main__":
                raise ImportError("a script's own module")
            if os.getcwd() not in sys.path:  # as a script run from here finds its modules
                sys.path.insert(0, os.getcwd())
            importlib.import_module(module)
        except ImportError as exc:
            raise CheckpointError("%s was trained with %s %s, a class of the user's own (%s in "
                                  "module %s), which this process cannot import (%s): import "
                                  "that module first (a command's {import_modules} %s)", where,
                                  field, name, qualname, module, exc, module) from None


# each setting as the flags and a flat dict name it, with its type and default: the config's
# fields, IVON's as ``ivon_<name>``, the built-in priors' settings
IVON_DEFAULTS = {"ivon_" + name: value
                 for name, value in dataclasses.asdict(IvonSettings()).items()}
PRIOR_SETTING_NAMES = sorted({name for kind in PRIORS.built_in() for name in kind.setting_names()})
FLAT_FIELDS = dict({f.name: f.type for f in dataclasses.fields(Config)},
                   **{"ivon_" + f.name: f.type for f in dataclasses.fields(IvonSettings)},
                   **{name: float for name in PRIOR_SETTING_NAMES})


# The presets: data (presets.json, which --preset reads); docs/DESIGN.md says why each holds
# what it holds and docs/RESULTS.md measures them.
PRESETS = json.loads(pathlib.Path(__file__).with_name("presets.json").read_text())


# what a choice implies for the settings neither a flag nor the preset gives, applied until
# none adds anything (--remove-switched-off implies the log-uniform prior, which implies its KL;
# a prior without a density, its closed-form KL)
IMPLIED = (
    (("model", "ivon"), dict(estimator="sample", parametrization="log_variance", prior="none",
                             learning_rate=0.5, lr_schedule="cosine", mu_scale=0.02)),
    (("prior", "log_uniform"), dict(kl="analytic")),
    (("prior", "none"), dict(kl="analytic")),
    (("remove_switched_off", True), dict(prior="log_uniform")),
)
# the settings a model kind leaves without effect, and why: a flag given for one is refused
# naming the model; a preset's or one a choice implies is dropped
_PRIOR = ("prior", "gate_prior", "sigma_p", "pi", "sigma_p1", "sigma_p2", "kl", "kl_direction",
          "kl_weighting", "kl_scale", "kl_warmup_epochs")
_SIGMA = ("estimator", "parametrization", "rho_offset", "gate_rho_offset", "num_samples")
EXCLUDED = {
    "bbb": (("dropout",), "it trains no dropout layers of its own (--model mcdropout does)"),
    "mcdropout": (("kl", "kl_direction") + _SIGMA, "it learns the mean weights alone, the prior "
                  "as their weight decay"),
    "deterministic": (_PRIOR + _SIGMA + ("dropout",), "it learns the weights from the data "
                      "alone"),
    "ivon": (("kl", "kl_direction", "kl_weighting", "optimizer", "rho_offset",
              "gate_rho_offset", "dropout"), "IVON's update takes the prior's density, not a "
             "KL, in place of the optimizer, and sigma from its Hessian estimate"),
}
# the settings a network with convolutions and no preset takes (the tutorial's leave a
# Bayesian LeNet at 10% accuracy after an epoch: docs/NETWORKS.md)
CONVOLUTION_DEFAULTS = dict(optimizer="adam", learning_rate=2e-3, rho_offset=-5.0)

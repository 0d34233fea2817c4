import numpy as np
import pytest
from hypothesis import given, strategies as st

from gluon_bbb import Config, ConfigError
from gluon_bbb.learning.config import PRESETS


def test_defaults_are_the_tutorials():
    c = Config()
    assert (c.num_hidden_layers, c.num_hidden_units, c.batch_size, c.epochs) == (2, 400, 128, 10)
    assert (c.learning_rate, c.num_samples, c.prior, c.prior_settings) == (
        0.001, 1, "gaussian", {"sigma_p": 1.0})
    assert Config(prior="scale_mixture").prior_settings == dict(pi=0.25, sigma_p1=0.75,
                                                                 sigma_p2=0.1)
    assert c.ivon is None and c.gate_prior_settings is None
    assert c.layer_shapes() == [(400, 784), (400,), (400, 400), (400,), (10, 400), (10,)]


def test_prior_spelling_is_normalised():
    assert Config(prior="scale-mixture").prior == "scale_mixture"


@pytest.mark.parametrize("field,value", [
    ("sigma_p", 0.0), ("sigma_p", -1.0), ("sigma_p1", 0), ("sigma_p2", -0.1),
    ("sigma_p", float("nan")), ("pi", -0.01), ("pi", 1.5), ("batch_size", 0),
    ("epochs", -1), ("num_hidden_units", 0), ("num_samples", 0), ("learning_rate", 0.0),
    ("train_size", 0), ("batch_size", 2.5), ("prior", "laplace"), ("optimizer", "rmsprop"),
    ("kl_weighting", "linear"), ("num_hidden_layers", -1), ("seed", -3),
    ("estimator", "reinforce"), ("kl", "exact"), ("lr_decay_every", -1),
    ("lr_decay_factor", 0.0), ("lr_decay_factor", 1.5), ("kl_scale", 0.0),
    ("kl_scale", float("inf")), ("init_best_units", "yes"), ("lr_schedule", "exponential"),
])
def test_invalid_values_name_field_and_value(field, value):
    mixture = field in ("pi", "sigma_p1", "sigma_p2")  # the scale mixture's settings
    with pytest.raises(ConfigError) as info:
        Config.from_dict(dict({field: value}, **({"prior": "scale_mixture"} if mixture else {})))
    message = str(info.value)
    assert message.startswith(field + " must be") and repr(value) in message
    assert isinstance(info.value, ValueError) and info.value.field == field


def test_edges_are_valid():
    from gluon_bbb.family.priors import GaussianPrior
    # a mixture with pi 0 or 1 is its one remaining Gaussian
    for pi, sigma in ((0.0, 0.1), (1.0, 0.75)):
        prior = Config.from_dict(dict(prior="scale_mixture", pi=pi)).build_prior()
        assert isinstance(prior, GaussianPrior) and prior.sigma_p == sigma
    assert Config(epochs=0).epochs == 0  # a resume that trains nothing more
    assert Config(num_hidden_layers=0).layer_shapes() == [(10, 784), (10,)]  # softmax regression


def test_round_trip_and_unknown_keys():
    c = Config(prior="scale_mixture", seed=3)
    assert Config.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="bogus"):
        Config.from_dict(dict(c.to_dict(), bogus=1))


def test_settings_are_grouped_and_read_flat_as_older_config_json_holds_them():
    # a run's config.json before the grouping: every prior's scale and IVON's settings flat
    old = dict(Config().to_dict(), prior="scale_mixture", sigma_p=1.0, pi=0.5, sigma_p1=1.0,
               sigma_p2=0.05, ivon_ess=None, ivon_hess_init=0.1, ivon_beta2=0.99999)
    del old["prior_settings"]
    config = Config.from_dict(old)
    assert config.prior_settings == dict(pi=0.5, sigma_p1=1.0, sigma_p2=0.05)
    assert config.ivon is None  # IVON's settings of a bbb run are dropped
    assert Config.from_dict(config.to_dict()) == config == Config.from_dict(config.to_flat())
    assert config.to_flat()["sigma_p2"] == 0.05 and "prior_settings" not in config.to_flat()
    # IVON's, for model ivon, are its one object
    ivon = Config.from_dict(dict(model="ivon", parametrization="log_variance", prior="none",
                                 ivon_ess=500, ivon_late_beta2=0.9, ivon_late_epochs=2))
    assert (ivon.ivon.ess, ivon.ivon.late_beta2, ivon.ivon.hess_init) == (500, 0.9, 0.1)
    assert ivon.build_schedule().beta2_at(9) == 0.9 and ivon.build_schedule().beta2_at(7) != 0.9
    assert Config.from_dict(ivon.to_dict()) == ivon == Config.from_dict(ivon.to_flat())
    assert ivon.to_dict()["ivon"]["ess"] == 500 and ivon.to_flat()["ivon_ess"] == 500
    # a flat setting goes to each built-in prior of the run that has it
    gated = Config.from_dict(dict(network="dense:20,gate,relu,dense:10", prior="gaussian",
                                  gate_prior="gaussian", sigma_p=0.5))
    assert gated.prior_settings == gated.gate_prior_settings == {"sigma_p": 0.5}
    assert gated.build_prior().sigma_p == 0.5  # one prior: the gates' is the same


SCALES = st.floats(1e-3, 10.0)
PRIOR_SETTINGS = {"gaussian": st.fixed_dictionaries({"sigma_p": SCALES}),
                  "scale_mixture": st.fixed_dictionaries({"pi": st.floats(0.0, 1.0),
                                                          "sigma_p1": SCALES,
                                                          "sigma_p2": SCALES}),
                  "log_uniform": st.just({}), "none": st.just({})}


@st.composite
def grouped_configs(draw):
    """A config of any built-in prior and gate prior with any settings, Bayes by Backprop's or
    IVON's with any of IVON's settings."""
    values = dict(network="dense:8,gate,relu,dense:10", kl="analytic")
    values["prior"] = draw(st.sampled_from(["gaussian", "log_uniform", "none"]))
    values["prior_settings"] = draw(PRIOR_SETTINGS[values["prior"]])
    if draw(st.booleans()):
        values["gate_prior"] = draw(st.sampled_from(sorted(PRIOR_SETTINGS)))
        values["gate_prior_settings"] = draw(PRIOR_SETTINGS[values["gate_prior"]])
        if values["gate_prior"] == "scale_mixture":
            values["kl"] = "mc"
            values["prior"], values["prior_settings"] = "gaussian", {"sigma_p": 1.0}
    if draw(st.booleans()):
        late = draw(st.integers(0, 3))
        values.update(model="ivon", parametrization="log_variance", kl="mc", ivon=dict(
            ess=draw(st.none() | st.integers(1, 10 ** 6)), hess_init=draw(SCALES),
            beta1=draw(st.floats(0.01, 0.99)), beta2=draw(st.floats(0.01, 0.99999)),
            clip_radius=draw(st.none() | SCALES), late_epochs=late,
            late_beta2=draw(st.floats(0.01, 0.99)) if late else None))
        for gate_field in ("gate_prior", "gate_prior_settings"):
            values.pop(gate_field, None)
        values.update(network="dense:8,relu,dense:10", prior="gaussian")
        values["prior_settings"] = draw(PRIOR_SETTINGS["gaussian"])
    return values


@given(grouped_configs())
def test_grouped_settings_round_trip_grouped_and_flat(values):
    config = Config(**values)
    assert Config.from_dict(config.to_dict()) == config
    flat = config.to_flat()
    # the flat form is the flags': one value a name, which a prior and its gates share
    shared = set(config.prior_settings) & set(config.gate_prior_settings or {})
    if all(config.prior_settings[k] == config.gate_prior_settings[k] for k in shared):
        assert Config.from_dict(flat) == config
    assert not any(isinstance(value, dict) for value in flat.values() if value is not None)
    assert flat["prior"] == config.prior and ("ivon_ess" in flat) == (config.ivon is not None)


@pytest.mark.parametrize("values,field", [
    (dict(ivon={"ess": 10}), "ivon"),  # IVON's settings for a bbb run
    (dict(model="ivon", parametrization="log_variance", prior="none", ivon={"eps": 1}), "ivon"),
    (dict(prior_settings={"sigma": 1.0}), "prior_settings"),
    (dict(prior="scale_mixture", prior_settings={"pi": 2.0}), "pi"),
    (dict(gate_prior_settings={}), "gate_prior_settings"),
])
def test_grouped_settings_are_checked(values, field):
    with pytest.raises(ConfigError) as info:
        Config(**values)
    assert info.value.field == field


def test_the_settings_before_the_grouping_are_named_with_their_groups():
    with pytest.raises(TypeError, match="Config takes pi, sigma_p in its groups"):
        Config(sigma_p=0.5, pi=0.3)


def test_analytic_kl_needs_the_gaussian_prior():
    Config(kl="analytic", prior="gaussian")
    with pytest.raises(ConfigError, match="kl must be mc with the scale-mixture prior"):
        Config(kl="analytic", prior="scale_mixture")


def test_lenet_preset_is_the_bayesian_lenet():
    config = Config.from_dict(PRESETS["lenet"])
    network = config.build_network()
    assert str(network) == ("conv:20:5,relu,pool:2,conv:50:5,relu,pool:2,dense:500,relu,"
                            "dense:10")
    assert network.input_shape == (1, 28, 28) and network.output_shapes[5] == (50, 4, 4)
    assert sum(int(np.prod(shape)) for shape in config.layer_shapes()) == 431080
    assert (config.epochs, config.lr_decay_every, config.validation) == (20, 15, 10000)
    # a description given as layers is the same network
    assert str(Config(network=str(network)).build_network()) == str(network)


def test_a_users_prior_refusing_its_settings_is_named_as_the_prior_settings():
    # a built-in prior's refusal names its setting (the flag); a user's prior has no flags, so
    # its refusal, a ConfigError of its own included, is the config's prior_settings
    from gluon_bbb.family.elementwise import require_positive
    from gluon_bbb.family.priors import GaussianPrior

    class CheckedLaplace(GaussianPrior):
        name = "checked_laplace_for_test_config"

        def __init__(self, scale=1.0):
            super().__init__(1.0)
            self.scale = require_positive("scale", scale)

    with pytest.raises(ConfigError) as caught:
        Config(prior=CheckedLaplace.name, prior_settings=dict(scale=-1.0))
    assert caught.value.field == "prior_settings"
    assert "arguments of prior checked_laplace_for_test_config" in str(caught.value)
    with pytest.raises(ConfigError, match="numbers and strings that config.json can hold"):
        Config(prior=CheckedLaplace.name, prior_settings=dict(scale=object()))  # JSON first
    config = Config(prior=CheckedLaplace.name, prior_settings=dict(scale=2.0))
    assert config.build_prior().scale == 2.0
    with pytest.raises(ConfigError) as caught:
        Config(prior="gaussian", prior_settings=dict(sigma_p=-1.0))
    assert caught.value.field == "sigma_p"

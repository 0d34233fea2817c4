"""learning/plan.py: the choices a config names, built once into the objects the training step
takes; nothing below the loop reads a config."""
import ast
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, ConfigError, TrainingStep
from gluon_bbb.family.estimators import estimator
from gluon_bbb.family.kl import kl_estimate
from gluon_bbb.family.likelihoods import Categorical
from gluon_bbb.family.model_kinds import model_kind
from gluon_bbb.family.parametrizations import LogVariance, Softplus
from gluon_bbb.family.priors import GatedPrior, GaussianPrior, LogUniformPrior, NoPrior
from gluon_bbb.learning.plan import OPTIMIZERS, Adam, IVONUpdate, IvonSettings, Plan, UpdateRule
from gluon_bbb.learning.schedules import Schedule, lr_schedule
from gluon_bbb.networks.network import mlp
from test_package import package_imports

# the step and what it is built from: none of them may reach learning.config
BELOW_THE_LOOP = ("learning.step", "learning.ivon", "learning.plan",
                  "learning.schedules", "learning.noise", "learning.threads",
                  "networks.layers", "networks.blocks")


def test_a_configs_plan_holds_its_built_objects():
    config = Config(network="dense:30,gate,relu,dense:10", num_inputs=20, prior="none",
                    gate_prior="log_uniform", kl="analytic", estimator="lrt",
                    parametrization="log_variance", rho_offset=-8.0, gate_rho_offset=-2.0,
                    lr_schedule="linear", epochs=4, seed=3, batch_size=16)
    plan = config.build_plan()
    assert plan is config.build_plan()  # built once
    assert plan.network.param_shapes() == config.layer_shapes()
    assert plan.estimator == estimator("lrt") and plan.kl == kl_estimate("analytic")
    assert plan.parametrization == LogVariance() and plan.model_kind == model_kind("bbb")
    assert isinstance(plan.prior, GatedPrior)
    assert (plan.prior.weights, plan.prior.gates) == (NoPrior(), LogUniformPrior())
    assert plan.initial_rhos == (-8.0, -8.0, -2.0, -8.0, -8.0)
    assert [plan.schedule.learning_rate_at(e) for e in range(4)] == [0.001, 0.00075, 0.0005,
                                                                   0.00025]
    assert (plan.seed, plan.batch_size, plan.optimizer) == (3, 16, OPTIMIZERS["sgd"])
    ivon = Config(model="ivon", parametrization="log_variance", ivon=dict(ess=500, clip_radius=2.0),
                  prior="gaussian", prior_settings=dict(sigma_p=0.5)).build_plan()
    assert (ivon.optimizer, ivon.prior) == (IVONUpdate(IvonSettings(ess=500, clip_radius=2.0)),
                                            GaussianPrior(0.5))


def test_a_plan_of_objects_built_by_hand_trains_the_bits_of_the_configs():
    """The step takes objects: a plan made without a config trains what the config's does (on
    the one OpenMP team the tests hold: conftest.py)."""
    config = Config(num_inputs=12, num_hidden_units=9, num_outputs=3, prior="gaussian",
                    prior_settings=dict(sigma_p=0.3), optimizer="adam", learning_rate=0.01,
                    lr_decay_every=1, lr_decay_factor=0.5, seed=5, batch_size=6, num_samples=2)
    by_hand = Plan(mlp(12, 9, 2, 3), Categorical(), model_kind("bbb"), GaussianPrior(0.3),
                   estimator("sample"), kl_estimate("mc"), Softplus(),
                   Schedule(lr_schedule("step"), 0.01, 10, 1, 0.5), Adam(), 2, 5, 0.1,
                   (-3.0,) * 6, False, 1.0, 6, "gaussian")
    rng = np.random.default_rng(0)
    X = nd.array(rng.normal(size=(6, 12)))
    y = nd.one_hot(nd.array(rng.integers(0, 3, 6)), 3)
    results = []
    for plan in (config.build_plan(), by_hand):
        step = TrainingStep(plan, mx.cpu())
        losses = []
        for epoch in range(2):
            step.start_epoch(epoch)
            losses.append(step(X, y, 0.1).asnumpy())
        results.append((np.concatenate(losses), step.mu.asnumpy(), step.rho.asnumpy()))
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)
    assert step.optimizer.lr == 0.005  # the second epoch's rate, from the schedule


def test_nothing_below_the_loop_imports_the_config():
    edges = package_imports()
    reach = {}

    def reached(module):
        if module not in reach:
            reach[module] = set()
            for dependency in edges[module]:
                reach[module] |= {dependency} | reached(dependency)
        return reach[module]
    below = list(BELOW_THE_LOOP) + [m for m in edges if m.split(".")[0] in ("family", "native")]
    for module in below:
        assert "learning.config" not in reached(module) | {module}, module
    assert "learning.plan" in edges["learning.config"]
    # and no name in the step's code is a config's
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(here, "gluon_bbb", "learning", "step.py")) as f:
        tree = ast.parse(f.read())
    names = {getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "arg", "")
             for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute, ast.arg))}
    assert not [name for name in names if "config" in name.lower() and name != "ConfigError"]


def test_a_step_refuses_a_config_in_one_line():
    with pytest.raises(TypeError, match="TrainingStep takes a learning.plan.Plan"):
        TrainingStep(Config(), mx.cpu())


IVON_NUMBERS = dict(ess=100, hess_init=0.1, beta1=0.9, beta2=0.99999, weight_decay=1e-4,
                    clip_radius=float("inf"))


@pytest.mark.parametrize("name, value", [
    ("ess", 0), ("ess", True), ("hess_init", 0.0), ("hess_init", float("nan")),
    ("weight_decay", -1e-4), ("weight_decay", 1e-39), ("beta1", 0.0), ("beta1", 1.0),
    ("beta2", 1.5), ("beta2", "0.9"), ("clip_radius", 0.0), ("clip_radius", -float("inf"))])
def test_ivons_numbers_meet_one_rule_in_the_optimizer_and_the_config(name, value):
    from gluon_bbb.errors import ConfigError
    from gluon_bbb.learning.ivon import IVON
    from gluon_bbb.learning.plan import check_ivon_numbers
    check_ivon_numbers(**IVON_NUMBERS)
    refusals = []
    for build in (lambda: check_ivon_numbers(**dict(IVON_NUMBERS, **{name: value})),
                  lambda: IVON(**dict(IVON_NUMBERS, **{name: value})),
                  lambda: Config.from_dict(dict(
                      {"ivon_" + key: number for key, number in IVON_NUMBERS.items()
                       if key != "clip_radius"}, model="ivon", parametrization="log_variance",
                      **{"ivon_" + name: value}))):
        with pytest.raises(ConfigError) as caught:
            build()
        refusals.append((caught.value.field, caught.value.requirement))
    assert refusals[0][0] == "ivon_" + name
    assert refusals[1] == refusals[0]
    if name != "ess":  # the config's ess is a count of examples, a whole number
        assert refusals[2] == refusals[0]
    else:
        assert refusals[2][0] == "ivon_ess"


def test_a_new_update_rule_is_one_class_and_its_entry(monkeypatch):
    """SGD with momentum, a rule of the user's own: once in ``OPTIMIZERS`` a config names it,
    the step keeps its state (a momentum vector each for mu and rho) and updates by it: the
    second update is 0.9 times the first plus plain SGD's from where the first left off."""
    class Momentum(UpdateRule):
        name, state_vectors = "momentum", 2

        def create(self, plan, num_update=0, num_train=None, native=False):
            return mx.optimizer.SGD(learning_rate=plan.schedule.learning_rate, momentum=0.9,
                                    rescale_grad=1.0, wd=0.0, begin_num_update=num_update)
    fields = dict(model="deterministic", num_inputs=12, num_hidden_units=9, num_outputs=3,
                  learning_rate=0.05, seed=5)
    with pytest.raises(ConfigError, match="optimizer must be one of sgd, adam"):
        Config(optimizer="momentum", **fields)
    monkeypatch.setitem(OPTIMIZERS, "momentum", Momentum())
    rng = np.random.default_rng(1)
    X, y = nd.array(rng.normal(size=(6, 12))), nd.one_hot(nd.array(rng.integers(0, 3, 6)), 3)
    step = TrainingStep(Config(optimizer="momentum", **fields).build_plan(), mx.cpu())
    assert [len(state) for state in step.state_arrays()] == [1, 1]
    start = step.mu.asnumpy()
    step(X, y, 0.1)
    first = step.mu.asnumpy() - start
    sgd = TrainingStep(Config(**fields).build_plan(), mx.cpu(), mus=[m.copy() for m in step.mus])
    sgd(X, y, 0.1)
    plain = sgd.mu.asnumpy() - (start + first)
    step(X, y, 0.1)
    np.testing.assert_allclose(step.mu.asnumpy() - (start + first), 0.9 * first + plain,
                               rtol=1e-4, atol=1e-7)
    assert not np.allclose(0.9 * first + plain, plain, atol=1e-6)

"""A user's subclass of a built-in prior, parametrization or estimator that overrides its
formula trains with that formula: every fast path written for the built-in's formula (a
hand-written gradient, a closed form, a code of the C kernels) steps aside for it
(``family/formulas.py``), the run trains on the ndarray backend and its first lines say why.
Subclasses of every built-in, with changed formulas, are drawn at random (Hypothesis) and
their gradients checked against autograd of the plain loss with the user's formula."""
import math

import numpy as np
import pytest
from hypothesis import assume, given, strategies as st
from mxnet import nd

from gluon_bbb import Config, ConfigError, combined_loss_gradients, train
from gluon_bbb.family import estimators, kl as kl_estimates
from gluon_bbb.family.elementwise import operators
from gluon_bbb.family.formulas import describe_lost, lost_fast_paths
from gluon_bbb.family.parametrizations import LogVariance, Softplus
from gluon_bbb.family.priors import GaussianPrior, ScaleMixturePrior
from gluon_bbb.learning.ndarray_backend import NetworkGraph, draw_size
from gluon_bbb.learning.step import choose_backend
from test_estimators import networks, problem, reference
from test_step import assert_matches


# A Laplace density in a Gaussian prior's clothes: every fast path GaussianPrior writes (the sum
# as a dot product, the hand-written gradient, the closed forms, the sampler, the kernel code)
# is the Gaussian's, and must not be used.
class LaplaceAsGaussian(GaussianPrior):
    name = "test_laplace_as_gaussian"

    def __init__(self, sigma_p=0.3):
        self.sigma_p = sigma_p

    def log_density(self, x, F=None):
        return -operators(F).abs(x) / self.sigma_p - math.log(2 * self.sigma_p)

    def plain(self, w):
        return nd.sum(-nd.abs(w) / self.sigma_p - math.log(2 * self.sigma_p))


class LaplaceAsMixture(ScaleMixturePrior):
    name = "test_laplace_as_mixture"

    def log_density(self, x, F=None):
        return -operators(F).abs(x) / self.sigma_p1 - math.log(2 * self.sigma_p1)

    def plain(self, w):
        return nd.sum(-nd.abs(w) / self.sigma_p1 - math.log(2 * self.sigma_p1))


class TwiceSoftplus(Softplus):
    name = "test_twice_softplus"

    def sigma(self, rho, F=None):
        return 2.0 * super().sigma(rho, F)

    @staticmethod
    def plain(rho):
        return 2.0 * nd.log(1 + nd.exp(rho))


class CubeRootVariance(LogVariance):
    name = "test_cube_root_variance"

    def sigma(self, rho, F=None):
        return operators(F).exp(rho / 3.0)

    @staticmethod
    def plain(rho):
        return nd.exp(rho / 3.0)


def halving(base, name):
    """A subclass of the estimator ``base`` whose draw takes half the noise it is given."""
    def draw(self, graph, X, y, mu, sigma, eps, kl):
        return base.draw(self, graph, X, y, mu, sigma, eps * 0.5, kl)
    return type("Halving" + base.__name__, (base,), {"name": name, "draw": draw})


HALVING = {"sample": halving(estimators.WeightSampling, "test_halving_sample"),
           "lrt": halving(estimators.LocalReparametrization, "test_halving_lrt"),
           "flipout": halving(estimators.Flipout, "test_halving_flipout")}
PRIORS = {"gaussian": lambda: LaplaceAsGaussian(0.3),
          "mixture": lambda: LaplaceAsMixture(0.25, 0.4, 0.1)}
PARAMETRIZATIONS = {"softplus": TwiceSoftplus, "log_variance": CubeRootVariance}


@given(st.sampled_from(["sample", "lrt", "flipout"]), st.booleans(), networks(),
       st.sampled_from(["gaussian", "mixture", None]),
       st.sampled_from(["softplus", "log_variance", None]), st.floats(0.01, 2.0),
       st.integers(1, 4), st.integers(0, 2 ** 32 - 1), st.sampled_from(["float64", "float32"]))
def test_a_users_changed_formula_trains_with_it_and_never_with_the_built_ins_fast_path(
        ctx, estimator, changed_draw, network, prior, parametrization, kl_weight, batch, seed,
        dtype):
    assume(changed_draw or prior or parametrization)  # one formula of the user's at least
    chosen = HALVING[estimator]() if changed_draw else estimators.estimator(estimator)
    prior_object = PRIORS[prior]() if prior else GaussianPrior(0.8)
    sigma_of = (PARAMETRIZATIONS[parametrization]() if parametrization
                else Softplus())
    config, layout, mu, rho, X, y = problem(ctx, network, dtype, seed, batch)
    kl = kl_estimates.kl_estimate("mc")
    # the run's backend: the C kernels serve none of these objects, and say why
    run_config = Config(network=network[0], num_inputs=network[1], num_outputs=3,
                        prior=prior_object, parametrization=sigma_of, estimator=chosen)
    backend, why = choose_backend(run_config.build_plan(), ctx)
    assert backend.name == "ndarray" and "native.table.SERVED" in why
    with pytest.raises(ConfigError, match="backend must be ndarray here"):
        choose_backend(run_config.build_plan(), ctx, "native")
    # its gradients: autograd of the plain loss with the user's formulas
    graph = NetworkGraph(config.build_network())
    size = draw_size(graph, chosen, kl, prior_object, X.shape[0])
    rng = np.random.default_rng(seed + 1)
    eps = nd.array(rng.normal(size=size), ctx=ctx, dtype="float64")
    got = combined_loss_gradients(X, y, mu, rho, [eps.astype(dtype)], prior_object, kl_weight,
                                  graph, chosen, kl, sigma_of)
    data_size = chosen.noise_size(graph, X.shape[0], kl)
    # what the user's draw sees: half the data term's noise (the KL's sample included)
    halved = eps.asnumpy()
    halved[:data_size] *= 0.5 if changed_draw else 1.0
    seen = nd.array(halved, ctx=ctx, dtype="float64")
    f64 = lambda a: a.astype("float64")  # noqa: E731
    expected = reference(estimator, "mc", "reverse", prior_object, network, layout, f64(mu),
                         f64(rho), f64(X), f64(y), seen, kl_weight,
                         sigma_of if parametrization else "softplus")
    assert_matches(got, expected, layout, rtol=1e-9 if dtype == "float64" else 5e-4)


def test_a_subclass_that_changes_no_formula_keeps_every_fast_path(ctx):
    class Renamed(GaussianPrior):
        name = "test_renamed_gaussian"

    class RenamedSoftplus(Softplus):
        name = "test_renamed_softplus"
    assert lost_fast_paths(Renamed(0.5)) == [] and describe_lost(Renamed(0.5)) is None
    assert Renamed(0.5).kernel_args() == GaussianPrior(0.5).kernel_args()
    assert RenamedSoftplus().kernel_code == Softplus().kernel_code
    config = Config(prior=Renamed(0.5), parametrization=RenamedSoftplus(), num_hidden_units=5)
    assert choose_backend(config.build_plan(), ctx)[0].name == "native"


def test_a_subclass_of_no_prior_with_a_kl_of_its_own_trains_with_it_not_the_kernels_zero(ctx):
    """The kernels serve no prior (the weights under a gated network's gates) as a KL of 0; a
    subclass whose ``kl`` is not 0 loses that code, alone and as the weights' part of a gated
    prior, and its KL's gradient reaches the means."""
    from gluon_bbb.family.priors import GatedPrior, NoPrior

    class Shrinking(NoPrior):
        name = "test_shrinking_none"

        def kl(self, mu, sigma, F=None):
            return 0.5 * operators(F).square(mu)
    assert NoPrior().kernel_args() is not None and Shrinking().kernel_args() is None
    gated = "conv:3:3,gate,relu,pool:2,flatten,dense:5,gate,relu,dense:3"
    for prior in (NoPrior(), Shrinking()):
        for network, gate_prior in (("dense:5,relu,dense:3", None), (gated, "log-uniform")):
            config = Config(network=network, num_inputs=36, num_outputs=3, prior=prior,
                            gate_prior=gate_prior, kl="analytic", parametrization="log_variance")
            assert isinstance(config.build_prior(), GatedPrior) == (gate_prior is not None)
            backend, why = choose_backend(config.build_plan(), ctx)
            assert (backend.name == "native") == (type(prior) is NoPrior), why
    config, layout, mu, rho, X, y = problem(ctx, ("dense:5,relu,dense:3", 36), "float64")
    graph = NetworkGraph(config.build_network())
    kl, chosen = kl_estimates.kl_estimate("analytic"), estimators.estimator("sample")
    eps = nd.array(np.random.default_rng(2).normal(size=draw_size(graph, chosen, kl, NoPrior(),
                                                                  X.shape[0])), ctx=ctx,
                   dtype="float64")
    none = combined_loss_gradients(X, y, mu, rho, [eps], NoPrior(), 0.3, graph, chosen, kl)
    own = combined_loss_gradients(X, y, mu, rho, [eps], Shrinking(), 0.3, graph, chosen, kl)
    np.testing.assert_allclose(own[0].asscalar() - none[0].asscalar(),
                               0.3 * 0.5 * (mu.asnumpy() ** 2).sum(), rtol=1e-12)
    np.testing.assert_allclose((own[1] - none[1]).asnumpy(), 0.3 * mu.asnumpy(), rtol=1e-12,
                               atol=1e-15)
    np.testing.assert_array_equal(own[2].asnumpy(), none[2].asnumpy())


def test_the_run_says_which_fast_paths_a_users_formula_retires(ctx, mnist):
    lines = []
    train(Config(prior=LaplaceAsGaussian(0.3), parametrization=TwiceSoftplus(), epochs=1,
                 train_size=256, num_hidden_units=10, seed=0), mnist, ctx, log=lines.append,
          progress=False)
    first = lines[0].splitlines()
    assert first[0] == "backend: ndarray (MXNet operators, %s)" % ctx
    assert first[2].startswith("  your formula: LaplaceAsGaussian overrides GaussianPrior's "
                               "log_density; not used: __call__, closed_form_kl,")
    assert any(line.startswith("  your formula: TwiceSoftplus overrides Softplus's sigma; not "
                               "used: kernel_code, rho_for, sigma_gradient") for line in first)
    assert not LaplaceAsGaussian(0.3).has_closed_form_kl  # --kl analytic is refused for it
    with pytest.raises(ConfigError, match="kl must be mc with the test-laplace-as-gaussian"):
        Config(prior=LaplaceAsGaussian(0.3), kl="analytic")


USERS_MODULE = '''
from gluon_bbb.family.estimators import WeightSampling
from gluon_bbb.family.parametrizations import Softplus


class Halving(WeightSampling):
    name = "users_halving_sample"

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        return super().draw(graph, X, y, mu, sigma, eps * 0.5, kl)


class Twice(Softplus):
    name = "users_twice_softplus"

    def sigma(self, rho, F=None):
        return 2.0 * super().sigma(rho, F)
'''


@pytest.mark.slow
def test_every_command_reads_a_run_of_the_users_classes_or_names_the_module(tmp_path):
    from commands import EVALUATE, PRUNE, PYTHON, TRAIN, assert_one_line_error, run
    (tmp_path / "users_formulas.py").write_text(USERS_MODULE)
    (tmp_path / "train_it.py").write_text(
        "import sys\nfrom gluon_bbb import Config, load_mnist, train\n"
        "from users_formulas import Halving, Twice\n"
        "train(Config(estimator=Halving(), parametrization=Twice(), epochs=1, train_size=500, "
        "num_hidden_units=10, seed=0), load_mnist(), __import__('mxnet').cpu(), "
        "out_dir=sys.argv[1], log=lambda line: None)\n")
    proc = run([PYTHON, "train_it.py", "run"], cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "run" / "config.json") as f:
        assert __import__("json").load(f)["classes"] == {
            "estimator": "users_formulas:Halving", "parametrization": "users_formulas:Twice"}
    # a command in another directory cannot import the module: one line naming it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run(PRUNE, "--checkpoint", tmp_path / "run", "--proportions", "0", cwd=str(elsewhere))
    assert_one_line_error(proc, "was trained with estimator users_halving_sample, a class of "
                                "the user's own (Halving in module users_formulas)")
    assert "--import users_formulas" in proc.stderr
    # named with --import (or run where Python finds it), every command reads the run
    for cmd, args in ((PRUNE, ["--checkpoint", "run", "--proportions", "0", "0.5"]),
                      (EVALUATE, ["--checkpoint", "run", "--test-samples", "2"]),
                      (TRAIN, ["--out", "run", "--resume", "--epochs", "2",
                               "--test-samples", "0"])):
        proc = run(cmd, *args, "--import", "users_formulas", cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr
    assert_one_line_error(run(PRUNE, "--checkpoint", "run", "--import", "no_such_module",
                              cwd=str(tmp_path)),
                          "--import must be a module Python can import here")

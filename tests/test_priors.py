"""family/priors.py: each prior's density against NumPy, far out and at degenerate weights; the
log-uniform prior's KL and its gradient; the gated prior."""
import math

import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, gaussian_prior, scale_mixture_prior
from gluon_bbb.errors import ConfigError
from gluon_bbb.family.priors import GaussianPrior, LogUniformPrior, ScaleMixturePrior

from test_sparse_priors import numpy_kl
from test_tutorial import nd64, np_log_normal, np_scale_mixture


def numpy_gaussian_kl(mu, sigma, sigma_p):
    return np.log(sigma_p / sigma) + (sigma ** 2 + mu ** 2) / (2 * sigma_p ** 2) - 0.5


GATED = "conv:3:3,gate,relu,flatten,dense:4,gate,relu,dense:3"


def gate_entries(config):
    """A flat boolean mask of the gates' entries, from the network's shapes."""
    network = config.build_network()
    return np.concatenate([np.full(int(np.prod(shape)), i in network.gate_positions())
                           for i, shape in enumerate(network.param_shapes())])


def test_gaussian_prior_sums_log_density(ctx):
    x = np.random.default_rng(2).normal(size=(7, 3))
    got = gaussian_prior(nd64(x, ctx), sigma_p=0.5)
    assert got.shape == (1,) and got.context == ctx
    np.testing.assert_allclose(got.asscalar(), np_log_normal(x, 0, 0.5).sum(), rtol=1e-12)


@pytest.mark.parametrize("pi,s1,s2", [(0.25, 0.75, 0.1), (0.5, 1.0, math.exp(-6)), (0.9, 2.0, 0.3)])
def test_scale_mixture_prior_matches_numpy(ctx, pi, s1, s2):
    x = np.random.default_rng(3).normal(scale=0.5, size=(50,))
    got = scale_mixture_prior(nd64(x, ctx), pi, s1, s2)
    assert got.shape == (1,) and got.context == ctx
    naive = np.log(pi * np.exp(np_log_normal(x, 0, s1))
                   + (1 - pi) * np.exp(np_log_normal(x, 0, s2))).sum()
    np.testing.assert_allclose(got.asscalar(), np_scale_mixture(x, pi, s1, s2), rtol=1e-10)
    np.testing.assert_allclose(got.asscalar(), naive, rtol=1e-8)


def test_scale_mixture_prior_is_finite_far_out(ctx):
    x = np.array([1000.0, -1000.0, 0.0, 40.0], dtype=np.float32)
    got = scale_mixture_prior(nd.array(x, ctx=ctx), 0.25, 0.75, 0.1).asscalar()
    expected = np_scale_mixture(x.astype(np.float64), 0.25, 0.75, 0.1)
    assert np.isfinite(got)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # the tutorial's formula underflows to log(0) there
    with np.errstate(divide="ignore"):
        assert np.log(0.25 * np.exp(np_log_normal(1000.0, 0, 0.75))) == -np.inf


def test_scale_mixture_prior_degenerate_weights(ctx):
    x = nd64([0.3, -1.2], ctx)
    np.testing.assert_allclose(scale_mixture_prior(x, 0.0, 0.75, 0.1).asscalar(),
                               np_log_normal(np.array([0.3, -1.2]), 0, 0.1).sum(), rtol=1e-12)
    np.testing.assert_allclose(scale_mixture_prior(x, 1.0, 0.75, 0.1).asscalar(),
                               np_log_normal(np.array([0.3, -1.2]), 0, 0.75).sum(), rtol=1e-12)


def test_the_kl_is_molchanovs_approximation_and_its_gradient_the_derivative():
    rng = np.random.default_rng(0)
    mu = rng.normal(scale=0.3, size=400)
    sigma = np.exp(rng.uniform(-6, 1, size=400))
    prior = LogUniformPrior()
    as_nd = lambda a: nd.array(a, dtype="float64")  # noqa: E731
    value, d_mu, d_sigma = prior.closed_form_kl(as_nd(mu), as_nd(sigma))
    np.testing.assert_allclose(value.asnumpy(), numpy_kl(mu, sigma), rtol=1e-10, atol=1e-14)
    # the KL falls towards 0 as alpha grows: a switched-off weight costs nothing
    assert numpy_kl(np.array([1e-6]), np.array([1.0]))[0] < 1e-4
    h = 1e-6
    inside = np.abs(np.log(sigma ** 2) - np.log(mu ** 2 + 1e-8)) < 9.9  # the clip is flat beyond
    fd_mu = (numpy_kl(mu + h, sigma) - numpy_kl(mu - h, sigma)) / (2 * h)
    fd_sigma = (numpy_kl(mu, sigma + h) - numpy_kl(mu, sigma - h)) / (2 * h)
    np.testing.assert_allclose(d_mu.asnumpy()[inside], fd_mu[inside], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(d_sigma.asnumpy()[inside], fd_sigma[inside], rtol=1e-5,
                               atol=1e-7)
    # at mu = 0 the gradient stays finite
    _, d_mu, d_sigma = prior.closed_form_kl(as_nd([0.0]), as_nd([0.1]))
    assert np.isfinite(d_mu.asnumpy()).all() and np.isfinite(d_sigma.asnumpy()).all()


def test_the_improper_prior_takes_the_closed_form_only():
    with pytest.raises(ConfigError, match="kl must be analytic with the log-uniform prior"):
        Config(prior="log-uniform")
    with pytest.raises(ConfigError, match="kl_direction must be reverse with the log-uniform"):
        Config(prior="log-uniform", kl="mc", kl_direction="forward")
    assert Config(prior="log-uniform", kl="analytic").build_prior() == LogUniformPrior()


def test_the_blocks_take_the_log_uniform_prior_by_its_closed_form():
    from mxnet import gluon
    from gluon_bbb.networks.blocks import bayesian_layers, kl_term, to_bayesian
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(8, activation="relu"), gluon.nn.Dense(3))
    to_bayesian(net, prior=LogUniformPrior(), parametrization="log_variance", rho_offset=-6.0)
    net.initialize()
    net(nd.ones((2, 5)))
    expected = 0.0
    for layer in bayesian_layers(net):
        mus, rhos, _ = layer.variational_arrays()
        for mu, rho in zip(mus, rhos):
            expected += numpy_kl(mu.asnumpy().astype(np.float64),
                                 np.exp(rho.asnumpy().astype(np.float64) / 2)).sum()
    assert kl_term(net).asscalar() == pytest.approx(expected, rel=1e-4)


def test_the_gated_prior_puts_the_gates_under_their_own_prior():
    """Bayesian Compression's group prior: the gates' KL is the log-uniform prior's, every
    other entry's the Gaussian's, with their derivatives (finite differences); the Monte Carlo
    KL's log density splices the same way where both parts have one."""
    from gluon_bbb.family.priors import GatedPrior, GaussianPrior, ScaleMixturePrior
    config = Config.from_dict(dict(prior="gaussian", sigma_p=0.7, gate_prior="log-uniform",
                                   kl="analytic", parametrization="log_variance", network=GATED,
                                   num_inputs=36, num_outputs=3))
    prior = config.build_prior()
    assert isinstance(prior, GatedPrior) and prior.describe() == (
        "gaussian(sigma_p=0.7) with log_uniform() gates")
    gates = gate_entries(config)
    assert gates.sum() == 3 + 4
    rng = np.random.default_rng(0)
    mu = rng.normal(scale=0.5, size=gates.size)
    sigma = np.exp(rng.uniform(-4, 0, size=gates.size))
    as_nd = lambda a: nd.array(a, dtype="float64")  # noqa: E731
    value, d_mu, d_sigma = prior.closed_form_kl(as_nd(mu), as_nd(sigma))
    expected = lambda m, s: np.where(gates, numpy_kl(m, s), numpy_gaussian_kl(m, s, 0.7))  # noqa
    np.testing.assert_allclose(value.asnumpy(), expected(mu, sigma), rtol=1e-10)
    h = 1e-6
    np.testing.assert_allclose(d_mu.asnumpy(), (expected(mu + h, sigma)
                                                - expected(mu - h, sigma)) / (2 * h), rtol=1e-5)
    np.testing.assert_allclose(d_sigma.asnumpy(), (expected(mu, sigma + h)
                                                   - expected(mu, sigma - h)) / (2 * h),
                               rtol=1e-5)
    # gates under the scale mixture's own Gaussian: the densities splice too
    mixed = Config.from_dict(dict(prior="scale-mixture", pi=0.5, sigma_p1=1.0, sigma_p2=0.1,
                                  sigma_p=0.3, gate_prior="gaussian", network=GATED, num_inputs=36,
                                  num_outputs=3)).build_prior()
    spliced = lambda m: np.where(gates, GaussianPrior(0.3).log_density(  # noqa: E731
        as_nd(m)).asnumpy(), ScaleMixturePrior(0.5, 1.0, 0.1).log_density(as_nd(m)).asnumpy())
    log_density, gradient = mixed.log_density_and_gradient(as_nd(mu))
    assert log_density.asscalar() == pytest.approx(spliced(mu).sum(), rel=1e-12)
    np.testing.assert_allclose(gradient.asnumpy(), (spliced(mu + h) - spliced(mu - h)) / (2 * h),
                               rtol=1e-5, atol=1e-8)
    # the same prior for both is that prior; a network without gates has no gate prior; the
    # improper gates take the closed form only
    assert Config(prior="log-uniform", gate_prior="log-uniform", kl="analytic",
                  network=GATED, num_inputs=36, num_outputs=3).build_prior() == LogUniformPrior()
    with pytest.raises(ConfigError, match="gate_prior must be left unset for a network without"
                                          " gates"):
        Config(prior="gaussian", gate_prior="log-uniform", kl="analytic")
    with pytest.raises(ConfigError, match=r"kl must be analytic with the gaussian\(sigma_p=1.0\)"
                                          r" with log_uniform\(\) gates prior"):
        Config(prior="gaussian", gate_prior="log-uniform", network=GATED, num_inputs=36,
               num_outputs=3)


@pytest.mark.parametrize("build, field", [
    (lambda: GaussianPrior(0.0), "sigma_p"),
    (lambda: GaussianPrior(float("nan")), "sigma_p"),
    (lambda: GaussianPrior(True), "sigma_p"),
    (lambda: ScaleMixturePrior(0.5, -1.0, 0.1), "sigma_p1"),
    (lambda: ScaleMixturePrior.from_settings(0.5, 0.75, 1e-39), "sigma_p2"),
    (lambda: ScaleMixturePrior.from_settings(1.5), "pi"),
    (lambda: ScaleMixturePrior.from_settings(0.0, 0.75, float("inf")), "sigma_p2"),
    (lambda: ScaleMixturePrior.from_settings(1.0, 0.0, 0.1), "sigma_p1"),
])
def test_a_prior_refuses_settings_outside_its_range_naming_the_setting(build, field):
    # the prior's own rule is the one a config and the train command's flags meet
    with pytest.raises(ConfigError) as caught:
        build()
    assert caught.value.field == field
    with pytest.raises(ConfigError) as through_config:
        Config.from_dict({"prior": "gaussian" if field == "sigma_p" else "scale_mixture",
                          field: caught.value.value})
    assert through_config.value.field == field


def test_a_scale_mixture_of_pi_0_or_1_is_its_remaining_gaussian():
    assert ScaleMixturePrior.from_settings(1.0, 0.5, 0.1) == GaussianPrior(0.5)
    assert ScaleMixturePrior.from_settings(0.0, 0.75, 0.2) == GaussianPrior(0.2)
    with pytest.raises(ConfigError, match="sigma_p2"):  # the unused scale is checked too
        ScaleMixturePrior.from_settings(1.0, 0.5, -1.0)
    with pytest.raises(ValueError, match="0 < pi < 1"):
        ScaleMixturePrior(1.0)

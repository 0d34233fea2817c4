"""native/library.py and _fused.c: the C kernels against NumPy formulas, MXNet's optimizers and
the NDArray backend; the checks on the library before it is used (the Philox streams:
test_noise.py; the MXNet operators: test_operators.py)."""
import glob
import math
import os

import mxnet as mx
import numpy as np
import pytest
from hypothesis import given, strategies as st
from mxnet import nd

from gluon_bbb import Config, train
from gluon_bbb.native import library as native
from gluon_bbb.family.estimators import estimator
from gluon_bbb.family.kl import kl_estimate
from gluon_bbb.family.parametrizations import SOFTPLUS
from gluon_bbb.learning.noise import CHUNK, philox_key, philox_normals_reference
from gluon_bbb.family.priors import GaussianPrior, ScaleMixturePrior

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
# every test here needs the built library: skipped without it, failed in CI (conftest.py)
pytestmark = pytest.mark.usefixtures("native_kernels")


def assert_same_run(ours, theirs):
    """Two runs of one config on the two backends: the same parameters to float rounding. Adam
    moves an entry whose gradient is near 0 by up to its rate (1e-3) whatever the gradient's
    size, so a rounding difference can move a few entries by about a step (1.04e-4 after two
    epochs once, with oneDNN held to AVX2): every entry within 1e-3, 99.9% of them within
    1e-5."""
    for a, b in zip(ours.mus + ours.rhos, theirs.mus + theirs.rhos):
        difference = np.abs(a.asnumpy() - b.asnumpy())
        assert difference.max() <= 1e-3, difference.max()
        assert np.quantile(difference, 0.999) < 1e-5, np.quantile(difference, 0.999)


def test_sample_weights_follow_the_formula(ctx):
    rng = np.random.default_rng(0)
    n = 3 * CHUNK + 11
    mu = rng.normal(size=n).astype(np.float32)
    rho = rng.uniform(-30, 30, size=n).astype(np.float32)
    rho[:4] = [-80.0, -100.0, -1e4, 1e4]  # below -80, sigma is held at softplus(-80)
    mu[:4] = 0.0
    eps, w = nd.zeros(n, ctx=ctx), nd.zeros(n, ctx=ctx)
    key = philox_key(3)
    native.sample_weights(nd.array(mu, ctx=ctx), nd.array(rho, ctx=ctx), key, 4, eps, w)
    assert eps.context == ctx and w.context == ctx
    np.testing.assert_allclose(eps.asnumpy(), philox_normals_reference(n, key, 4), atol=2e-6)
    rho64 = np.maximum(rho.astype(np.float64), -80.0)
    sigma = np.maximum(rho64, 0) + np.log1p(np.exp(-np.abs(rho64)))
    np.testing.assert_allclose(w.asnumpy(), mu + sigma * eps.asnumpy().astype(np.float64),
                               rtol=2e-6, atol=2e-6)


def numpy_log_prior(w, prior):
    """(log P(w), d log P / dw) in float64, written from the densities."""
    if isinstance(prior, GaussianPrior):
        s1 = prior.sigma_p
        return -LOG_SQRT_2PI - math.log(s1) - w ** 2 / (2 * s1 ** 2), -w / s1 ** 2
    pi, s1, s2 = prior.pi, prior.sigma_p1, prior.sigma_p2
    log_n1 = -LOG_SQRT_2PI - math.log(s1) - w ** 2 / (2 * s1 ** 2)
    log_n2 = -LOG_SQRT_2PI - math.log(s2) - w ** 2 / (2 * s2 ** 2)
    a, b = math.log(pi) + log_n1, math.log1p(-pi) + log_n2
    log_p = np.logaddexp(a, b)
    r1 = np.exp(a - log_p)
    return log_p, -w * (r1 / s1 ** 2 + (1 - r1) / s2 ** 2)


def numpy_kl_terms(mu, sigma, eps, prior, kl):
    """(KL entries, d/dw through w = mu + sigma eps, d/dmu direct, d/dsigma direct), float64."""
    if kl == "analytic":
        s1 = prior.sigma_p
        return (np.log(s1 / sigma) + (sigma ** 2 + mu ** 2) / (2 * s1 ** 2) - 0.5,
                0.0, mu / s1 ** 2, sigma / s1 ** 2 - 1 / sigma)
    w = (mu + sigma * eps).astype(np.float32).astype(np.float64)
    log_prior, dlog_prior = numpy_log_prior(w, prior)
    log_q = -np.log(sigma) - eps ** 2 / 2 - LOG_SQRT_2PI
    return log_q - log_prior, -dlog_prior, 0.0, -1 / sigma


@pytest.mark.parametrize("prior,kl", [(GaussianPrior(0.7), "mc"),
                                      (ScaleMixturePrior(0.25, 1.0, math.exp(-6.0)), "mc"),
                                      (GaussianPrior(0.7), "analytic")])
def test_kl_gradients_follow_the_formula(ctx, prior, kl):
    rng = np.random.default_rng(1)
    n = 2 * CHUNK + 3
    rho = np.concatenate([rng.uniform(-12, 4, size=n - 4), [-40.0, -20.0, 15.0, 40.0]])
    eps = rng.normal(size=n)
    mu = rng.normal(scale=0.05, size=n)
    mu[:10] = [0, 1e-6, -1e-6, 5.0, -5.0, 0.5, 30.0, -30.0, 1e-3, 0.0]  # tails of the mixture
    mu, rho, eps = (a.astype(np.float32).astype(np.float64) for a in (mu, rho, eps))
    sigma = np.maximum(rho, 0) + np.log1p(np.exp(-np.abs(rho)))
    w = (mu + sigma * eps).astype(np.float32).astype(np.float64)
    grad_w = rng.normal(size=n)  # the data term's gradient dNLL/dw
    kl_weight = 0.01
    to = lambda a: nd.array(a, ctx=ctx, dtype="float32")
    grad_mu, grad_rho = nd.zeros(n, ctx=ctx), nd.zeros(n, ctx=ctx)
    total = native.kl_gradients(to(mu), to(rho), to(eps), to(w), to(grad_w), to(grad_w),
                                estimator("sample"), kl_weight, prior, kl_estimate(kl), SOFTPLUS,
                                grad_mu, grad_rho)

    entries, kl_w, kl_mu, kl_sigma = numpy_kl_terms(mu, sigma, eps, prior, kl)
    assert total == pytest.approx(np.sum(entries), rel=1e-6)
    expected_mu = grad_w + kl_weight * (kl_w + kl_mu)
    expected_sigma = grad_w * eps + kl_weight * (kl_w * eps + kl_sigma)
    sigmoid = 1.0 / (1.0 + np.exp(-rho))
    np.testing.assert_allclose(grad_mu.asnumpy(), expected_mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad_rho.asnumpy(), expected_sigma * sigmoid, rtol=1e-5, atol=1e-6)
    assert grad_mu.context == ctx and grad_rho.context == ctx


def numpy_prior_precision(w, prior):
    """p(w) = -(d log P / dw) / w in float64, written from the densities (finite at w = 0)."""
    if isinstance(prior, GaussianPrior):
        return np.full_like(w, 1.0 / prior.sigma_p ** 2)
    pi, s1, s2 = prior.pi, prior.sigma_p1, prior.sigma_p2
    a = math.log(pi) - math.log(s1) - w ** 2 / (2 * s1 ** 2)
    b = math.log1p(-pi) - math.log(s2) - w ** 2 / (2 * s2 ** 2)
    with np.errstate(over="ignore"):  # exp(b - a) = inf where the first component's share is 0
        share1 = 1.0 / (1.0 + np.exp(b - a))
    return share1 / s1 ** 2 + (1.0 - share1) / s2 ** 2


PRIORS_DRAWN = st.one_of(
    st.builds(GaussianPrior, st.floats(0.01, 3.0)),
    st.builds(ScaleMixturePrior, st.floats(0.01, 0.99), st.floats(0.05, 3.0),
              st.floats(1e-3, 0.5)))


@given(st.integers(1, 3 * CHUNK), PRIORS_DRAWN, st.one_of(st.just(0.0), st.floats(1e-6, 10.0)),
       st.booleans(),
       st.integers(0, 2 ** 32 - 1))
def test_prior_terms_follow_the_formula(ctx, size, prior, scale, with_precision, seed):
    """``bbb_prior_terms`` (a MAP model's prior, IVON's) against the densities in NumPy and the
    prior's own operators, at weights of every magnitude: the summed log density, the gradient
    of -scale log P and the precision scale p."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=size) * 10.0 ** rng.uniform(-8, 1.3, size=size)
    w[rng.random(size) < 0.01] = 0.0
    w = w.astype(np.float32).astype(np.float64)
    x = nd.array(w, ctx=ctx)
    total, gradient, precision = native.prior_terms(prior, x, scale, with_precision)
    log_p, dlog_p = numpy_log_prior(w, prior)
    # float32 sums terms of order 1 (the components' constants) per entry: a density near 1
    # (log_p near 0) keeps their rounding, a few 1e-7 an entry
    rounding = 1e-5 * np.sum(np.abs(log_p)) + 2e-6 * size
    assert total == pytest.approx(np.sum(log_p), rel=1e-5, abs=rounding)
    np.testing.assert_allclose(gradient.asnumpy(), -scale * dlog_p, rtol=2e-5,
                               atol=1e-30)
    assert (precision is None) == (not with_precision)
    if with_precision:
        np.testing.assert_allclose(precision.asnumpy(), scale * numpy_prior_precision(w, prior),
                                   rtol=2e-5)
        np.testing.assert_allclose(precision.asnumpy(),
                                   scale * prior.gradient_precision(x).asnumpy(), rtol=2e-5)
    # the operators' densities entry by entry, summed in float64: MXNet's float32 sum of them
    # (``log_density_and_gradient``'s total) rounds by 1e-5 of it over 22,569 entries
    ops_log_p = prior.log_density(x).asnumpy().astype(np.float64)
    assert total == pytest.approx(np.sum(ops_log_p), rel=1e-5, abs=rounding)
    _, ops_gradient = prior.log_density_and_gradient(x)
    np.testing.assert_allclose(gradient.asnumpy(), -scale * ops_gradient.asnumpy(), rtol=2e-5,
                               atol=1e-30)
    assert gradient.context == ctx


def test_prior_terms_serve_only_the_formulas_they_were_written_for(ctx):
    """A subclass that changes the density, a prior the kernel does not know, a negative scale
    and a float64 array get no kernel (None: the caller takes the prior's operators); a code
    the C code does not know gives NaN, never another prior's terms."""
    from gluon_bbb.family.priors import LogUniformPrior

    class Wider(ScaleMixturePrior):
        name = "wider_mixture_test"

        def log_density(self, x, F=None):
            return super().log_density(x / 2.0, F)

    x = nd.array([0.5, -0.01, 0.0], ctx=ctx)
    assert native.prior_terms(Wider(), x, 1.0) is None
    assert native.prior_terms(LogUniformPrior(), x, 1.0) is None
    assert native.prior_terms(GaussianPrior(1.0), x, -1.0) is None
    assert native.prior_terms(GaussianPrior(1.0), x.astype("float64"), 1.0) is None
    gradient, precision = nd.zeros(3, ctx=ctx), nd.zeros(3, ctx=ctx)
    total = native.library().bbb_prior_terms(
        3, native._host_pointer(x), 7, 0.5, 1.0, 0.1, 1.0,
        native._host_pointer(gradient, write=True), native._host_pointer(precision, write=True))
    assert math.isnan(total)
    assert np.isnan(gradient.asnumpy()).all() and np.isnan(precision.asnumpy()).all()


@given(st.integers(1, 3 * CHUNK), st.sampled_from(["softplus", "log_variance"]),
       st.integers(0, 2 ** 32 - 1))
def test_kept_follows_the_log_uniform_rule(ctx, size, parametrization_name, seed):
    """``bbb_kept`` (sparse variational dropout's removal) against the rule in NumPy: an entry
    stays where log alpha = log sigma^2 - log(mu^2 + 1e-8) is at most 3 and mu is not 0, and
    the means of the others become 0; at means of every magnitude, zeros included. Entries
    within 1e-4 of the threshold may fall either way (float32 logarithms)."""
    from gluon_bbb.family.parametrizations import parametrization
    from gluon_bbb.family.priors import LogUniformPrior
    rng = np.random.default_rng(seed)
    mu = (rng.normal(size=size) * 10.0 ** rng.uniform(-6, 0.5, size=size)).astype(np.float32)
    mu[rng.random(size) < 0.05] = 0.0
    rho = rng.normal(-6.0, 4.0, size=size).astype(np.float32)
    chosen = parametrization(parametrization_name)
    sigma = (np.log1p(np.exp(rho.astype(np.float64))) if parametrization_name == "softplus"
             else np.exp(rho.astype(np.float64) / 2))
    log_alpha = np.clip(np.log(sigma ** 2) - np.log(mu.astype(np.float64) ** 2 + 1e-8), -10, 10)
    expected = (log_alpha <= 3) & (mu != 0)
    mu_nd, keep = nd.array(mu, ctx=ctx), nd.empty(size, ctx=ctx)
    assert native.kept(LogUniformPrior(), chosen, mu_nd, nd.array(rho, ctx=ctx), keep)
    got = keep.asnumpy()
    assert set(np.unique(got)) <= {0.0, 1.0}
    near = np.abs(log_alpha - 3) < 1e-4
    np.testing.assert_array_equal(got[~near], expected[~near])
    np.testing.assert_array_equal(mu_nd.asnumpy(), np.where(got == 1, mu, 0.0))
    # the kernel serves the rule it was written for only
    class Stricter(LogUniformPrior):
        name = "stricter_log_uniform_test"

        def switched_off(self, mu, sigma):
            return self.log_alpha(mu, sigma) > 1.0

    assert not native.kept(Stricter(), chosen, mu_nd, nd.array(rho, ctx=ctx), keep)
    assert not native.kept(GaussianPrior(), chosen, mu_nd, nd.array(rho, ctx=ctx), keep)

    earlier_cut = LogUniformPrior()  # the same class, another constant than the C code's
    earlier_cut.PRUNE_LOG_ALPHA = 2.0
    assert native.prior_args(earlier_cut) is None and native.prior_args(LogUniformPrior())
    assert not native.kept(earlier_cut, chosen, mu_nd, nd.array(rho, ctx=ctx), keep)


MIXTURE = dict(prior="scale_mixture", pi=0.25, sigma_p1=1.0, sigma_p2=math.exp(-6.0))
SPARSE = dict(prior="log_uniform", kl="analytic", parametrization="log_variance",
              learning_rate=1e-3, rho_offset=-6.0, remove_switched_off=True)


@pytest.mark.parametrize("settings", [
    dict(MIXTURE, seed=3, num_hidden_units=400), dict(MIXTURE, model="deterministic"),
    dict(MIXTURE, model="mcdropout"), dict(SPARSE, estimator="lrt"),
    dict(SPARSE, estimator="sample")])
def test_a_run_trains_the_same_on_both_backends(ctx, mnist, settings):
    """The kernels and MXNet's operators train the same run up to float rounding: Bayes by
    Backprop under the scale mixture, the prior as weight decay (``bbb_prior_terms``), sparse
    variational dropout removing what its rule switches off (the same share switched off)."""
    config = Config.from_dict(dict(dict(epochs=2, train_size=1500, seed=4, optimizer="adam",
                                        num_hidden_units=100), **settings))
    lines = []
    runs = [train(config, mnist, ctx, log=lines.append, progress=False, backend=backend)
            for backend in ("native", "ndarray")]
    assert lines[0] == "backend: native (C kernels, %s)" % ctx
    assert lines[3] == "backend: ndarray (MXNet operators, %s)\n  native not used: asked for" % ctx
    assert all(a.context == ctx for a in runs[0].mus + runs[0].rhos)
    assert_same_run(*runs)
    if config.remove_switched_off:
        assert runs[0].history[-1]["switched_off"] > 0.05
    for ours, theirs in zip(runs[0].history, runs[1].history):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-3)
        assert ours.get("switched_off") == pytest.approx(theirs.get("switched_off"), abs=1e-3)
        assert ours["test_accuracy"] == pytest.approx(theirs["test_accuracy"], abs=0.002)


@pytest.mark.parametrize("kl_name", ["mc", "analytic"])
def test_an_infinite_kl_sum_reaches_the_loss(ctx, mnist, kl_name):
    """A diverging run's KL sum can overflow before its data term does (seen on an AVX2
    machine at learning rate 100): the loss the kernels give is then non-finite, for the loop
    to stop the run on, where MXNet's scalar addition refuses an infinite scalar."""
    from gluon_bbb.learning.step import NetworkGraph
    from gluon_bbb.learning.noise import PhiloxNoise
    config = Config(num_hidden_units=20, kl=kl_name)
    graph = NetworkGraph(config.build_network())
    rng = np.random.default_rng(0)
    mu = rng.normal(size=graph.layout.size).astype(np.float32) * 0.1
    mu[-1] = 3e38  # the last bias: the data term's logits stay finite where w**2 is not
    X = nd.array(mnist.train_images[:8], ctx=ctx)
    y = nd.one_hot(nd.array(mnist.train_labels[:8], ctx=ctx), 10)
    loss = native.loss_gradients(X, y, nd.array(mu, ctx=ctx),
                                 nd.full(graph.layout.size, -5.0, ctx=ctx),
                                 PhiloxNoise(ctx, seed=0), 1, GaussianPrior(1.0), 0.5, graph,
                                 native.Workspace(graph.layout.size, ctx), config.kl_kind,
                                 config.estimator_kind)[0]
    assert loss.shape == (1,) and not np.isfinite(loss.asnumpy()).all()


@pytest.mark.parametrize("model", ["deterministic", "mcdropout"])
def test_a_map_run_with_the_scale_mixture_agrees_on_both_backends(ctx, mnist, model):
    """The prior as weight decay on the kernel (``bbb_prior_terms``) and on MXNet's operators:
    the same run up to float rounding."""
    config = Config.from_dict(dict(epochs=2, train_size=1500, seed=4, model=model,
                                   prior="scale_mixture", pi=0.25, sigma_p1=1.0,
                                   sigma_p2=math.exp(-6.0), optimizer="adam", num_hidden_units=100))
    runs = [train(config, mnist, ctx, log=lambda line: None, progress=False, backend=backend)
            for backend in ("native", "ndarray")]
    assert_same_run(*runs)
    for ours, theirs in zip(runs[0].history, runs[1].history):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-4)
        assert ours["test_accuracy"] == pytest.approx(theirs["test_accuracy"], abs=0.002)


@pytest.mark.parametrize("name,options", [("sgd", {}), ("adam", {}),
                                          ("sgd", {"wd": 0.01, "rescale_grad": 0.5}),
                                          ("adam", {"wd": 0.01, "rescale_grad": 0.5})])
def test_optimizer_update_equals_mxnet(ctx, name, options):
    rng = np.random.default_rng(0)
    start = rng.normal(size=1001).astype(np.float32)
    ours, theirs = nd.array(start, ctx=ctx), nd.array(start, ctx=ctx)
    opt_ours = mx.optimizer.create(name, learning_rate=0.01, **options)
    opt_theirs = mx.optimizer.create(name, learning_rate=0.01, **options)
    state_ours, state_theirs = opt_ours.create_state(0, ours), opt_theirs.create_state(0, theirs)
    for _ in range(25):
        # gradients of every magnitude down to float32's subnormals, and zeros: Adam's second
        # moment of the tiniest is subnormal, where the kernel's square root once gave NaN
        grad = rng.normal(size=1001) * 10.0 ** rng.uniform(-25, 1, size=1001)
        grad[::10] = 0.0
        grad = nd.array(grad.astype(np.float32), ctx=ctx)
        native.optimizer_update(opt_ours, 0, ours, grad, state_ours)
        opt_theirs.update(0, theirs, grad, state_theirs)
    assert np.isfinite(ours.asnumpy()).all()
    np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=0, atol=5e-6)
    assert opt_ours.num_update == opt_theirs.num_update == 25
    assert ours.context == ctx
    if name == "adam":
        for a, b in zip(state_ours, state_theirs):
            np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-7)


def test_loading_the_library_keeps_denormals():
    # linked without -ffast-math: loading it must not switch the process to flush-to-zero
    assert native.available()
    tiny = np.float32(1e-40)
    assert tiny * np.float32(1.0) != 0.0
    assert nd.array([1e-40], dtype="float32").__mul__(1.0).asnumpy()[0] != 0.0


def test_asking_for_the_native_backend_where_it_cannot_serve_is_an_error(ctx, mnist,
                                                                        monkeypatch):
    from gluon_bbb.errors import ConfigError
    with pytest.raises(ConfigError, match="backend must be ndarray here.*the forward mc KL"):
        train(Config(epochs=1, train_size=256, kl_direction="forward"), mnist, ctx,
              log=lambda line: None, progress=False, backend="native")
    monkeypatch.setattr(native, "_load", lambda: (None, "not built (test)"))
    with pytest.raises(ConfigError, match="backend must be ndarray here: not built"):
        train(Config(epochs=1, train_size=256), mnist, ctx,
              log=lambda line: None, progress=False, backend="native")


def test_the_c_kernels_serve_what_the_table_declares_and_refuse_the_rest(ctx, native_kernels):
    from gluon_bbb.native import table as kernels
    from gluon_bbb.family import estimators, kl as kl_estimates
    from gluon_bbb.family.parametrizations import LogVariance
    from gluon_bbb.family.priors import LogUniformPrior, NoPrior
    served = {(e.name, k.name, p.name, s.name)
              for e in estimators.ESTIMATORS for k in kl_estimates.KL_ESTIMATES
              for p in (GaussianPrior(), ScaleMixturePrior(), LogUniformPrior(), NoPrior())
              for s in (SOFTPLUS, LogVariance()) if native_kernels.serves(e, k, p, s)}
    assert served == {row for row in kernels.SERVED}
    # 3 estimators x (mc x 2 priors + the Gaussian's closed form + the closed forms of the
    # log-uniform prior and of none under 2 parametrizations)
    assert len(served) == 21
    assert not any(native_kernels.serves(e, kl_estimates.kl_estimate(k, "forward"), GaussianPrior(),
                                         SOFTPLUS)
                   for e in estimators.ESTIMATORS for k in ("mc", "analytic"))
    # called with a prior code it does not know, the kernel computes nothing it could mistake
    # for another prior's formulas
    n = 16
    arrays = [nd.ones(n, ctx=ctx) for _ in range(8)]
    for prior_code, parametrization_code in ((7, 0), (0, 1)):
        total = native_kernels.library().bbb_kl_gradients(
            n, *(native_kernels._host_pointer(a) for a in arrays[:6]), 0, 1.0, 0, prior_code,
            parametrization_code, 0.5, 1.0, 0.1, None,
            native_kernels._host_pointer(arrays[6], write=True),
            native_kernels._host_pointer(arrays[7], write=True))
        assert math.isnan(total)
        assert np.isnan(arrays[6].asnumpy()).all() and np.isnan(arrays[7].asnumpy()).all()


def test_a_prior_the_c_kernels_do_not_know_trains_on_the_ndarray_backend(ctx, mnist,
                                                                       native_kernels,
                                                                       monkeypatch):
    from gluon_bbb.errors import ConfigError
    from gluon_bbb.learning.step import choose_backend
    config = Config(epochs=1, train_size=256, prior="scale_mixture")
    backend, why = choose_backend(config.build_plan(), ctx)
    assert (backend, why) == ("native", None)
    monkeypatch.setitem(native_kernels.CODES, "gluon_bbb.family.priors.ScaleMixturePrior", 7)  # a code it does not serve
    not_served = ("the C kernels serve no estimator sample with the reverse mc KL, prior "
                  "scale_mixture and parametrization softplus (native.table.SERVED)")
    backend, why = choose_backend(config.build_plan(), ctx)
    assert (backend, why) == ("ndarray", not_served)
    with pytest.raises(ConfigError, match="backend must be ndarray here: the C kernels serve "
                                          "no estimator sample"):
        choose_backend(config.build_plan(), ctx, "native")
    with pytest.raises(ValueError, match=r"do not serve estimator sample, the reverse mc KL, "
                                         r"prior scale_mixture\(pi=.*\) and parametrization "
                                         r"softplus"):
        native_kernels.kl_gradients(*[nd.ones(4, ctx=ctx)] * 6, estimator("sample"), 1.0,
                                    config.build_prior(), kl_estimate("mc"), SOFTPLUS,
                                    nd.zeros(4, ctx=ctx), nd.zeros(4, ctx=ctx))
    lines = []
    train(config, mnist, ctx, log=lines.append, progress=False)
    assert lines[0].endswith("native not used: %s" % not_served)


@pytest.mark.parametrize("missing", ["kernels", "operators"])
def test_training_without_the_built_libraries_gives_the_same_run(ctx, mnist, monkeypatch,
                                                                native_operators, missing):
    """No C compiler at install: NumPy's Philox draws the same noise, MXNet does the rest; no
    C++ compiler (or MXNet refuses the operators): the native backend's local reparametrization
    builds its graph from MXNet's operators alone. Each run says so on its first line and trains
    the same run to float rounding."""
    config = Config(epochs=1, train_size=1024, seed=5,
                    **(dict(network="lenet", estimator="lrt", kl="analytic")
                       if missing == "operators" else {}))
    built = train(config, mnist, ctx, log=lambda line: None, progress=False)
    if missing == "kernels":
        monkeypatch.setattr(native, "_load", lambda: (None, "not built (test)"))
        first = "backend: ndarray (MXNet operators, %s)\n  native not used: not built (test)"
    else:
        monkeypatch.setattr(native_operators, "_load", lambda: (False, "not built (test)"))
        monkeypatch.setattr(native, "_accelerated_symbols",
                            native._accelerated_symbols.__wrapped__)
        first = "backend: native (C kernels, %s)\n  native operators not used: not built (test)"
    lines = []
    unbuilt = train(config, mnist, ctx, log=lines.append, progress=False)
    assert lines[0] == first % ctx
    for ours, theirs in zip(built.mus + built.rhos, unbuilt.mus + unbuilt.rhos):
        assert theirs.context == ctx
        np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=0, atol=1e-4)


@pytest.mark.parametrize("problem", ["version", "_fused.c", "_conv_tiles.h"])
def test_a_library_that_does_not_match_the_source_is_not_used(monkeypatch, capfd, problem):
    real_getmtime = os.path.getmtime
    if problem == "version":
        monkeypatch.setattr(native, "ABI_VERSION", native.ABI_VERSION + 1)
    else:  # a source edited a second after the library was built, however long ago that was
        built = max(real_getmtime(path) for path in glob.glob(
            os.path.join(os.path.dirname(native.__file__), "_fused*.so")))
        monkeypatch.setattr(os.path, "getmtime", lambda path: built + 1.0
                            if path.endswith(problem) else real_getmtime(path))
    native._load.cache_clear()
    try:
        assert not native.available()
        assert not native.available()  # reported once, on one line
        err = capfd.readouterr().err
        assert err.count("\n") == 1 and err.startswith("gluon_bbb: warning: ")
        assert err.rstrip().endswith("; using the ndarray backend")
        assert ("has version %d, this gluon_bbb needs %d" % (
            native.ABI_VERSION - 1, native.ABI_VERSION) if problem == "version"
            else "is older than %s" % problem) in err
    finally:
        monkeypatch.undo()
        native._load.cache_clear()
    assert native.available()


def test_a_forward_pass_pools_in_the_kernel_for_the_exact_built_in_layers_only(
        ctx, native_kernels, monkeypatch):
    """Outside autograd, on float32, a convolution and the max pooling (and a ReLU beside it,
    which commutes with the pooling) after it are computed in one kernel call; a user's
    subclass of any of the three is computed by its own formula, never moved or fused; the
    kernel has no backward pass (under autograd: MXNet's operators)."""
    from mxnet import autograd
    from gluon_bbb.networks.layers import Conv2D, Dense, Flatten, MaxPool2D, ReLU
    from gluon_bbb.networks.network import Network
    calls = []
    kernel = native.conv_maxpool
    monkeypatch.setattr(native, "conv_maxpool",
                        lambda *args: calls.append(args[4]) or kernel(*args))
    doubled = type("Doubled", (Conv2D,), {"__call__": lambda self, F, h, p, s: 2 * Conv2D.__call__(
        self, F, h, p, s)})
    mean_pool = type("MeanPool", (MaxPool2D,), {"__call__": lambda self, F, h, p, s: F.Pooling(
        h, kernel=(self.size,) * 2, stride=(self.size,) * 2, pool_type="avg")})
    absolute = type("Absolute", (ReLU,), {"__call__": lambda self, F, h, p, s: F.abs(h)})
    rng = np.random.default_rng(1)
    # the kernel's calls, by whether each computed the ReLU too
    for layers, expected in (([Conv2D(6, 3), MaxPool2D(2)], [False]),
                             ([doubled(6, 3), MaxPool2D(2)], []),
                             ([Conv2D(6, 3), mean_pool(2)], []),
                             ([Conv2D(6, 3), ReLU(), MaxPool2D(2)], [True]),
                             ([Conv2D(6, 3), MaxPool2D(2), ReLU()], [True]),
                             ([Conv2D(6, 3), absolute(), MaxPool2D(2)], []),
                             ([Conv2D(6, 3), MaxPool2D(2), absolute()], [False])):
        network = Network(layers + [Flatten(), Dense(3)], input_shape=(2, 8, 8))
        params = [nd.array(rng.normal(size=s), ctx=ctx) for s in network.param_shapes()]
        X = nd.array(rng.normal(size=(5, 128)), ctx=ctx)
        # the layers one by one, as listed
        h, shape, rest = nd.reshape(X, shape=(-1, 2, 8, 8)), (2, 8, 8), list(params)
        for layer in network.layers:
            count = len(layer.param_shapes(shape)[0])
            h, shape, rest = layer(nd, h, rest[:count], shape), layer.param_shapes(shape)[1], \
                rest[count:]
        del calls[:]
        np.testing.assert_allclose(network(X, params, F=nd).asnumpy(), h.asnumpy(), rtol=1e-5,
                                   atol=1e-5)
        assert calls == []  # MXNet's operators, handed as F
        np.testing.assert_allclose(network(X, params).asnumpy(), h.asnumpy(), rtol=1e-5,
                                   atol=1e-5)
        assert calls == expected
        with autograd.record():
            recorded = network(X, params)
        network(X.astype("float64"), [p.astype("float64") for p in params])
        assert calls == expected
        np.testing.assert_allclose(recorded.asnumpy(), h.asnumpy(), rtol=1e-5, atol=1e-5)

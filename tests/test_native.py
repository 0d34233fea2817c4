"""The native kernels (gluon_bbb/_fused.c) against NumPy formulas, NumPy's Philox, MXNet's
optimizers and the NDArray step they replace."""
import math
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, init_variational_params, native, train
from gluon_bbb.step import (FlatLayout, NormalSampler, bbb_gradients, fused_bbb_gradients,
                            lrt_noise_size, prior_for, step_noise)

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def test_native_kernels_are_built():
    # the install (setup.py) builds them wherever a C compiler exists, as in CI
    assert native.available(), native.unavailable_reason()


@pytest.mark.parametrize("key,first,stream", [([0, 0], 0, 0), ([2 ** 64 - 1, 12345], 7, 3),
                                              ([99, 1], 1023, 2 ** 40)])
def test_philox_words_equal_numpy_philox(key, first, stream):
    key = np.array(key, dtype=np.uint64)
    expected = np.random.Philox(key=key, counter=[first, stream, 0, 0]).random_raw(11)
    np.testing.assert_array_equal(native.philox_words(11, key, first, stream), expected)


@pytest.mark.parametrize("size", [1, 2, 3, native.CHUNK - 1, 2 * native.CHUNK + 5])
def test_normals_equal_the_numpy_reference(size):
    key = native.philox_key([4, 2])
    drawn = native.normals(size, key, 5)
    reference = native.philox_normals_reference(size, key, 5)
    assert drawn.dtype == np.float32 and drawn.shape == (size,)
    np.testing.assert_allclose(drawn, reference, rtol=0, atol=2e-6)


def test_normals_do_not_depend_on_thread_count():
    code = ("import gluon_bbb.native as n; "
            "print(n.normals(100003, n.philox_key([1, 2, 3]), 9).round(4).tobytes().hex()[:4000])")
    outputs = set()
    for threads in ("1", "2", "3"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        outputs.add(proc.stdout)
    assert len(outputs) == 1


def test_normals_are_standard_normal():
    z = native.normals(2_000_000, native.philox_key(0), 0).astype(np.float64)
    assert abs(z.mean()) < 0.004 and abs(z.std() - 1.0) < 0.003
    assert abs(np.mean(z ** 3)) < 0.01 and abs(np.mean(z ** 4) - 3.0) < 0.03
    # Kolmogorov-Smirnov distance to the normal CDF (critical value at 1e6+ draws ~0.0012)
    z.sort()
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z[::50] / math.sqrt(2.0)))
    empirical = np.arange(0, z.size, 50) / z.size
    assert np.max(np.abs(cdf - empirical)) < 0.0015
    assert abs(np.mean(np.abs(z) > 3.0) - 0.0026998) < 0.0003
    # different streams and keys are different draws
    other = native.normals(1000, native.philox_key(0), 1)
    assert abs(np.corrcoef(other, z[:1000])[0, 1]) < 0.2


def test_sample_weights_follow_the_formula(ctx):
    rng = np.random.default_rng(0)
    n = 3 * native.CHUNK + 11
    mu = rng.normal(size=n).astype(np.float32)
    rho = rng.uniform(-30, 30, size=n).astype(np.float32)
    eps, w = nd.zeros(n, ctx=ctx), nd.zeros(n, ctx=ctx)
    key = native.philox_key(3)
    native.sample_weights(nd.array(mu, ctx=ctx), nd.array(rho, ctx=ctx), key, 4, eps, w)
    assert eps.context == ctx and w.context == ctx
    np.testing.assert_allclose(eps.asnumpy(), native.philox_normals_reference(n, key, 4),
                               atol=2e-6)
    rho64 = rho.astype(np.float64)
    sigma = np.maximum(rho64, 0) + np.log1p(np.exp(-np.abs(rho64)))
    np.testing.assert_allclose(w.asnumpy(), mu + sigma * eps.asnumpy().astype(np.float64),
                               rtol=2e-6, atol=2e-6)


def numpy_log_prior(w, prior):
    """(log P(w), d log P / dw) in float64, written from the densities."""
    kind, pi, s1, s2 = prior
    log_n1 = -LOG_SQRT_2PI - math.log(s1) - w ** 2 / (2 * s1 ** 2)
    if kind == native.GAUSSIAN:
        return log_n1, -w / s1 ** 2
    log_n2 = -LOG_SQRT_2PI - math.log(s2) - w ** 2 / (2 * s2 ** 2)
    a, b = math.log(pi) + log_n1, math.log1p(-pi) + log_n2
    log_p = np.logaddexp(a, b)
    r1 = np.exp(a - log_p)
    return log_p, -w * (r1 / s1 ** 2 + (1 - r1) / s2 ** 2)


def test_normals_into_an_ndarray_are_the_stream(ctx):
    key = native.philox_key(8)
    out = nd.zeros((3, native.CHUNK + 7), ctx=ctx)
    native.normals_into(out, key, 2)
    np.testing.assert_array_equal(out.asnumpy().ravel(), native.normals(out.size, key, 2))
    assert out.context == ctx


def test_softplus_follows_the_formula(ctx):
    rho = np.concatenate([np.linspace(-100, 100, 20001), [-1e4, 1e4, 0.0]])
    sigma = nd.zeros(rho.size, ctx=ctx)
    native.softplus(nd.array(rho, ctx=ctx), sigma)
    # below rho = -80 the kernels hold sigma at softplus(-80) = 1.8e-35 (see _fused.c)
    rho32 = np.maximum(rho.astype(np.float32).astype(np.float64), -80.0)
    expected = np.maximum(rho32, 0) + np.log1p(np.exp(-np.abs(rho32)))
    np.testing.assert_allclose(sigma.asnumpy(), expected, rtol=2e-6, atol=0)
    assert np.all(sigma.asnumpy() >= 0) and np.all(np.isfinite(sigma.asnumpy()))


def numpy_kl_terms(mu, sigma, eps, prior):
    """(KL entries, d/dw through w = mu + sigma eps, d/dmu direct, d/dsigma direct), float64."""
    kind, pi, s1, s2 = prior
    if kind == native.GAUSSIAN_CLOSED_FORM:
        return (np.log(s1 / sigma) + (sigma ** 2 + mu ** 2) / (2 * s1 ** 2) - 0.5,
                0.0, mu / s1 ** 2, sigma / s1 ** 2 - 1 / sigma)
    w = (mu + sigma * eps).astype(np.float32).astype(np.float64)
    log_prior, dlog_prior = numpy_log_prior(w, prior)
    log_q = -np.log(sigma) - eps ** 2 / 2 - LOG_SQRT_2PI
    return log_q - log_prior, -dlog_prior, 0.0, -1 / sigma


@pytest.mark.parametrize("prior", [(native.GAUSSIAN, 0.0, 0.7, 0.0),
                                   (native.SCALE_MIXTURE, 0.25, 1.0, math.exp(-6.0)),
                                   (native.GAUSSIAN_CLOSED_FORM, 0.0, 0.7, 0.0)])
@pytest.mark.parametrize("estimator", ["sample", "lrt"])
def test_kl_gradients_follow_the_formula(ctx, prior, estimator):
    rng = np.random.default_rng(1)
    n = 2 * native.CHUNK + 3
    rho = np.concatenate([rng.uniform(-12, 4, size=n - 4), [-40.0, -20.0, 15.0, 40.0]])
    eps = rng.normal(size=n)
    mu = rng.normal(scale=0.05, size=n)
    mu[:10] = [0, 1e-6, -1e-6, 5.0, -5.0, 0.5, 30.0, -30.0, 1e-3, 0.0]  # tails of the mixture
    mu, rho, eps = (a.astype(np.float32).astype(np.float64) for a in (mu, rho, eps))
    sigma = np.maximum(rho, 0) + np.log1p(np.exp(-np.abs(rho)))
    w = (mu + sigma * eps).astype(np.float32).astype(np.float64)
    # the data term's gradients: dNLL/dw for weight sampling, dNLL/dmu and dNLL/dsigma for lrt
    grad_mu_data = rng.normal(size=n)
    grad_sigma_data = rng.normal(size=n) if estimator == "lrt" else None
    kl_weight = 0.01
    to = lambda a: None if a is None else nd.array(a, ctx=ctx, dtype="float32")
    grad_mu, grad_rho = nd.zeros(n, ctx=ctx), nd.zeros(n, ctx=ctx)
    kl = native.kl_gradients(to(mu), to(rho), to(eps), to(w), to(grad_mu_data),
                             to(grad_sigma_data), kl_weight, prior, grad_mu, grad_rho)

    entries, kl_w, kl_mu, kl_sigma = numpy_kl_terms(mu, sigma, eps, prior)
    assert kl == pytest.approx(np.sum(entries), rel=1e-6)
    if grad_sigma_data is None:
        grad_sigma_data = grad_mu_data * eps
    expected_mu = grad_mu_data + kl_weight * (kl_w + kl_mu)
    expected_sigma = grad_sigma_data + kl_weight * (kl_w * eps + kl_sigma)
    sigmoid = 1.0 / (1.0 + np.exp(-rho))
    np.testing.assert_allclose(grad_mu.asnumpy(), expected_mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad_rho.asnumpy(), expected_sigma * sigmoid, rtol=1e-5, atol=1e-6)
    assert grad_mu.context == ctx and grad_rho.context == ctx


@pytest.mark.parametrize("prior", [(native.GAUSSIAN, 0.0, 0.7, 0.0),
                                   (native.SCALE_MIXTURE, 0.25, 1.0, math.exp(-6.0))])
def test_sample_kl_gradients_equal_sampling_then_kl_gradients(ctx, prior):
    # the one-pass kernel of lrt with the Monte Carlo KL against the two passes it replaces
    rng = np.random.default_rng(4)
    n = 3 * native.CHUNK + 5
    mu, rho, grad_mu_data, grad_sigma_data = (
        nd.array(a, ctx=ctx) for a in (rng.normal(scale=0.05, size=n), rng.uniform(-8, 1, size=n),
                                       rng.normal(size=n), rng.normal(size=n)))
    key = native.philox_key(6)
    eps, w, expected_mu, expected_rho, got_mu, got_rho = (nd.zeros(n, ctx=ctx) for _ in range(6))
    native.sample_weights(mu, rho, key, 3, eps, w)
    expected = native.kl_gradients(mu, rho, eps, w, grad_mu_data, grad_sigma_data, 0.01, prior,
                                   expected_mu, expected_rho)
    got = native.sample_kl_gradients(mu, rho, key, 3, grad_mu_data, grad_sigma_data, 0.01,
                                     prior, got_mu, got_rho)
    assert got == pytest.approx(expected, rel=1e-6)
    np.testing.assert_allclose(got_mu.asnumpy(), expected_mu.asnumpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_rho.asnumpy(), expected_rho.asnumpy(), rtol=1e-6, atol=1e-7)
    assert got_mu.context == ctx
    with pytest.raises(ValueError, match="Monte Carlo"):
        native.sample_kl_gradients(mu, rho, key, 3, grad_mu_data, grad_sigma_data, 0.01,
                                   (native.GAUSSIAN_CLOSED_FORM, 0.0, 1.0, 0.0), got_mu, got_rho)


@pytest.mark.parametrize("estimator,kl,prior,num_samples", [
    ("sample", "mc", "gaussian", 1), ("sample", "mc", "scale_mixture", 1),
    ("sample", "mc", "scale_mixture", 2), ("sample", "analytic", "gaussian", 1),
    ("lrt", "analytic", "gaussian", 1), ("lrt", "mc", "scale_mixture", 1),
    ("lrt", "analytic", "gaussian", 2)])
def test_fused_step_equals_the_ndarray_step(ctx, mnist, estimator, kl, prior, num_samples):
    config = Config(prior=prior, pi=0.25, sigma_p1=1.0, sigma_p2=math.exp(-6.0), sigma_p=0.8,
                    estimator=estimator, kl=kl)
    layout = FlatLayout(config.layer_shapes())
    mus, rhos = init_variational_params(config.layer_shapes(), ctx, rho_offset=-4.0, seed=0)
    mu, rho = layout.flatten(mus), layout.flatten(rhos)
    X = nd.array(mnist.train_images[:64], ctx=ctx)
    y = nd.one_hot(nd.array(mnist.train_labels[:64], ctx=ctx), 10)
    prior_terms = prior_for(config)
    fused = fused_bbb_gradients(X, y, mu, rho, layout, prior_terms, 0.003,
                                NormalSampler(layout.size, ctx, seed=7), num_samples,
                                estimator=estimator, kl=kl)
    sampler = NormalSampler(layout.size, ctx, seed=7)
    epsilons = [step_noise(sampler, layout, 64, estimator, kl) for _ in range(num_samples)]
    reference = bbb_gradients(X, y, mu, rho, layout, prior_terms, 0.003, epsilons,
                              estimator, kl, config.sigma_p)
    for ours, theirs in zip(fused[1:], reference[1:]):
        assert ours.context == ctx
        scale = np.abs(theirs.asnumpy()).max()
        np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=1e-4,
                                   atol=1e-5 * scale)
    # the loss against float64 NumPy: the C kernel sums in double, MXNet's dot in float32
    exact = np.mean([numpy_loss(X.asnumpy(), y.asnumpy(), mu.asnumpy(), rho.asnumpy(),
                                eps.asnumpy(), layout, 0.003,
                                prior_terms.native_args(kl), estimator)
                     for eps in epsilons])
    assert fused[0].asnumpy()[0] == pytest.approx(exact, rel=2e-6)
    assert reference[0].asnumpy()[0] == pytest.approx(exact, rel=1e-3)


def test_fused_lrt_step_refuses_a_workspace_too_small(ctx, mnist):
    from gluon_bbb.step import FusedWorkspace
    config = Config(estimator="lrt")
    layout = FlatLayout(config.layer_shapes())
    mus, rhos = init_variational_params(config.layer_shapes(), ctx, seed=0)
    X = nd.array(mnist.train_images[:64], ctx=ctx)
    y = nd.one_hot(nd.array(mnist.train_labels[:64], ctx=ctx), 10)
    for workspace in (FusedWorkspace(layout, ctx), FusedWorkspace(layout, ctx, 32)):
        with pytest.raises(ValueError, match="up to .* not 64"):
            fused_bbb_gradients(X, y, layout.flatten(mus), layout.flatten(rhos), layout,
                                prior_for(config), 0.01, NormalSampler(layout.size, ctx, seed=0),
                                workspace=workspace, estimator="lrt")


def numpy_loss(X, y_one_hot, mu, rho, eps, layout, kl_weight, prior, estimator="sample"):
    """Combined loss of one noise draw, float64: -log P(y|X, noise) + kl_weight * KL, the
    KL's estimate as ``prior`` says (``numpy_kl_terms``); ``eps`` as ``step_noise`` draws it."""
    mu, rho, eps = (a.astype(np.float64) for a in (mu, rho, eps))
    sigma = np.maximum(rho, 0) + np.log1p(np.exp(-np.abs(rho)))
    split = lrt_noise_size(layout, X.shape[0]) if estimator == "lrt" else 0
    activation_noise, eps = eps[:split], eps[split:]
    # the flat vectors hold each weight transposed, (outputs, inputs): FlatLayout's storage
    views = lambda flat: [flat[a:b].reshape(shape).T for a, b, shape
                          in zip(layout.offsets[:-1], layout.offsets[1:], layout.stored_shapes)]
    h = X.astype(np.float64)
    if estimator == "lrt":
        mus, sigmas = views(mu), views(sigma)
        for i in range(0, len(mus), 2):
            mean = h @ mus[i] + mus[i + 1]
            std = np.sqrt((h ** 2) @ (sigmas[i] ** 2) + sigmas[i + 1] ** 2)
            z, activation_noise = (activation_noise[:mean.size].reshape(mean.shape),
                                   activation_noise[mean.size:])
            h = mean + std * z
            if i < len(mus) - 2:
                h = np.maximum(h, 0)
    else:
        params = views(mu + sigma * eps)
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i < len(params) - 2:
                h = np.maximum(h, 0)
    log_softmax = h - h.max(axis=1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(axis=1, keepdims=True))
    entries = numpy_kl_terms(mu, sigma, eps if eps.size else None, prior)[0]
    return -np.sum(y_one_hot * log_softmax) + kl_weight * np.sum(entries)


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
        grad = nd.array(rng.normal(size=1001).astype(np.float32), ctx=ctx)
        native.optimizer_update(opt_ours, 0, ours, grad, state_ours)
        opt_theirs.update(0, theirs, grad, state_theirs)
    np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=0, atol=5e-6)
    assert opt_ours.num_update == opt_theirs.num_update == 25
    assert ours.context == ctx
    if name == "adam":
        for a, b in zip(state_ours, state_theirs):
            np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-5, atol=1e-7)


def test_training_with_and_without_native_kernels_agrees(ctx, mnist):
    config = Config(epochs=2, train_size=1500, seed=3, prior="scale_mixture", pi=0.25,
                    sigma_p1=1.0, sigma_p2=math.exp(-6.0), optimizer="adam")
    runs = [train(config, mnist, ctx, log=lambda line: None, progress=False, native_kernels=flag)
            for flag in (True, False)]
    for ours, theirs in zip(runs[0].mus + runs[0].rhos, runs[1].mus + runs[1].rhos):
        assert ours.context == ctx
        np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=0, atol=1e-4)
    for ours, theirs in zip(runs[0].history, runs[1].history):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-3)
        assert ours["test_accuracy"] == pytest.approx(theirs["test_accuracy"], abs=0.002)


def test_loading_the_library_keeps_denormals():
    # linked without -ffast-math: loading it must not switch the process to flush-to-zero
    assert native.available()
    tiny = np.float32(1e-40)
    assert tiny * np.float32(1.0) != 0.0
    assert nd.array([1e-40], dtype="float32").__mul__(1.0).asnumpy()[0] != 0.0


def test_asking_for_native_kernels_where_they_cannot_serve_is_an_error(ctx, mnist, monkeypatch):
    from gluon_bbb.errors import ConfigError
    monkeypatch.setattr(native, "available", lambda: False)
    monkeypatch.setattr(native, "unavailable_reason", lambda: "not built (test)")
    with pytest.raises(ConfigError, match="native_kernels.*not built"):
        train(Config(epochs=1, train_size=256), mnist, ctx,
              log=lambda line: None, progress=False, native_kernels=True)


def test_training_without_the_built_library_gives_the_same_run(ctx, mnist, monkeypatch):
    # no C compiler at install: NumPy's Philox draws the same noise, MXNet does the rest
    config = Config(epochs=1, train_size=1024, seed=5, estimator="lrt")
    quiet = dict(log=lambda line: None, progress=False)
    built = train(config, mnist, ctx, **quiet)
    monkeypatch.setattr(native, "_load", lambda: (None, "not built (test)"))
    assert not native.available()
    unbuilt = train(config, mnist, ctx, **quiet)
    for ours, theirs in zip(built.mus + built.rhos, unbuilt.mus + unbuilt.rhos):
        assert theirs.context == ctx
        np.testing.assert_allclose(ours.asnumpy(), theirs.asnumpy(), rtol=0, atol=1e-4)

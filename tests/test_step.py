"""The fast flat step computes what autograd of the tutorial's combined_loss computes."""
import numpy as np
import pytest
from mxnet import autograd, nd

from gluon_bbb import (Config, combined_loss, init_variational_params, log_softmax_likelihood,
                       net, transform_gaussian_samples, transform_rhos)
from gluon_bbb.step import FlatLayout, NormalSampler, bbb_gradients, prior_for


def reference(config, X, y, mus, rhos, epsilons_per_sample, kl_weight):
    """Autograd of combined_loss, averaged over the samples, on per-layer arrays."""
    for p in mus + rhos:
        p.attach_grad()
    with autograd.record():
        sigmas = transform_rhos(rhos)
        total = 0
        for eps in epsilons_per_sample:
            ws = transform_gaussian_samples(mus, sigmas, eps)
            total = total + combined_loss(net(X, ws), y, ws, mus, sigmas, config.log_prior(),
                                          log_softmax_likelihood, 1, kl_weight=kl_weight)
        loss = total / len(epsilons_per_sample)
    loss.backward()
    return loss, [m.grad for m in mus], [r.grad for r in rhos]


@pytest.mark.parametrize("prior,num_samples", [("gaussian", 1), ("scale_mixture", 1),
                                                ("gaussian", 3), ("scale_mixture", 2)])
def test_flat_gradients_equal_autograd_of_combined_loss(ctx, prior, num_samples):
    config = Config(num_inputs=12, num_hidden_units=9, num_outputs=4, prior=prior,
                    sigma_p1=1.0, sigma_p2=0.05)
    shapes = config.layer_shapes()
    layout = FlatLayout(shapes)
    mus, rhos = init_variational_params(shapes, ctx, mu_scale=0.3, rho_offset=-2.0, seed=0)
    rhos = [r + nd.array(np.random.default_rng(1).normal(size=r.shape), ctx=ctx) for r in rhos]
    rng = np.random.default_rng(2)
    X = nd.array(rng.normal(size=(7, 12)), ctx=ctx, dtype="float64")
    y = nd.one_hot(nd.array(rng.integers(0, 4, size=7), ctx=ctx), 4).astype("float64")
    flat_eps = [nd.array(rng.normal(size=layout.size), ctx=ctx, dtype="float64")
                for _ in range(num_samples)]
    mus64 = [m.astype("float64") for m in mus]
    rhos64 = [r.astype("float64") for r in rhos]
    loss_ref, gmu_ref, grho_ref = reference(config, X, y, mus64, rhos64,
                                            [layout.unflatten(e) for e in flat_eps], 0.3)
    mu, rho = layout.flatten(mus64), layout.flatten(rhos64)
    loss, grad_mu, grad_rho = bbb_gradients(X, y, mu, rho, layout, prior_for(config), 0.3,
                                            flat_eps)
    assert loss.context == ctx and grad_mu.context == ctx and grad_rho.shape == (layout.size,)
    np.testing.assert_allclose(loss.asscalar(), loss_ref.asscalar(), rtol=1e-10)
    np.testing.assert_allclose(grad_mu.asnumpy(), layout.flatten(gmu_ref).asnumpy(),
                               rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(grad_rho.asnumpy(), layout.flatten(grho_ref).asnumpy(),
                               rtol=1e-8, atol=1e-10)


def test_layout_stores_weights_transposed_and_views_share_memory(ctx):
    layout = FlatLayout([(2, 3), (3,)])
    W = nd.array([[0, 1, 2], [3, 4, 5]], ctx=ctx)
    b = nd.array([6, 7, 8], ctx=ctx)
    flat = layout.flatten([W, b])
    # W is stored as its transpose, (outputs, inputs), as FullyConnected takes it
    np.testing.assert_array_equal(flat.asnumpy(), [0, 3, 1, 4, 2, 5, 6, 7, 8])
    views = layout.views(flat)
    assert [v.shape for v in views] == [(3, 2), (3,)]
    flat[:] = flat * 2
    np.testing.assert_array_equal(views[1].asnumpy(), [12, 14, 16])
    W2, b2 = layout.unflatten(flat)
    np.testing.assert_array_equal(W2.asnumpy(), 2 * W.asnumpy())
    np.testing.assert_array_equal(b2.asnumpy(), 2 * b.asnumpy())
    assert W2.context == ctx
    # checkpoints hold flat optimizer state in the model's order
    model_order = layout.to_model_order(flat)
    np.testing.assert_array_equal(model_order.asnumpy(), 2 * np.arange(9))
    np.testing.assert_array_equal(layout.from_model_order(model_order).asnumpy(), flat.asnumpy())


def test_normal_sampler_is_seeded_and_on_ctx(ctx):
    a, b = NormalSampler(1000, ctx, seed=4), NormalSampler(1000, ctx, seed=4)
    first = a()
    assert first.context == ctx and first.dtype == np.float32
    np.testing.assert_array_equal(first.asnumpy(), b().asnumpy())
    assert abs(first.asnumpy().std() - 1) < 0.1


def test_softplus_and_sigmoid_match_numpy(ctx):
    from gluon_bbb.step import softplus_and_sigmoid
    x = np.linspace(-100, 100, 4001)
    sp, sg = softplus_and_sigmoid(nd.array(x, ctx=ctx, dtype="float64"))
    np.testing.assert_allclose(sp.asnumpy(), np.logaddexp(0, x), rtol=1e-14)
    np.testing.assert_allclose(sg.asnumpy(), 1 / (1 + np.exp(-x)), rtol=1e-14)


def test_analytic_kl_matches_numpy(ctx):
    from gluon_bbb.step import analytic_kl_and_grads
    rng = np.random.default_rng(9)
    mu, sigma = rng.normal(size=50), rng.uniform(0.01, 2, size=50)
    value, g_mu, g_sigma = analytic_kl_and_grads(
        nd.array(mu, ctx=ctx, dtype="float64"), nd.array(sigma, ctx=ctx, dtype="float64"), 0.7,
        nd.ones((50,), ctx=ctx, dtype="float64"))
    expected = np.sum(np.log(0.7 / sigma) + (sigma ** 2 + mu ** 2) / (2 * 0.49) - 0.5)
    np.testing.assert_allclose(value.asscalar(), expected, rtol=1e-12)
    np.testing.assert_allclose(g_mu.asnumpy(), mu / 0.49, rtol=1e-12)
    np.testing.assert_allclose(g_sigma.asnumpy(), sigma / 0.49 - 1 / sigma, rtol=1e-12)
    # KL is an expectation of log q - log p: check against Monte Carlo
    eps = rng.normal(size=(200000, 50))
    w = mu + sigma * eps
    log_q = -np.log(sigma) - eps ** 2 / 2
    log_p = -np.log(0.7) - w ** 2 / (2 * 0.49)
    assert abs((log_q - log_p).sum(axis=1).mean() - expected) < 0.02 * abs(expected) + 0.5


def test_lrt_preactivations_have_the_weight_sampling_distribution(ctx):
    from gluon_bbb.step import lrt_net
    rng = np.random.default_rng(10)
    X = rng.normal(size=(3, 5))
    mu_W, mu_b = rng.normal(size=(5, 4)), rng.normal(size=4)
    s_W, s_b = rng.uniform(0.1, 1, size=(5, 4)), rng.uniform(0.1, 1, size=4)
    draws = 40000
    to = lambda a: nd.array(a, ctx=ctx, dtype="float64")
    X_rep = np.tile(X, (draws, 1))
    out = lrt_net(to(X_rep), [to(mu_W), to(mu_b)], [to(s_W), to(s_b)],
                  to(rng.normal(size=X_rep.shape[0] * 4))).asnumpy().reshape(draws, 3, 4)
    mean, var = X @ mu_W + mu_b, (X ** 2) @ (s_W ** 2) + s_b ** 2
    np.testing.assert_allclose(out.mean(axis=0), mean, atol=5 * np.sqrt(var.max() / draws))
    np.testing.assert_allclose(out.var(axis=0), var, rtol=0.05)


def autograd_reference_loss(config, X, y, mu, rho, layout, kl_weight, estimator, kl, eps):
    """The same objectives written plainly with autograd through softplus, for checking."""
    from gluon_bbb import softplus
    from gluon_bbb.model import log_gaussian
    from gluon_bbb.step import lrt_net, lrt_noise_size
    mu.attach_grad()
    rho.attach_grad()
    with autograd.record():
        sigma = softplus(rho)
        if estimator == "lrt":
            split = lrt_noise_size(layout, X.shape[0])
            logits = lrt_net(X, layout.unflatten(mu), layout.unflatten(sigma), eps[:split])
            eps = eps[split:]
        else:
            logits = net(X, layout.unflatten(mu + sigma * eps))
        nll = -nd.sum(log_softmax_likelihood(logits, y))
        if kl == "analytic":
            sp = config.sigma_p
            kl_term = nd.sum(nd.log(sp / sigma) + (sigma ** 2 + mu ** 2) / (2 * sp ** 2) - 0.5)
        else:
            w = mu + sigma * eps
            kl_term = nd.sum(log_gaussian(w, mu, sigma)) - config.log_prior()(w)
        loss = kl_weight * kl_term + nll
    loss.backward()
    return loss, mu.grad, rho.grad


@pytest.mark.parametrize("estimator,kl,prior", [("sample", "analytic", "gaussian"),
                                                 ("lrt", "analytic", "gaussian"),
                                                 ("lrt", "mc", "scale_mixture")])
def test_estimator_gradients_equal_autograd(ctx, estimator, kl, prior):
    from gluon_bbb.step import lrt_noise_size
    config = Config(num_inputs=6, num_hidden_units=5, num_outputs=3, prior=prior, sigma_p=0.8)
    layout = FlatLayout(config.layer_shapes())
    rng = np.random.default_rng(11)
    to = lambda a: nd.array(a, ctx=ctx, dtype="float64")
    mu, rho = to(rng.normal(size=layout.size) * 0.5), to(rng.normal(size=layout.size) - 1)
    X, y = to(rng.normal(size=(4, 6))), to(np.eye(3)[rng.integers(0, 3, size=4)])
    size = (lrt_noise_size(layout, 4) if estimator == "lrt" else 0) + \
        (layout.size if (estimator == "sample" or kl == "mc") else 0)
    eps = to(rng.normal(size=size))
    loss, g_mu, g_rho = bbb_gradients(X, y, mu, rho, layout, prior_for(config), 0.2, [eps],
                                      estimator=estimator, kl=kl, sigma_p=config.sigma_p)
    ref_loss, ref_mu, ref_rho = autograd_reference_loss(config, X, y, mu.copy(), rho.copy(),
                                                        layout, 0.2, estimator, kl, eps)
    np.testing.assert_allclose(loss.asscalar(), ref_loss.asscalar(), rtol=1e-10)
    np.testing.assert_allclose(g_mu.asnumpy(), ref_mu.asnumpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(g_rho.asnumpy(), ref_rho.asnumpy(), rtol=1e-8, atol=1e-10)

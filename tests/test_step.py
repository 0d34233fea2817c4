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
                                            [layout.views(e) for e in flat_eps], 0.3)
    mu, rho = layout.flatten(mus64), layout.flatten(rhos64)
    loss, grad_mu, grad_rho = bbb_gradients(X, y, mu, rho, layout, prior_for(config), 0.3,
                                            flat_eps)
    assert loss.context == ctx and grad_mu.context == ctx and grad_rho.shape == (layout.size,)
    np.testing.assert_allclose(loss.asscalar(), loss_ref.asscalar(), rtol=1e-10)
    np.testing.assert_allclose(grad_mu.asnumpy(), layout.flatten(gmu_ref).asnumpy(),
                               rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(grad_rho.asnumpy(), layout.flatten(grho_ref).asnumpy(),
                               rtol=1e-8, atol=1e-10)


def test_layout_views_share_memory(ctx):
    layout = FlatLayout([(2, 3), (3,)])
    flat = nd.arange(9, ctx=ctx)
    views = layout.views(flat)
    assert [v.shape for v in views] == [(2, 3), (3,)]
    flat[:] = flat * 2
    np.testing.assert_array_equal(views[1].asnumpy(), [12, 14, 16])
    np.testing.assert_array_equal(layout.flatten(views).asnumpy(), flat.asnumpy())


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

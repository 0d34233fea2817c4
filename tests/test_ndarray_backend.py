"""learning/ndarray_backend.py: both backends' loss and gradients against autograd of the
tutorial's loss (the ndarray backend's formulas: test_estimators.py); the flat layout's views."""
import math

import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, combined_loss_gradients, init_variational_params
from gluon_bbb.learning.ndarray_backend import FlatLayout, NetworkGraph
from gluon_bbb.learning.noise import PhiloxNoise, philox_normals_reference
from tutorial_reference import tutorial_gradients

# A small convolutional network on 8x8 images
CONV = "conv:3:3,relu,pool:2,conv:2:2,relu,dense:5,relu,dense:4"


def assert_matches(got, reference, layout, rtol):
    loss, grad_mu, grad_rho = got
    ref_loss, ref_mu, ref_rho = reference
    np.testing.assert_allclose(loss.asscalar(), ref_loss.asscalar(), rtol=rtol)
    for ours, theirs in ((grad_mu, layout.flatten(ref_mu)), (grad_rho, layout.flatten(ref_rho))):
        theirs = theirs.asnumpy()
        np.testing.assert_allclose(ours.asnumpy(), theirs, rtol=rtol,
                                   atol=rtol * np.abs(theirs).max())


@pytest.mark.parametrize("backend,network,prior,kl,num_samples", [
    ("ndarray", "mlp", "gaussian", "mc", 3), ("ndarray", "mlp", "scale_mixture", "mc", 2),
    ("ndarray", CONV, "scale_mixture", "mc", 1), ("native", "mlp", "gaussian", "mc", 1),
    ("native", "mlp", "scale_mixture", "mc", 2), ("native", "mlp", "gaussian", "analytic", 1),
    ("native", "lenet", "scale_mixture", "mc", 1)])
def test_the_step_is_the_tutorials_combined_loss(ctx, request, mnist, backend, network, prior, kl,
                                                 num_samples):
    """Both backends' loss and gradients on the same noise against autograd of the tutorial's
    ``combined_loss`` in float64 (the closed-form KL's against the ndarray backend's): to
    rounding on the ndarray backend, to float32 on the kernels."""
    features = 64 if network == CONV else 784
    config = Config.from_dict(dict(prior=prior, pi=0.25, sigma_p1=1.0, sigma_p2=math.exp(-6.0),
                                   sigma_p=0.8, kl=kl, num_hidden_units=30, network=network,
                                   num_inputs=features, num_outputs=4 if network == CONV else 10))
    layout, graph = FlatLayout(config.layer_shapes()), NetworkGraph(config.build_network())
    rng = np.random.default_rng(1)
    dtype = "float64" if backend == "ndarray" else "float32"
    to = lambda a: nd.array(a, ctx=ctx, dtype=dtype)  # noqa: E731
    mus, _ = init_variational_params(layout.shapes, ctx, seed=0)
    mu, rho = to(layout.flatten(mus).asnumpy()), to(rng.normal(size=layout.size) - 4.0)
    X = to(mnist.train_images[:16, :features])
    y = to(np.eye(config.num_outputs)[mnist.train_labels[:16] % config.num_outputs])
    noise = PhiloxNoise(ctx, seed=7)
    epsilons = [nd.array(philox_normals_reference(layout.size, noise.key, s), ctx=ctx,
                         dtype="float64") for s in range(num_samples)]
    if backend == "native":
        native = request.getfixturevalue("native_kernels")
        got = native.loss_gradients(X, y, mu, rho, noise, num_samples, config.build_prior(),
                                    0.003, graph, native.Workspace(layout.size, ctx),
                                    config.kl_kind, config.estimator_kind)
        assert noise.stream == num_samples
    else:
        got = combined_loss_gradients(X, y, mu, rho, epsilons, config.build_prior(), 0.003, graph)
    assert all(a.context == ctx for a in got) and got[1].shape == (layout.size,)
    f64 = lambda a: a.astype("float64")  # noqa: E731
    if kl == "mc":
        reference = tutorial_gradients(f64(X), f64(y), layout.views(f64(mu)),
                                       layout.views(f64(rho)), config.build_prior(), 0.003,
                                       [layout.views(e) for e in epsilons],
                                       network=graph.network)
    else:
        loss, grad_mu, grad_rho = combined_loss_gradients(
            f64(X), f64(y), f64(mu), f64(rho), epsilons, config.build_prior(), 0.003, graph,
            kl=kl)
        reference = loss, layout.views(grad_mu), layout.views(grad_rho)
    assert_matches(got, reference, layout, rtol=1e-9 if backend == "ndarray" else 2e-4)


def test_layout_views_share_memory(ctx):
    layout = FlatLayout([(3, 2), (3,)])
    W = nd.array([[0, 1], [2, 3], [4, 5]], ctx=ctx)
    flat = layout.flatten([W, nd.array([6, 7, 8], ctx=ctx)])
    np.testing.assert_array_equal(flat.asnumpy(), np.arange(9))
    views = layout.views(flat)
    assert [v.shape for v in views] == [(3, 2), (3,)] and views[0].context == ctx
    flat[:] = flat * 2
    np.testing.assert_array_equal(views[1].asnumpy(), [12, 14, 16])
    np.testing.assert_array_equal(views[0].asnumpy(), 2 * W.asnumpy())

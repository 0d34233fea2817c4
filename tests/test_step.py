"""learning/step.py: the loss that trains against autograd of the tutorial's (the estimators'
formulas: test_estimators.py), the flat layout's views, the noise sources, the backend's choice
and the step object."""
import math

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import (Config, ConfigError, TrainingStep, combined_loss_gradients,
                       init_variational_params, softplus)
from gluon_bbb.learning.noise import DeviceNoise, PhiloxNoise, philox_key, philox_normals_reference
from gluon_bbb.learning.config import PRESETS
from gluon_bbb.learning.step import FlatLayout, NetworkGraph, choose_backend
from tutorial_reference import tutorial_gradients

# A small convolutional network on 8x8 images
CONV = "conv:3:3,relu,pool:2,conv:2:2,relu,dense:5,relu,dense:4"


def assert_matches(got, reference, layout, rtol, in_float32=None):
    """``got`` (loss, d/dmu, d/drho, each flat or by layer) against ``reference`` within
    ``rtol`` of each entry and of the largest; with ``in_float32``, the same computed in float32
    another way, an entry may also be off by twice that computation's own error (a draw within
    rounding of a kink or of a variance of 0 makes the loss that sensitive)."""
    def flat(triple):
        return [(layout.flatten(a) if isinstance(a, list) else a).asnumpy().astype("float64")
                for a in triple]
    rounded = [None] * 3 if in_float32 is None else flat(in_float32)
    for k, (ours, theirs) in enumerate(zip(flat(got), flat(reference))):
        allowed = rtol * (np.abs(theirs) + (np.abs(theirs).max() if k else 0.0))
        if rounded[k] is not None:
            allowed = allowed + 2 * np.abs(rounded[k] - theirs)
        worst = np.argmax(np.abs(ours - theirs) - allowed)
        assert np.abs(ours - theirs).flat[worst] <= allowed.flat[worst], (
            ["loss", "d/dmu", "d/drho"][k], worst, ours.flat[worst], theirs.flat[worst])


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

def test_philox_noise_is_the_reference_stream_on_ctx(ctx):
    noise, again = PhiloxNoise(ctx, seed=4), PhiloxNoise(ctx, seed=4)
    first = noise.normal((30, 40))
    assert first.context == ctx and first.dtype == np.float32 and first.shape == (30, 40)
    np.testing.assert_allclose(first.asnumpy().ravel(),
                               philox_normals_reference(1200, philox_key(4), 0), atol=2e-6)
    np.testing.assert_array_equal(first.asnumpy(), again.normal((30, 40)).asnumpy())
    assert not np.array_equal(noise.normal((30, 40)).asnumpy(), first.asnumpy())  # stream 1


def test_device_noise_is_seeded_and_drawn_on_its_context(ctx):
    draws = [DeviceNoise(ctx, seed=[3, 0, 1]).normal((500,)) for _ in range(2)]
    assert all(d.context == ctx for d in draws)
    np.testing.assert_array_equal(draws[0].asnumpy(), draws[1].asnumpy())
    other = DeviceNoise(ctx, seed=[3, 1, 1]).normal((500,)).asnumpy()
    assert not np.array_equal(other, draws[0].asnumpy())
    assert abs(draws[0].asnumpy().std() - 1.0) < 0.15


def test_step_with_device_noise_stays_on_its_context(ctx, mnist):
    # what a GPU run does (MXNet's sampler on the run's context), shown on cpu(1)
    config = Config(num_hidden_units=30, seed=2)
    X = nd.array(mnist.train_images[:128], ctx=ctx)
    y = nd.one_hot(nd.array(mnist.train_labels[:128], ctx=ctx), 10)
    runs = []
    for noise in ("device", "device", "philox"):
        step = TrainingStep(config.build_plan(), ctx, backend="ndarray", noise=noise)
        for epoch in range(2):
            step.start_epoch(epoch)
            loss = step(X, y, 0.01)
        assert loss.context == ctx and step.mu.context == ctx and step.rho.context == ctx
        assert all(state.context == ctx for s in step.state_arrays() for state in s)
        runs.append(step.mu.asnumpy())
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], runs[2])


def test_a_rho_far_below_the_floor_takes_the_same_finite_step_on_both_backends(ctx, mnist,
                                                                               native_kernels):
    """softplus is floored as in the C kernels, sigma = softplus(-80), never 0; below it both
    backends take sigma's gradient as sigmoid(rho) = softplus(-80), so dL/drho is (g eps -
    kl_weight / sigma) sigma = -kl_weight, up to g eps sigma: rho climbs back."""
    floor = softplus(nd.array([-80.0], ctx=ctx)).asnumpy()[0]
    np.testing.assert_array_equal(softplus(nd.array([-1000.0, -81.0], ctx=ctx)).asnumpy(),
                                  [floor, floor])
    assert floor == pytest.approx(math.exp(-80), rel=1e-5)
    config = Config(num_hidden_units=20, seed=0, prior="scale_mixture", learning_rate=1.0)
    X = nd.array(mnist.train_images[:64], ctx=ctx)
    y = nd.one_hot(nd.array(mnist.train_labels[:64], ctx=ctx), 10)
    rhos_after = []
    for backend in ("ndarray", "native"):
        mus, rhos = init_variational_params(config.layer_shapes(), ctx, rho_offset=-1000.0,
                                            seed=0)
        step = TrainingStep(config.build_plan(), ctx, mus, rhos, backend=backend)
        step.start_epoch(0)
        assert np.isfinite(step(X, y, 1.0).asscalar())
        assert np.isfinite(step.mu.asnumpy()).all()
        rhos_after.append(step.rho.asnumpy())
    np.testing.assert_allclose(rhos_after[0], -999.0, atol=1e-3)
    np.testing.assert_allclose(rhos_after[0], rhos_after[1], atol=1e-4)


def test_choose_backend():
    sample, forward = Config(), Config(kl_direction="forward")

    def chosen(config, ctx, backend=None):
        return choose_backend(config.build_plan(), ctx, backend)
    for estimator in ("sample", "lrt", "flipout"):
        assert chosen(Config(estimator=estimator), mx.cpu())[0] == "native"
    assert chosen(forward, mx.cpu())[0] == "ndarray"
    assert "the reverse" not in chosen(forward, mx.cpu())[1]
    assert "with the forward mc KL" in chosen(forward, mx.cpu())[1]
    assert "parametrization log_variance" in chosen(Config(parametrization="log-variance"),
                                                    mx.cpu())[1]
    assert chosen(sample, mx.gpu(0)) == ("ndarray", "the native kernels run on CPU contexts only")
    assert chosen(sample, mx.cpu(), "ndarray") == ("ndarray", "asked for")
    for config, ctx in ((forward, mx.cpu()), (sample, mx.gpu(0))):
        with pytest.raises(ConfigError, match="backend must be ndarray here"):
            choose_backend(config.build_plan(), ctx, "native")
    with pytest.raises(ConfigError, match="backend must be one of native, ndarray"):
        choose_backend(sample.build_plan(), mx.cpu(), "cuda")


@pytest.mark.parametrize("model,network", [
    ("deterministic", "mlp"), ("mcdropout", "lenet"), ("ivon", "mlp"),
    ("ivon", PRESETS["lenet-group-sparse"]["network"])])
def test_the_kept_gradient_array_is_written_whole(ctx, model, network):
    """The step keeps the data term's gradient in one array (``_data_term``) that the graph
    overwrites: filled with NaN before a step, it holds what a new zeroed array gets, for
    networks with convolutions, dropout and gates."""
    config = Config(model=model, network=network, num_hidden_units=20, seed=2,
                    **({"parametrization": "log_variance", "prior": "none"}
                       if model == "ivon" else {}))
    step = TrainingStep(config.build_plan(), ctx, num_train=1000)
    rng = np.random.default_rng(0)
    X = nd.array(rng.uniform(size=(9, 784)), ctx=ctx)
    y = nd.one_hot(nd.array(rng.integers(0, 10, size=9), ctx=ctx), 10)
    weights = step.mu + 0.01
    step._data_term(X, y, weights)
    step._grad_w[:] = np.nan
    mx.random.seed(3)
    nll, kept = step._data_term(X, y, weights)
    mx.random.seed(3)
    fresh_nll, fresh = step.graph.nll_and_grad(X, y, weights)
    assert kept is step._grad_w and np.isfinite(kept.asnumpy()).all()
    np.testing.assert_array_equal(kept.asnumpy(), fresh.asnumpy())
    assert nll.asscalar() == fresh_nll.asscalar()


@pytest.mark.parametrize("backend", ["native", "ndarray"])
def test_a_step_of_two_samples_averages_its_two_draws(ctx, backend, request):
    if backend == "native":
        request.getfixturevalue("native_kernels")
    X = nd.array(np.random.default_rng(0).uniform(size=(5, 784)), ctx=ctx)
    y = nd.one_hot(nd.array([0, 1, 2, 3, 4], ctx=ctx), 10)

    def step(num_samples, first_stream):
        """(loss, the update of mu) of one SGD step drawing from stream ``first_stream`` on."""
        config = Config(num_hidden_units=20, seed=0, num_samples=num_samples,
                        learning_rate=0.01)
        training = TrainingStep(config.build_plan(), ctx, backend=backend)
        training.noise.stream = first_stream
        before = training.mu.asnumpy()
        loss = training(X, y, 0.1).asscalar()
        return loss, training.mu.asnumpy() - before
    two, update_two = step(2, 0)
    (first, update_first), (second, update_second) = step(1, 0), step(1, 1)
    assert first != second
    assert two == pytest.approx((first + second) / 2, rel=1e-5)
    np.testing.assert_allclose(update_two, (update_first + update_second) / 2, rtol=1e-4,
                               atol=1e-7)

"""tutorial.py: the tutorial's functions against NumPy formulas written here, on a distinct
context (the formulas they take from the family: test_elementwise, test_priors,
test_likelihoods)."""
import numpy as np
import pytest
from mxnet import autograd, nd

from gluon_bbb import (combined_loss, evaluate_accuracy, gaussian_prior, init_variational_params,
                       layer_param_shapes, log_softmax_likelihood, net, sample_epsilons,
                       scale_mixture_prior, transform_gaussian_samples, transform_rhos)


def np_softplus(x):
    return np.logaddexp(0.0, x)


def np_log_normal(x, mu, sigma):
    return -0.5 * np.log(2 * np.pi) - np.log(sigma) - (x - mu) ** 2 / (2 * sigma ** 2)


def np_net(X, params):
    """The MLP in NumPy, weights (outputs, inputs)."""
    h = X
    for i in range(0, len(params), 2):
        h = h @ params[i].T + params[i + 1]
        if i < len(params) - 2:
            h = np.maximum(h, 0)
    return h


def np_log_softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def nd64(array, ctx):
    return nd.array(np.asarray(array, dtype=np.float64), ctx=ctx, dtype="float64")


def test_layer_param_shapes_follow_the_tutorial_order():
    # the tutorial's order; weights (outputs, inputs), as FullyConnected and Gluon's Dense
    assert layer_param_shapes() == [(400, 784), (400,), (400, 400), (400,), (10, 400), (10,)]
    assert layer_param_shapes(5, 3, 1, 2) == [(3, 5), (3,), (2, 3), (2,)]
    assert layer_param_shapes(5, 3, 0, 2) == [(2, 5), (2,)]


def test_init_variational_params(ctx):
    shapes = [(300, 200), (200,)]
    mus, rhos = init_variational_params(shapes, ctx, mu_scale=0.1, rho_offset=-3.0, seed=7)
    assert [m.shape for m in mus] == shapes and [r.shape for r in rhos] == shapes
    assert all(a.context == ctx for a in mus + rhos)
    w = mus[0].asnumpy()
    assert abs(w.mean()) < 0.002 and abs(w.std() - 0.1) < 0.002
    assert np.all(rhos[1].asnumpy() == -3.0)
    again, _ = init_variational_params(shapes, ctx, seed=7)
    np.testing.assert_array_equal(again[0].asnumpy(), w)
    # gradients attached, zero until a backward pass writes them
    assert [m.grad.shape for m in mus] == shapes and not mus[0].grad.asnumpy().any()


def test_sample_epsilons_are_standard_normal(ctx):
    eps = sample_epsilons([(1000, 100), (7,)], ctx)
    assert [e.shape for e in eps] == [(1000, 100), (7,)]
    assert all(e.context == ctx for e in eps)
    values = eps[0].asnumpy()
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1.0) < 0.01


def test_transforms(ctx):
    rng = np.random.default_rng(0)
    mu, rho, eps = rng.normal(size=(3, 4, 5))
    sigmas = transform_rhos([nd.array(rho, ctx=ctx)])
    np.testing.assert_allclose(sigmas[0].asnumpy(), np_softplus(rho), rtol=1e-6)
    w = transform_gaussian_samples([nd.array(mu, ctx=ctx)], sigmas, [nd.array(eps, ctx=ctx)])
    assert w[0].context == ctx
    np.testing.assert_allclose(w[0].asnumpy(), mu + np_softplus(rho) * eps, rtol=1e-5, atol=1e-6)


def test_net_matches_numpy(ctx):
    rng = np.random.default_rng(1)
    shapes = layer_param_shapes(6, 5, 2, 3)
    params = [rng.normal(size=s) for s in shapes]
    X = rng.normal(size=(4, 6))
    out = net(nd.array(X, ctx=ctx), [nd.array(p, ctx=ctx) for p in params])
    assert out.shape == (4, 3) and out.context == ctx
    np.testing.assert_allclose(out.asnumpy(), np_net(X, params), rtol=1e-5, atol=1e-5)


def np_scale_mixture(x, pi, s1, s2):
    return np.logaddexp(np.log(pi) + np_log_normal(x, 0, s1),
                        np.log1p(-pi) + np_log_normal(x, 0, s2)).sum()


def tiny_problem(seed=5):
    rng = np.random.default_rng(seed)
    shapes = layer_param_shapes(4, 3, 1, 3)
    mus = [rng.normal(scale=0.5, size=s) for s in shapes]
    rhos = [rng.normal(loc=-1.0, scale=0.5, size=s) for s in shapes]
    eps = [rng.normal(size=s) for s in shapes]
    X = rng.normal(size=(6, 4))
    one_hot = np.eye(3)[rng.integers(0, 3, size=6)]
    return mus, rhos, eps, X, one_hot


def np_combined_loss(mus, rhos, eps, X, one_hot, num_batches, log_prior):
    sigmas = [np_softplus(r) for r in rhos]
    ws = [m + s * e for m, s, e in zip(mus, sigmas, eps)]
    log_q = sum(np_log_normal(w, m, s).sum() for w, m, s in zip(ws, mus, sigmas))
    log_p = sum(log_prior(w) for w in ws)
    log_lik = (one_hot * np_log_softmax(np_net(X, ws))).sum()
    return (log_q - log_p) / num_batches - log_lik


def nd_combined_loss(ctx, mus, rhos, eps, X, one_hot, num_batches, prior):
    sigmas = transform_rhos(rhos)
    ws = transform_gaussian_samples(mus, sigmas, eps)
    return combined_loss(net(X, ws), one_hot, ws, mus, sigmas, prior,
                         log_softmax_likelihood, num_batches)


@pytest.mark.parametrize("prior", ["gaussian", "scale_mixture"])
def test_combined_loss_end_to_end(ctx, prior):
    mus, rhos, eps, X, one_hot = tiny_problem()
    if prior == "gaussian":
        np_prior = lambda w: np_log_normal(w, 0, 1.0).sum()
        nd_prior = lambda w: gaussian_prior(w, 1.0)
    else:
        np_prior = lambda w: np_scale_mixture(w, 0.25, 0.75, 0.1)
        nd_prior = lambda w: scale_mixture_prior(w, 0.25, 0.75, 0.1)
    expected = np_combined_loss(mus, rhos, eps, X, one_hot, 7, np_prior)
    to = lambda arrays: [nd64(a, ctx) for a in arrays]
    got = nd_combined_loss(ctx, to(mus), to(rhos), to(eps), nd64(X, ctx), nd64(one_hot, ctx), 7,
                           nd_prior)
    assert got.shape == (1,) and got.context == ctx
    np.testing.assert_allclose(got.asscalar(), expected, rtol=1e-10)


def test_combined_loss_gradient_matches_finite_differences(ctx):
    mus, rhos, eps, X, one_hot = tiny_problem(seed=6)
    np_prior = lambda w: np_scale_mixture(w, 0.25, 0.75, 0.1)
    nd_prior = lambda w: scale_mixture_prior(w, 0.25, 0.75, 0.1)
    mus_nd = [nd64(m, ctx) for m in mus]
    rhos_nd = [nd64(r, ctx) for r in rhos]
    for p in mus_nd + rhos_nd:
        p.attach_grad()
    with autograd.record():
        loss = nd_combined_loss(ctx, mus_nd, rhos_nd, [nd64(e, ctx) for e in eps],
                                nd64(X, ctx), nd64(one_hot, ctx), 5, nd_prior)
    loss.backward()
    h = 1e-6
    for which, arrays, grads in (("mu", mus, mus_nd), ("rho", rhos, rhos_nd)):
        for k, array in enumerate(arrays):
            numeric = np.zeros_like(array)
            for idx in np.ndindex(array.shape):
                for sign in (1, -1):
                    shifted = [a.copy() for a in arrays]
                    shifted[k][idx] += sign * h
                    args = (shifted, rhos) if which == "mu" else (mus, shifted)
                    numeric[idx] += sign * np_combined_loss(*args, eps, X, one_hot, 5, np_prior)
            numeric /= 2 * h
            np.testing.assert_allclose(grads[k].grad.asnumpy(), numeric, rtol=1e-5, atol=1e-7,
                                       err_msg="d loss / d %s[%d]" % (which, k))


def test_evaluate_accuracy(ctx):
    rng = np.random.default_rng(8)
    shapes = layer_param_shapes(6, 5, 1, 4)
    params = [rng.normal(size=s).astype(np.float32) for s in shapes]
    X = rng.normal(size=(23, 6)).astype(np.float32)
    predicted = np_net(X, params).argmax(axis=1)
    labels = predicted.copy()
    labels[:9] = (labels[:9] + 1) % 4
    acc = evaluate_accuracy(X, labels, [nd.array(p, ctx=ctx) for p in params], batch_size=5)
    assert acc == pytest.approx(14 / 23)
    acc_nd = evaluate_accuracy(nd.array(X), nd.array(labels),
                               [nd.array(p, ctx=ctx) for p in params])
    assert acc_nd == pytest.approx(14 / 23)


@pytest.mark.slow
def test_the_tutorials_own_loop_trains_with_the_librarys_functions(mnist):
    """The tutorial's cells as a notebook user keeps them, its definitions replaced by the
    library's: its float ``num_batches``, its (inputs, outputs) weights from its own shape
    list, ``sample_epsilons`` without a context, its ``evaluate_accuracy(data_iterator, net,
    params)`` and its SGD on the summed loss. One epoch on 4,000 images with the tutorial's
    settings: 81.1% measured (seed 0)."""
    import mxnet as mx
    from gluon_bbb import (combined_loss, evaluate_accuracy, gaussian_prior,
                           log_softmax_likelihood, net, sample_epsilons,
                           transform_gaussian_samples, transform_rhos)
    config = {"num_hidden_layers": 2, "num_hidden_units": 400, "batch_size": 128,
              "epochs": 1, "learning_rate": 0.001, "num_samples": 1, "sigma_p": 1.0}
    ctx = mx.cpu()
    mx.random.seed(0)
    np.random.seed(0)  # the DataLoader's shuffle
    num_train = 4000
    train_data = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(
        mnist.train_images[:num_train], mnist.train_labels[:num_train].astype(np.float32)),
        config["batch_size"], shuffle=True)
    test_data = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(
        mnist.test_images, mnist.test_labels.astype(np.float32)), config["batch_size"])
    num_batches = num_train / config["batch_size"]  # a float, as the tutorial has it
    num_layers, num_hidden = config["num_hidden_layers"], config["num_hidden_units"]
    layer_param_shapes = []
    for i in range(num_layers + 1):
        if i == 0:
            W_shape, b_shape = (784, num_hidden), (num_hidden,)
        elif i == num_layers:
            W_shape, b_shape = (num_hidden, 10), (10,)
        else:
            W_shape, b_shape = (num_hidden, num_hidden), (num_hidden,)
        layer_param_shapes.extend([W_shape, b_shape])
    mus, rhos = [], []
    for shape in layer_param_shapes:
        mus.append(nd.random_normal(shape=shape, ctx=ctx, scale=0.1))
        rhos.append(-3 + nd.zeros(shape=shape, ctx=ctx))
    variational_params = mus + rhos
    for param in variational_params:
        param.attach_grad()

    def SGD(params, lr):
        for param in params:
            param[:] = param - lr * param.grad

    losses = []
    for e in range(config["epochs"]):
        for i, (data, label) in enumerate(train_data):
            data = data.as_in_context(ctx).reshape((-1, 784))
            label = label.as_in_context(ctx)
            label_one_hot = nd.one_hot(label, 10)
            with autograd.record():
                epsilons = sample_epsilons(layer_param_shapes)
                sigmas = transform_rhos(rhos)
                layer_params = transform_gaussian_samples(mus, sigmas, epsilons)
                output = net(data, layer_params)
                loss = combined_loss(output, label_one_hot, layer_params, mus, sigmas,
                                     gaussian_prior, log_softmax_likelihood, num_batches)
            loss.backward()
            SGD(variational_params, config["learning_rate"])
            losses.append(float(loss.asscalar()))
    assert np.all(np.isfinite(losses)) and np.mean(losses[-20:]) < np.mean(losses[:20])
    test_accuracy = evaluate_accuracy(test_data, net, mus)
    assert 0.75 < test_accuracy <= 1.0
    # the library's own call gives the same figure on the same means
    assert evaluate_accuracy(mnist.test_images, mnist.test_labels, mus) == pytest.approx(
        test_accuracy, abs=1e-6)


def test_net_takes_the_tutorials_inputs_first_weights(ctx):
    rng = np.random.default_rng(3)
    params = [rng.normal(size=shape) for shape in [(6, 5), (5,), (5, 5), (5,), (5, 3), (3,)]]
    X = rng.normal(size=(4, 6))
    ours = [p.T if p.ndim == 2 else p for p in params]
    got = net(nd64(X, ctx), [nd64(p, ctx) for p in params]).asnumpy()
    np.testing.assert_allclose(got, np_net(X, ours), rtol=1e-10)


@pytest.mark.parametrize("num_batches", [469.0, 468.75, np.float32(2.5), 1, 0.5])
def test_combined_loss_takes_any_positive_number_of_batches(ctx, num_batches):
    mus = [nd.ones((2, 3), ctx=ctx)]
    sigmas = [nd.ones((2, 3), ctx=ctx)]
    loss = combined_loss(nd.zeros((4, 2), ctx=ctx), nd.one_hot(nd.zeros(4, ctx=ctx), 2),
                         mus, mus, sigmas, gaussian_prior, log_softmax_likelihood, num_batches)
    expected = (6 * np_log_normal(1.0, 1.0, 1.0) - 6 * np_log_normal(1.0, 0.0, 1.0)) / float(
        num_batches) + 4 * np.log(2)
    assert float(loss.asscalar()) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("num_batches", [0, -1.0, float("nan"), float("inf"), True, "469", None])
def test_combined_loss_refuses_what_is_not_a_number_of_batches(ctx, num_batches):
    mus = [nd.ones((2, 3), ctx=ctx)]
    with pytest.raises(ValueError, match="num_batches must be a finite number > 0"):
        combined_loss(nd.zeros((4, 2), ctx=ctx), nd.one_hot(nd.zeros(4, ctx=ctx), 2), mus, mus,
                      mus, gaussian_prior, log_softmax_likelihood, num_batches)


def test_the_functions_refuse_what_has_no_meaning(ctx):
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        init_variational_params([(2, 3)], ctx, seed=-1)
    params = [nd.ones((3, 4), ctx=ctx), nd.zeros(3, ctx=ctx)]
    with pytest.raises(ValueError, match="5 examples with 4 labels: one label each"):
        evaluate_accuracy(np.zeros((5, 4), np.float32), np.zeros(4), params)


def test_the_tutorials_functions_refuse_what_they_cannot_take(ctx):
    from gluon_bbb import (combined_loss, evaluate_accuracy, gaussian_prior,
                           init_variational_params, layer_param_shapes, log_softmax_likelihood,
                           sample_epsilons, transform_gaussian_samples, transform_rhos)
    shapes = layer_param_shapes(784, 20, 1, 10)
    mus, rhos = init_variational_params(shapes, ctx, seed=0)
    sigmas, eps = transform_rhos(rhos), sample_epsilons(shapes, ctx)
    output, labels = nd.zeros((2, 10), ctx=ctx), nd.one_hot(nd.array([1, 2], ctx=ctx), 10)
    prior = lambda w: gaussian_prior(w, 1.0)  # noqa: E731
    for call, words in (
            (lambda: transform_gaussian_samples(mus, sigmas[:1], eps),
             "mus, sigmas, epsilons must hold one array per parameter each, got 4 mus, "
             "1 sigmas, 4 epsilons"),
            (lambda: transform_gaussian_samples(mus, [-s for s in sigmas], eps),
             "sigmas must be finite standard deviations >= 0"),
            (lambda: transform_gaussian_samples(mus, [s * np.nan for s in sigmas], eps),
             "sigmas[0] holds NaN"),
            (lambda: combined_loss(output, labels, mus[:2], mus, sigmas, prior,
                                   log_softmax_likelihood, num_batches=10),
             "params, mus, sigmas must hold one array per parameter each"),
            (lambda: combined_loss(output, labels, mus, mus, [s * 0 for s in sigmas], prior,
                                   log_softmax_likelihood, num_batches=10),
             "sigmas must be finite standard deviations > 0"),
            (lambda: layer_param_shapes(784, 0), "num_hidden must be an integer >= 1, got 0"),
            (lambda: init_variational_params(shapes, ctx, mu_scale=-1), "mu_scale must be"),
            (lambda: sample_epsilons([(3, -4)], ctx), "param_shapes must be an integer in [1, "),
            (lambda: sample_epsilons([(2.5,)], ctx), "param_shapes must be an integer in [1, "),
            (lambda: sample_epsilons([()], ctx), "param_shapes must be shapes of 1 to "),
            (lambda: sample_epsilons([(2 ** 16, 2 ** 15)], ctx), "(MXNet's samplers' bound)"),
            (lambda: evaluate_accuracy(np.zeros((2, 784)), np.zeros(2), mus, batch_size=0),
             "batch_size must be an integer >= 1, got 0")):
        with pytest.raises(ValueError) as info:
            call()
        assert words in str(info.value) and "\n" not in str(info.value), str(info.value)
    # what they take, they compute as before
    loss = combined_loss(output, labels, mus, mus, sigmas, prior, log_softmax_likelihood,
                         num_batches=10)
    assert np.isfinite(loss.asscalar())

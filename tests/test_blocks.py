"""The Gluon blocks: the same loss and gradients as the functional path for the same eps,
training with gluon.Trainer (hybridized too), save/load, the converter, and the SNR pruning and
uncertainty of a block network."""
import mxnet as mx
import numpy as np
import pytest
from mxnet import autograd, gluon, init, nd
from mxnet.gluon import nn

from gluon_bbb import (GaussianPrior, ScaleMixturePrior, log_softmax_likelihood,
                       transform_rhos)
from gluon_bbb.networks.blocks import (BayesianConv2D, BayesianDense, bayesian_layers, kl_term,
                              predict_probabilities, prune_by_snr, sample_on_call, to_bayesian,
                              use_mean_weights, variational_parameters)
from gluon_bbb.networks.network import parse_network
from gluon_bbb.analysis.uncertainty import noise_images, predictive_entropy
from tutorial_reference import tutorial_gradients


def small_cnn(ctx):
    """A Bayesian CNN on 8x8 images, as conv:3:3,relu,pool:2,dense:5,relu,dense:4."""
    net = nn.HybridSequential()
    net.add(BayesianConv2D(3, 3, in_channels=1, activation="relu"),
            nn.MaxPool2D(2),
            BayesianDense(5, 3 * 3 * 3, activation="relu"),
            BayesianDense(4, 5))
    net.initialize(init.Normal(0.3), ctx=ctx)
    return sample_on_call(net)


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("prior", [GaussianPrior(0.8), ScaleMixturePrior(0.25, 1.0, 0.05)])
def test_blocks_compute_the_functional_loss_and_gradients(ctx, hybridize, prior):
    """The blocks (float32) against the tutorial's functions at the same eps in float64, within
    float32's rounding: rtol 1e-4, or, where a draw makes a gradient that sensitive (an entry
    summed from terms that cancel), no further from it than twice the tutorial's functions in
    float32 (one entry in 135 sat 2-3e-4 relative from the float32 functions for 12 of 160
    draws of MXNet's generator, which the test does not seed)."""
    net = small_cnn(ctx)
    net.hybridize(hybridize)
    for layer in bayesian_layers(net):  # spread rho so that sigma differs per entry
        rho = layer.weight_rho.data()
        rho[:] = rho + nd.array(np.random.default_rng(1).normal(size=rho.shape), ctx=ctx)
    rng = np.random.default_rng(0)
    X = nd.array(rng.normal(size=(6, 1, 8, 8)), ctx=ctx)
    y = nd.one_hot(nd.array(rng.integers(0, 4, size=6), ctx=ctx), 4)
    with autograd.record():
        out = net(X)
        loss = 0.3 * kl_term(net, prior) - nd.sum(log_softmax_likelihood(out, y))
    loss.backward()
    assert out.context == ctx and loss.context == ctx
    # the same loss by the tutorial's functions, at the eps the blocks drew
    mus, rhos, epsilons = [], [], []
    for layer in bayesian_layers(net):
        layer_mus, layer_rhos, layer_eps = layer.variational_arrays()
        mus += [a.copy() for a in layer_mus]
        rhos += [a.copy() for a in layer_rhos]
        epsilons += layer_eps
    network = parse_network("conv:3:3,relu,pool:2,dense:5,relu,dense:4", 64, 4)
    f64 = lambda arrays: [a.astype("float64") for a in arrays]  # noqa: E731
    exact = tutorial_gradients(X.reshape((6, 64)).astype("float64"), y.astype("float64"),
                               f64(mus), f64(rhos), prior, 0.3, [f64(epsilons)], network=network)
    float32 = tutorial_gradients(X.reshape((6, 64)), y, mus, rhos, prior, 0.3, [epsilons],
                                 network=network)
    np.testing.assert_allclose(loss.asscalar(), exact[0].asscalar(), rtol=1e-5)
    grads = [(layer.weight_mu, layer.bias_mu, layer.weight_rho, layer.bias_rho)
             for layer in bayesian_layers(net)]
    ours_mu = [g.grad(ctx) for layer in grads for g in layer[:2]]
    ours_rho = [g.grad(ctx) for layer in grads for g in layer[2:]]
    for ours, theirs, functions32 in zip(ours_mu + ours_rho, exact[1] + exact[2],
                                         float32[1] + float32[2]):
        ours, theirs = ours.asnumpy().astype(np.float64), theirs.asnumpy()
        allowed = (1e-4 * (np.abs(theirs).max() + np.abs(theirs))
                   + 2 * np.abs(functions32.asnumpy().astype(np.float64) - theirs))
        worst = np.unravel_index(np.argmax(np.abs(ours - theirs) - allowed), theirs.shape)
        assert abs(ours[worst] - theirs[worst]) <= allowed[worst], (worst, ours[worst],
                                                                    theirs[worst])


def test_every_call_draws_new_weights_and_the_kl_follows_them(ctx):
    net = small_cnn(ctx)
    X = nd.ones((2, 1, 8, 8), ctx=ctx)
    first, kl_first = net(X).asnumpy(), kl_term(net).asscalar()
    second, kl_second = net(X).asnumpy(), kl_term(net).asscalar()
    assert not np.allclose(first, second) and kl_first != kl_second
    net.hybridize()  # a hybridized network draws through its own call, not its layers'
    third, fourth = net(X).asnumpy(), net(X).asnumpy()
    assert not np.allclose(third, fourth)
    with use_mean_weights(net):
        np.testing.assert_array_equal(net(X).asnumpy(), net(X).asnumpy())


@pytest.mark.slow
def test_a_bayesian_cnn_trains_with_gluon_trainer(ctx, mnist, tmp_path):
    mx.random.seed(0, ctx=ctx)
    net = nn.HybridSequential()
    net.add(BayesianConv2D(8, 5, in_channels=1, activation="relu", rho_offset=-5.0),
            nn.MaxPool2D(2),
            BayesianDense(64, 8 * 12 * 12, activation="relu", rho_offset=-5.0),
            BayesianDense(10, 64, rho_offset=-5.0))
    net.initialize(ctx=ctx)
    sample_on_call(net).hybridize()
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 2e-3})
    images = mnist.train_images[:5000].reshape(-1, 1, 28, 28)
    num_batches = 5000 // 100
    for epoch in range(3):
        for i in range(num_batches):
            X = nd.array(images[i * 100:(i + 1) * 100], ctx=ctx)
            y = nd.one_hot(nd.array(mnist.train_labels[i * 100:(i + 1) * 100], ctx=ctx), 10)
            with autograd.record():
                output = net(X)
                loss = (kl_term(net, GaussianPrior(1.0)) / num_batches
                        - nd.sum(log_softmax_likelihood(output, y)))
            loss.backward()
            trainer.step(1)
    X_test = nd.array(mnist.test_images[:2000].reshape(-1, 1, 28, 28), ctx=ctx)
    labels = mnist.test_labels[:2000]
    probs = predict_probabilities(net, X_test, num_samples=5)
    assert probs.context == ctx
    accuracy = float(np.mean(probs.asnumpy().argmax(axis=1) == labels))
    assert accuracy >= 0.9, accuracy  # 0.95 measured
    # the weights round-trip through save_parameters/load_parameters
    net.save_parameters(str(tmp_path / "cnn.params"))
    again = nn.HybridSequential()
    again.add(BayesianConv2D(8, 5, in_channels=1, activation="relu"), nn.MaxPool2D(2),
              BayesianDense(64, 8 * 12 * 12, activation="relu"), BayesianDense(10, 64))
    again.load_parameters(str(tmp_path / "cnn.params"), ctx=ctx)
    again.hybridize()  # the same graph as net's, so the same bits
    np.testing.assert_array_equal(predict_probabilities(again, X_test, 0).asnumpy(),
                                  predict_probabilities(net, X_test, 0).asnumpy())
    # SNR pruning of the block network, and its uncertainty on noise against digits
    mus, sigmas = variational_parameters(net)
    total = sum(m.size for m in mus)
    prune_by_snr(again, 0.5)
    zeros = sum(int((m.asnumpy() == 0).sum()) for m in variational_parameters(again)[0])
    assert zeros >= total // 2
    pruned = float(np.mean(predict_probabilities(again, X_test, 0).asnumpy().argmax(axis=1)
                           == labels))
    assert pruned >= accuracy - 0.05, (pruned, accuracy)
    noise = nd.array(noise_images(500).reshape(-1, 1, 28, 28), ctx=ctx)
    # 0.63 bits on noise against 0.45 on digits measured after this short training
    assert (predictive_entropy(predict_probabilities(net, noise, 5)).mean()
            > 1.15 * predictive_entropy(probs).mean())


def test_to_bayesian_turns_a_users_network_into_bayesian_layers(ctx):
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, in_channels=1, activation="relu"), nn.MaxPool2D(2),
            nn.Flatten(), nn.Dense(6, activation="relu"), nn.Dense(3))
    net.initialize(init.Normal(0.5), ctx=ctx)
    X = nd.array(np.random.default_rng(0).normal(size=(5, 1, 8, 8)), ctx=ctx)
    deterministic = net(X).asnumpy()  # the forward pass also fixes the Dense input sizes
    weights = [p.data().copy() for name, p in sorted(net.collect_params().items())]
    to_bayesian(net, rho_offset=-30.0)
    assert [type(child).__name__ for child in net] == [
        "BayesianConv2D", "MaxPool2D", "Flatten", "BayesianDense", "BayesianDense"]
    layers = bayesian_layers(net)  # initialized where the deterministic layers were
    np.testing.assert_array_equal(layers[0].weight_mu.data().asnumpy(), weights[1].asnumpy())
    np.testing.assert_array_equal(layers[0].weight_rho.data().asnumpy(), -30.0)
    # sigma = softplus(-30) ~ 1e-13: the Bayesian network computes the deterministic one
    net.hybridize()
    for _ in range(2):
        np.testing.assert_allclose(net(X).asnumpy(), deterministic, rtol=1e-5, atol=1e-6)
    assert all(p.data().context == ctx for p in net.collect_params().values())
    sigmas = transform_rhos([layers[1].weight_rho.data()])
    assert float(sigmas[0].max().asscalar()) < 1e-12
    # a layer whose input size is not known yet infers it on the network's first call
    unsized = nn.HybridSequential()
    unsized.add(nn.Dense(3))
    to_bayesian(unsized, estimator="flipout")
    unsized.initialize(ctx=ctx)
    unsized.hybridize()
    assert unsized(nd.ones((2, 7), ctx=ctx)).shape == (2, 3)
    layer, = bayesian_layers(unsized)
    assert layer.weight_mu.shape == (3, 7) and layer.estimator.name == "flipout"
    # initialized before its input size was known: the twin waits for the first call too,
    # mu from the same initializer, on the same context, without a second initialize()
    waiting = nn.HybridSequential()
    waiting.add(nn.Dense(4, activation="relu"), nn.Dense(3))
    waiting.initialize(init.Constant(0.3), ctx=ctx)
    to_bayesian(waiting, rho_offset=-30.0)
    out = waiting(nd.ones((2, 5), ctx=ctx))
    np.testing.assert_allclose(out.asnumpy(), 0.3 * 4 * (0.3 * 5), rtol=1e-5)
    first, second = bayesian_layers(waiting)
    assert first.weight_mu.shape == (4, 5) and second.weight_mu.shape == (3, 4)
    np.testing.assert_array_equal(first.weight_mu.data().asnumpy(), 0.3)
    np.testing.assert_array_equal(second.bias_mu.data().asnumpy(), 0.0)
    assert all(p.data().context == ctx for p in waiting.collect_params().values())


@pytest.mark.parametrize("hybridize", [False, True])
def test_the_kl_term_belongs_to_the_forward_pass_before_it(ctx, hybridize):
    net = small_cnn(ctx)
    net.hybridize(hybridize)
    X = nd.array(np.random.default_rng(2).normal(size=(3, 1, 8, 8)), ctx=ctx)
    # the KL term before the forward pass in one recorded loss: it would be the previous
    # draw's (all-zero eps on the first step), so it is refused, on the first step and later
    with autograd.record():
        with pytest.raises(RuntimeError, match="before any forward pass"):
            kl_term(net) + nd.sum(net(X))
    with autograd.record():
        output = net(X)
        kl = kl_term(net)
        with pytest.raises(RuntimeError, match="weights of an earlier forward pass"):
            kl_term(net)  # a second KL term for one forward pass
    with autograd.record():
        with pytest.raises(RuntimeError, match="weights of an earlier forward pass"):
            kl_term(net) + nd.sum(net(X))
    # the right order: the KL term of exactly the weights the forward pass drew
    with autograd.record():
        output = net(X)
        kl = kl_term(net)
    mus, rhos, epsilons = [], [], []
    for layer in bayesian_layers(net):
        layer_mus, layer_rhos, layer_eps = layer.variational_arrays()
        mus, rhos, epsilons = mus + layer_mus, rhos + layer_rhos, epsilons + layer_eps
    sigmas = [np.log1p(np.exp(r.asnumpy().astype(np.float64))) for r in rhos]
    expected = 0.0
    for mu, sigma, eps in zip(mus, sigmas, epsilons):
        w = mu.asnumpy() + sigma * eps.asnumpy()
        log_q = -0.5 * np.log(2 * np.pi) - np.log(sigma) - 0.5 * eps.asnumpy() ** 2
        log_p = -0.5 * np.log(2 * np.pi) - 0.5 * w ** 2
        expected += np.sum(log_q - log_p)
    assert output.shape == (3, 4) and np.abs(epsilons[0].asnumpy()).sum() > 0
    np.testing.assert_allclose(kl.asscalar(), expected, rtol=1e-5)
    # outside autograd.record() (logging), the last forward pass's term, as often as asked
    np.testing.assert_allclose(kl_term(net).asscalar(), expected, rtol=1e-5)


def test_blocks_refuse_what_they_cannot_take(ctx):
    plain = nn.HybridSequential()
    plain.add(nn.Dense(3, in_units=4))
    plain.initialize(ctx=ctx)
    with pytest.raises(ValueError, match="has no Bayesian layer"):
        kl_term(plain)
    net = small_cnn(ctx)
    X = nd.ones((2, 1, 8, 8), ctx=ctx)
    for bad in (-1, 1.5, True, 1001):
        with pytest.raises(ValueError, match=r"num_samples must be an integer in \[0, 1000\]"):
            predict_probabilities(net, X, num_samples=bad)
    # every number a block takes by its kind's rule; a prior is a Prior
    for make, words in ((lambda: BayesianDense(0), "units must be an integer >= 1, got 0"),
                        (lambda: BayesianDense(2.5), "units must be an integer >= 1"),
                        (lambda: BayesianDense(3, in_units=-1), "in_units must be an integer"),
                        (lambda: BayesianConv2D(3, 0), "kernel_size must be an integer >= 1"),
                        (lambda: BayesianConv2D(3, (3, 3, 3)), "kernel_size must be a whole "
                                                               "number or two"),
                        (lambda: BayesianConv2D(3, 3, padding=-1), "padding must be an integer"),
                        (lambda: BayesianDense(3, rho_offset=float("nan")), "rho_offset must be"),
                        (lambda: BayesianDense(3, mu_scale=0), "mu_scale must be"),
                        (lambda: to_bayesian(nn.Dense(3, in_units=2), prior="laplace"),
                         "prior must be a Prior")):
        with pytest.raises(ValueError) as info:
            make()
        assert words in str(info.value)
    conv = BayesianConv2D(3, 3, in_channels=1)
    conv.initialize(ctx=ctx)
    for recording in (False, True):
        with autograd.record(recording):
            with pytest.raises(ValueError, match=r"takes 4-D input \(batch, channels, height, "
                                                 r"width\), as nn.Conv2D does, got shape "
                                                 r"\(2, 64\)"):
                conv(nd.ones((2, 64), ctx=ctx))


@pytest.mark.parametrize("hybridize", [False, True])
def test_blocks_infer_their_input_sizes_and_follow_the_initializer(ctx, hybridize):
    net = nn.HybridSequential()
    net.add(BayesianConv2D(4, kernel_size=3, activation="relu"), nn.MaxPool2D(2),
            BayesianDense(5))
    net.initialize(init.Constant(0.3), ctx=ctx)
    sample_on_call(net).hybridize(hybridize)
    X = nd.ones((2, 3, 8, 8), ctx=ctx)
    with autograd.record():
        out = net(X)
        kl = kl_term(net)  # the first forward pass drew the weights it pairs with
    assert out.shape == (2, 5) and np.isfinite(kl.asscalar())
    conv, dense = bayesian_layers(net)
    assert conv.weight_mu.shape == (4, 3, 3, 3) and dense.weight_mu.shape == (5, 4 * 3 * 3)
    # mu from the initializer given to initialize(), as nn.Dense's weight; the bias at 0;
    # rho at its default, sigma = softplus(-5)
    np.testing.assert_array_equal(dense.weight_mu.data().asnumpy(), 0.3)
    np.testing.assert_array_equal(dense.bias_mu.data().asnumpy(), 0.0)
    np.testing.assert_allclose(dense.weight_rho.data().asnumpy(), -5.0)
    assert np.abs(conv.weight_eps.data().asnumpy()).sum() > 0


@pytest.mark.parametrize("estimator", ["sample", "lrt", "flipout"])
def test_each_estimator_gives_a_block_the_posteriors_output_distribution(ctx, estimator):
    # x w + b with w ~ N(mu, sigma^2): mean x mu + b_mu, variance x^2 sigma^2 + sigma_b^2 for
    # every example; two copies of one input get the same weights under weight sampling
    # (correlation 1), independent noise under the local reparametrization and Flipout
    layer = BayesianDense(2, 3, estimator=estimator)
    layer.initialize(ctx=ctx)
    rng = np.random.default_rng(0)
    mu, rho = rng.normal(size=(2, 3)), rng.normal(size=(2, 3)) - 1.0
    layer.weight_mu.set_data(nd.array(mu, ctx=ctx))
    layer.weight_rho.set_data(nd.array(rho, ctx=ctx))
    layer.bias_mu.set_data(nd.array([0.5, -0.5], ctx=ctx))
    x = np.array([1.0, -2.0, 0.5])
    X = nd.array(np.stack([x, x]), ctx=ctx)
    mx.random.seed(3)
    draws = np.stack([layer(X).asnumpy() for _ in range(1000)])  # (draws, 2 examples, 2)
    sigma, sigma_b = np.log1p(np.exp(rho)), np.log1p(np.exp(-5.0))
    # within 3.5 standard errors of 1,000 draws
    np.testing.assert_allclose(draws.mean(axis=0)[0], x @ mu.T + [0.5, -0.5], atol=0.1)
    np.testing.assert_allclose(draws.var(axis=0)[0], (x ** 2) @ (sigma ** 2).T + sigma_b ** 2,
                               rtol=0.15)
    correlation = np.corrcoef(draws[:, 0, 0], draws[:, 1, 0])[0, 1]
    assert (correlation > 0.999) if estimator == "sample" else abs(correlation) < 0.1
    with use_mean_weights(layer):  # every estimator: the mean network
        np.testing.assert_allclose(layer(X).asnumpy()[0], x @ mu.T + [0.5, -0.5], rtol=1e-5)

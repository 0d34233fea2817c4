"""analysis/uncertainty.py: the Monte Carlo predictive, the MLP baseline, the report and
evaluate."""
import gzip
import struct

import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, net, train
from gluon_bbb.tutorial import init_variational_params
from gluon_bbb.analysis.uncertainty import predict, predictive_entropy



def test_predict_with_tiny_sigma_is_the_deterministic_net(ctx):
    shapes = Config(num_hidden_units=30).layer_shapes()
    mus, _ = init_variational_params(shapes, ctx, seed=0)
    sigmas = [nd.full(m.shape, 1e-12, ctx=ctx) for m in mus]
    X = np.random.default_rng(0).uniform(0, 2, size=(25, 784)).astype(np.float32)
    probs = predict(X, mus, sigmas, num_samples=3, batch_size=10)
    assert probs.context == ctx and probs.shape == (25, 10)
    expected = nd.softmax(net(nd.array(X, ctx=ctx), mus), axis=1)
    np.testing.assert_allclose(probs.asnumpy(), expected.asnumpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(probs.asnumpy().sum(axis=1), 1.0, rtol=1e-5)


def test_predict_averages_samples(ctx):
    shapes = Config(num_inputs=3, num_hidden_units=4, num_outputs=2).layer_shapes()
    mus, _ = init_variational_params(shapes, ctx, seed=1)
    sigmas = [nd.full(m.shape, 2.0, ctx=ctx) for m in mus]
    X = np.ones((1, 3), dtype=np.float32)
    one = predict(X, mus, sigmas, num_samples=1, seed=5).asnumpy()
    many = predict(X, mus, sigmas, num_samples=400, seed=5).asnumpy()
    assert not np.allclose(one, many)  # different draws, averaged
    # with sigma 2 the averaged prediction is far less confident than a single draw can be
    assert predictive_entropy(many)[0] > 0.5


def write_idx_images(path, images):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">IIII", 0x803, *images.shape) + images.astype(np.uint8).tobytes())


@pytest.mark.slow
def test_mc_dropout_trains_on_mnist_and_predicts_with_masks(tmp_path, mnist, ctx):
    config = Config(train_size=5000, epochs=1, seed=0, model="mcdropout", num_hidden_units=100,
                    dropout=0.3)
    network = config.build_network()
    assert str(network) == "dense:100,relu,dropout:0.3,dense:100,relu,dropout:0.3,dense:10"
    result = train(config, mnist, ctx, out_dir=str(tmp_path / "mcd"), log=lambda l: None)
    assert result.mus[0].context == ctx
    assert result.history[-1]["test_accuracy"] >= 0.7  # 0.806 measured: 40 SGD steps
    X, labels = mnist.test_images[:500], mnist.test_labels[:500]
    masks = predict(X, result.mus, None, num_samples=8, seed=3, network=network)
    assert masks.context == ctx
    np.testing.assert_array_equal(
        masks.asnumpy(), predict(X, result.mus, None, 8, seed=3, network=network).asnumpy())
    # each draw a different mask: the average is not the network with every unit kept
    kept = predict(X, result.mus, None, num_samples=0, network=network).asnumpy()
    assert not np.allclose(masks.asnumpy(), kept, atol=1e-3)
    np.testing.assert_allclose(kept, nd.softmax(net(nd.array(X, ctx=ctx), result.mus,
                                                    network=network.without_dropout()),
                                                axis=1).asnumpy(), rtol=1e-5)
    assert (kept.argmax(axis=1) == labels).mean() >= 0.7
    assert (masks.asnumpy().argmax(axis=1) == labels).mean() >= 0.7


def test_prediction_batches_follow_the_networks_activations(ctx):
    """The LeNet predicts in batches of 245 (its 34,130 activation floats an image), the MLPs in
    batches of 1,000, and the LeNet in batches of 1,000 where the C kernel computes each
    convolution with its pooling and ReLU (4,690 floats: 2,880 + 800 + 500 + 500 + 10, the
    rectified poolings' and the dense layers'); the batches change nothing but the speed: one
    seed's draws of the weights give the same predictive in batches of 245 and of 1,000."""
    from gluon_bbb.networks.network import mlp, parse_network
    from gluon_bbb.analysis.uncertainty import prediction_batch_size
    lenet = parse_network("lenet")
    assert prediction_batch_size(lenet) == 2 ** 23 // 34130 == 245
    assert lenet.pooled_activation_size == 4690
    assert prediction_batch_size(lenet, pooled=True) == min(1000, 2 ** 23 // 4690) == 1000
    assert prediction_batch_size(None) == prediction_batch_size(mlp(num_hidden=1200)) == 1000
    rng = np.random.default_rng(0)
    mus = [nd.array(rng.normal(scale=0.1, size=s), ctx=ctx) for s in lenet.param_shapes()]
    sigmas = [nd.full(s, 0.05, ctx=ctx) for s in lenet.param_shapes()]
    X = rng.uniform(0, 2, size=(300, 784)).astype(np.float32)
    default = predict(X, mus, sigmas, num_samples=2, seed=3, network=lenet).asnumpy()
    for batch_size in (245, 1000):
        batched = predict(X, mus, sigmas, num_samples=2, seed=3, network=lenet,
                          batch_size=batch_size)
        np.testing.assert_allclose(default, batched.asnumpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(default, predict(X, mus, sigmas, num_samples=2, seed=4,
                                            network=lenet).asnumpy(), atol=1e-3)

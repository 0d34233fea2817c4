"""shipping/writer.py: the structural removal against the pruned network it stands for, the
multiply-adds counted, a folded gate's moments."""
import numpy as np
import pytest

from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.shipping.writer import _stages, remove_units
from gluon_bbb.networks.network import parse_network
from gluon_bbb.analysis.snr import keep_masks


def numpy_pruned_forward(network, mus, keep, X):
    """The pruned mean network, every unit kept: the reference the narrowed one must equal."""
    return network(X, [m * k for m, k in zip(mus, keep)], F=compressed.NumPyOperators)


@pytest.mark.parametrize("description,features", [
    ("dense:12,relu,dense:9,relu,dense:3", 20),
    ("conv:6:3,relu,pool:2,conv:5:2,relu,pool:2,dense:7,relu,dense:3", 100)])
def test_removing_units_keeps_what_the_pruned_network_computes(description, features):
    rng = np.random.default_rng(1)
    network = parse_network(description, features, 3)
    mus = [rng.normal(size=s).astype(np.float32) for s in network.param_shapes()]
    sigmas = [rng.uniform(0.05, 1.0, size=s).astype(np.float32) for s in network.param_shapes()]
    # prune whole units: every input of some units, every output of others, with and
    # without their biases
    keep = keep_masks(mus, sigmas, 0.3)
    keep[0][0] = False                      # unit 0 of layer 1: inputs gone, its bias kept
    keep[0][1], keep[1][1] = False, False   # unit 1: inputs and bias gone
    keep[2][:, 2] = False                   # unit 2 of layer 1: read by nothing
    keep[2][3] = False                      # unit 3 of layer 2: inputs gone
    stages = _stages(network, [m * k for m, k in zip(mus, keep)], None)
    removed = remove_units(stages)
    assert removed[0] >= 3 and removed[1] >= 1
    X = rng.normal(size=(11, features)).astype(np.float32)
    narrow = parse_network(",".join(
        "dense:%d" % s.units if str(layer).startswith("dense") else
        "conv:%d:%d" % (s.units, layer.kernel) if str(layer).startswith("conv") else str(layer)
        for layer, s in _zip_stages(network, stages)), features, 3)
    params = [a for s in stages for a in (s.W, s.b)]
    np.testing.assert_allclose(narrow(X, params, F=compressed.NumPyOperators),
                               numpy_pruned_forward(network, mus, keep, X), rtol=1e-4,
                               atol=1e-5)


def test_multiply_adds_count_each_dense_and_convolution_layer_once():
    # LeNet-5-Caffe: 24x24x20 outputs of 25, 8x8x50 of 20x25, 500 of 800, 10 of 500
    lenet = 24 * 24 * 20 * 25 + 8 * 8 * 50 * 20 * 25 + 500 * 800 + 10 * 500
    assert parse_network("lenet").multiply_adds() == lenet == 2293000
    gated = parse_network("conv:20:5,gate,relu,pool:2,conv:50:5,gate,relu,pool:2,dense:500,"
                          "gate,relu,dense:10")
    assert gated.multiply_adds() == lenet  # a gate folds into its layer
    shapes = gated.param_shapes()
    plain, params = gated.without_gates(shapes)
    assert str(plain) == str(parse_network("lenet")) and params == plain.param_shapes()
    assert len(shapes) - len(params) == 3  # one vector a gate


def test_a_folded_gate_gives_each_weight_the_mean_and_variance_of_its_product():
    """Folding a gate N(g, s_g^2) into a convolution's weights N(m, s^2): each weight's mean
    and standard deviation those of w * g drawn independently (sampled here)."""
    rng = np.random.default_rng(2)
    network = parse_network("conv:3:2,gate,relu,flatten,dense:2", 16, 2)
    shapes = network.param_shapes()
    mus = [rng.normal(size=s).astype(np.float32) for s in shapes]
    sigmas = [rng.uniform(0.1, 1.0, size=s).astype(np.float32) for s in shapes]
    stage = _stages(network, mus, sigmas)[0]
    draws = 200000
    gate = mus[2][None, :, None, None, None] + sigmas[2][None, :, None, None, None] * \
        rng.normal(size=(draws, 3, 1, 1, 1))
    products = (mus[0] + sigmas[0] * rng.normal(size=(draws,) + mus[0].shape)) * gate
    np.testing.assert_allclose(stage.W, products.mean(axis=0), atol=0.02)
    np.testing.assert_allclose(stage.sW, products.std(axis=0), rtol=0.02)
    biases = (mus[1] + sigmas[1] * rng.normal(size=(draws, 3))) * gate[:, :, 0, 0, 0]
    np.testing.assert_allclose(stage.sb, biases.std(axis=0), rtol=0.02)
    np.testing.assert_allclose(stage.b, mus[1] * mus[2], rtol=1e-6)


def _zip_stages(network, stages):
    """Each layer of ``network`` with the stage of its own weights (or of the layer before)."""
    stage = None
    it = iter(stages)
    for layer in network.layers:
        if str(layer).startswith(("dense", "conv")):
            stage = next(it)
        yield layer, stage

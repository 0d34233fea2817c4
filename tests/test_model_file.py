"""shipping/model_file.py: the file's codings against NumPy written here, the NumPy operators
against MXNet's layers, the predictor's refusals."""
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.networks.layers import parse_network


def test_varints_round_trip_and_take_one_byte_below_128():
    values = np.array([0, 1, 127, 128, 300, 16383, 16384, 2 ** 40, 5], dtype=np.int64)
    data = compressed.encode_varints(values)
    # LEB128 written out: 7 bits a byte, low first, the high bit on all but a number's last
    expected = b""
    for v in values.tolist():
        while True:
            byte, v = v & 0x7F, v >> 7
            expected += bytes([byte | (0x80 if v else 0)])
            if not v:
                break
    assert data == expected and len(compressed.encode_varints([0, 127, 5])) == 3
    np.testing.assert_array_equal(compressed.decode_varints(data, values.size), values)
    positions = np.array([0, 3, 4, 1000])
    np.testing.assert_array_equal(compressed.gaps_from_positions(positions), [1, 3, 1, 996])
    np.testing.assert_array_equal(
        compressed.positions_from_gaps(compressed.gaps_from_positions(positions)), positions)


def test_numpy_operators_compute_mxnets_layers():
    rng = np.random.default_rng(0)
    network = parse_network("conv:3:3,relu,pool:2,conv:4:2,relu,flatten,dense:5,relu,dense:2",
                            100, 2)
    params = [rng.normal(size=s).astype(np.float32) for s in network.param_shapes()]
    X = rng.normal(size=(7, 100)).astype(np.float32)
    ours = network(X, params, F=compressed.NumPyOperators)
    theirs = network(nd.array(X), [nd.array(p) for p in params]).asnumpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    # max pooling on sides the window does not divide (the remainder dropped, as MXNet's)
    for shape, k in (((2, 3, 9, 11), 2), ((1, 2, 10, 7), 3), ((2, 1, 4, 4), 4)):
        h = rng.normal(size=shape).astype(np.float32)
        np.testing.assert_array_equal(
            compressed.NumPyOperators.Pooling(h, (k, k), (k, k)),
            nd.Pooling(nd.array(h), kernel=(k, k), stride=(k, k), pool_type="max").asnumpy())


def synthetic_model(path, mus=None, description="dense:20,relu,dense:10", seed=0,
                    proportion=0.0, precision=0.0, sigma_bits=0, **header):
    """A compressed file of a random network (no training needed to test the file's readers):
    ``mus`` or random means, sigmas of 0.05, ``header`` entries replaced."""
    from gluon_bbb.shipping.writer import compress_parameters, write_model
    network = parse_network(description, 784, 10)
    rng = np.random.default_rng(seed)
    if mus is None:
        mus = [rng.normal(0, 0.1, size=s).astype(np.float32) for s in network.param_shapes()]
    sigmas = [np.full(s, 0.05, np.float32) for s in network.param_shapes()]
    _, written, blobs, _ = compress_parameters(network, mus, sigmas, sigmas, proportion,
                                               precision, sigma_bits)
    written.update(unsure_entropy_bits=1.0, predictive_samples=0)
    written.update(header)
    write_model(str(path), written, blobs)
    return path


@pytest.mark.parametrize("num_samples", [-3, 1001, 2.0, True, None])
def test_a_compressed_models_predict_refuses_a_count_of_draws_that_is_not_one(tmp_path,
                                                                            num_samples):
    model = compressed.read(str(synthetic_model(tmp_path / "m.gbbb", sigma_bits=4)))
    X = np.zeros((3, 784), np.float32)
    with pytest.raises(ValueError, match="num_samples must be an integer in \\[0, 1000\\]"):
        model.predict(X, num_samples=num_samples)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        model.predict(X, batch_size=0)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        model.predict(X, num_samples=2, seed=-1)
    probs = model.predict(X, num_samples=2)
    assert probs.shape == (3, 10) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)

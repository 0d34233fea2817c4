"""shipping/model_file.py: the file's codings against NumPy written here, the NumPy operators
against MXNet's layers, a header believed only as far as it is checked, the predictor's
refusals and its rule for what is unsure."""
import json
import lzma
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import given, strategies as st
from mxnet import nd

from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.networks.network import parse_network


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


def test_a_model_file_whose_header_is_not_as_written_is_refused(tmp_path):
    from commands import PREDICT, assert_one_line_error, run
    from gluon_bbb.shipping.writer import compress_parameters
    model = synthetic_model(tmp_path / "model.gbbb")
    header, body = compressed.unpack(model.read_bytes())
    blobs = [body]  # the arrays, back to back, as the header names them

    def variant(name, change):
        path = tmp_path / name
        path.write_bytes(compressed.pack(change(dict(header)), blobs))  # its checksum is valid
        return path
    cases = (
        (variant("no-threshold.gbbb", lambda h: {k: v for k, v in h.items()
                                                 if k != "unsure_entropy_bits"}),
         "its header's 'unsure_entropy_bits' is missing"),
        (variant("list.gbbb", lambda h: list(h)), "holds no compressed model"),
        (variant("classes.gbbb", lambda h: dict(h, classes="ten")),
         "its header: field classes must be an integer in [2, 10000], got 'ten'"),
        (variant("entropy.gbbb", lambda h: dict(h, unsure_entropy_bits=4.0)),
         "'unsure_entropy_bits' is not an entropy of 10 classes (from 0 to 3.32 bits)"),
        # a pixel scale that would make every image black, or blow its pixels up
        (variant("scale.gbbb", lambda h: dict(h, input=dict(h["input"], pixel_scale=1e300))),
         "field input.pixel_scale must be a finite number in [1, 10000], got 1e+300"),
        (variant("small-scale.gbbb", lambda h: dict(h, input=dict(h["input"],
                                                                  pixel_scale=1e-300))),
         "field input.pixel_scale must be a finite number in [1, 10000], got 1e-300"),
        (variant("tensor.gbbb", lambda h: dict(h, tensors=[dict(t, value_dtype="object")
                                                           for t in h["tensors"]])),
         "value_dtype must be one of int8, int16, int32, float32, got 'object'"),
        (variant("nested.gbbb", lambda h: dict(h, source=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[
            []]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])), "it nests 34 levels deep, more than the 32"),
        # a header believed only as far as it is checked: no 182 TiB of means for a network
        # it says is that large, no classifier's prediction for a regression's likelihood
        (variant("huge.gbbb", lambda h: dict(h, input=dict(h["input"], features=10 ** 12))),
         "field input.features must be an integer in [1, 268435456], got 1000000000000"),
        (variant("regression.gbbb", lambda h: dict(h, likelihood="gaussian:1")),
         "'likelihood' is 'gaussian:1': this reader predicts classes"),
        (variant("counts.gbbb", lambda h: dict(h, tensors=[dict(t, kept=10 ** 15)
                                                           for t in h["tensors"]])),
         "'kept' or 'index_bytes' is not as written"))
    digit = tmp_path / "digit.npy"
    np.save(digit, np.zeros((28, 28)))
    for path, expected in cases:
        assert_one_line_error(run(PREDICT, path, digit), expected)
        with pytest.raises(compressed.ModelFileError):
            compressed.read(str(path))
    # a body that expands far past what its header's arrays take is refused before it is
    # decompressed: 256 MiB of zeros behind a valid checksum, in a file of 40 KB
    text = json.dumps(header).encode()
    payload = lzma.compress(struct.pack("<I", len(text)) + text + body + bytes(1 << 28),
                            format=lzma.FORMAT_RAW, filters=[
                                {"id": lzma.FILTER_LZMA2, "preset": 1, "dict_size": 1 << 20}])
    bomb = compressed.MAGIC + struct.pack("<HI", compressed.VERSION, zlib.crc32(payload)) + payload
    assert len(bomb) < 1 << 20
    tracemalloc.start()
    with pytest.raises(compressed.ModelFileError, match="it holds more than the "):
        compressed.decode(bomb)
    assert tracemalloc.get_traced_memory()[1] < 1 << 24
    tracemalloc.stop()
    # compress refuses to build such a file (it reads back what it writes); one written
    # otherwise, with a valid checksum, is refused by the reader
    network = parse_network("dense:20,relu,dense:10", 784, 10)
    mus = [np.ones(s, np.float32) for s in network.param_shapes()]
    mus[2][0, 0] = 7.0
    _, written, blobs, _ = compress_parameters(network, mus, None, mus, 0.0, 0.0)
    seven, nan = struct.pack("<f", 7.0), struct.pack("<f", np.nan)
    assert sum(blob.count(seven) for blob in blobs) == 1
    path = tmp_path / "nan.gbbb"
    path.write_bytes(compressed.pack(dict(written, unsure_entropy_bits=1.0),
                                     [blob.replace(seven, nan) for blob in blobs]))
    assert_one_line_error(run(PREDICT, path, digit),
                          "nan.gbbb holds non-finite means in array 2; nothing is computed")


def test_unsure_is_an_entropy_above_the_threshold_or_a_probability_below_the_floor():
    # entropies 0.881, 0.971, 0.993 and 0.081 bits
    probs = np.array([[0.3, 0.7], [0.6, 0.4], [0.45, 0.55], [0.99, 0.01]])
    np.testing.assert_array_equal(compressed.unsure(probs, 0.98), [False, False, True, False])
    np.testing.assert_array_equal(compressed.unsure(probs, 0.9), [False, True, True, False])
    np.testing.assert_array_equal(compressed.unsure(probs, None), [False] * 4)
    np.testing.assert_array_equal(compressed.unsure(probs, None, 0.65),
                                  [False, True, True, False])
    np.testing.assert_array_equal(compressed.unsure(np.array([[0.4, 0.3, 0.3]]), 2.0), [True])


@given(st.integers(0, 4), st.sampled_from(["nan", "inf", "shape", "dtype", "empty"]),
       st.integers(0, 2 ** 32 - 1))
def test_the_predictor_refuses_what_it_cannot_compute_on(tmp_path_factory, rows, fault, seed):
    """``inputs``, ``predict`` and ``unsure`` on arrays of every shape and fault: a NaN, an
    infinity, a shape that is not the model's, values that are not numbers, nothing at all;
    each refused on one line (ValueError), never computed on; what they take, computed."""
    model = compressed.read(str(synthetic_model(tmp_path_factory.mktemp("m") / "m.gbbb",
                                                sigma_bits=4)))
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (rows + 1, 28, 28)).astype(np.float64)
    X = model.inputs(pixels)
    probs = model.predict(X, num_samples=2)
    assert probs.shape == (rows + 1, 10) and model.unsure(probs).shape == (rows + 1,)
    # one image, as (28, 28) or (784,), is one image
    assert model.inputs(pixels[0]).shape == model.inputs(pixels[0].ravel()).shape == (1, 784)
    bad = {"nan": lambda a: np.where(a == a.max(), np.nan, a),
           "inf": lambda a: np.where(a == a.max(), np.inf, a),
           "shape": lambda a: a[..., :-1] if a.ndim > 1 else a[:-1],
           "dtype": lambda a: a.astype(str), "empty": lambda a: a[:0]}[fault]
    for call, array in ((model.inputs, pixels), (model.predict, X), (model.unsure, probs)):
        if fault == "empty" and call is model.inputs:
            continue  # no image, no pixel to refuse
        with pytest.raises(ValueError) as info:
            call(bad(array))
        assert "\n" not in str(info.value)


def test_a_models_inputs_refuse_what_are_not_raw_pixels(tmp_path):
    model = compressed.read(str(synthetic_model(tmp_path / "model.gbbb")))
    pixels = np.random.default_rng(0).integers(0, 256, (2, 28, 28))
    np.testing.assert_allclose(model.inputs(pixels), pixels.reshape(2, 784) / 126.0, rtol=1e-6)
    for bad, words in ((pixels / 255.0, "as images scaled to [0, 1] do"),
                       (pixels * 2.0, "must lie in [0, 255]"),
                       (np.full((1, 784), np.inf), "784 of them are NaN or infinite"),
                       (np.array([["a"] * 784]), "not numbers")):
        with pytest.raises(ValueError, match="pixel values: .*" + words.replace("[", r"\[")
                           .replace("]", r"\]")):
            model.inputs(bad)
    np.testing.assert_array_equal(model.inputs(np.zeros((1, 28, 28))), np.zeros((1, 784)))

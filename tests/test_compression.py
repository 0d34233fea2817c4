"""Compression and the NumPy-only predictor: the file's codings against NumPy written here, the
structural removal against the pruned network it stands for, round trips (NumPy and MXNet give
the pruned mean network's labels), a process where MXNet cannot be imported, and the compress
and predict commands with their bad input."""
import json
import math
import os
import sys

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from commands import COMPRESS, PREDICT, PYTHON, assert_one_line_error, run
from gluon_bbb import Config, train
from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.shipping.writer import _stages, load_compressed, remove_units
from gluon_bbb.tutorial import net
from gluon_bbb.networks.layers import parse_network
from gluon_bbb.analysis.snr import keep_masks, prune_weights



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


@pytest.fixture(scope="module")
def small_run(tmp_path_factory, mnist):
    """A short run with a validation set, written as the training command writes it."""
    run_dir = str(tmp_path_factory.mktemp("compress") / "run")
    train(Config(train_size=5000, epochs=2, seed=0, num_hidden_units=100, validation=2000,
                 optimizer="adam", rho_offset=-5.0), mnist, mx.cpu(), out_dir=run_dir,
          log=lambda line: None)
    return run_dir


def pruned_labels(run_dir, proportion, images):
    from gluon_bbb import RunDirectory
    run_directory = RunDirectory(run_dir)
    config = run_directory.read_config()
    state = run_directory.load_parameters(config)
    sigmas = config.model_kind.prediction_sigmas(state["rhos"], state["parametrization"])
    pruned = prune_weights(state["mus"], sigmas, proportion)
    return net(nd.array(images), pruned, network=config.build_network()).asnumpy().argmax(1)


@pytest.mark.slow
def test_a_file_of_float32_means_predicts_the_pruned_mean_networks_labels(small_run, tmp_path,
                                                                          mnist):
    path = tmp_path / "model.gbbb"
    proc = run(COMPRESS, small_run, "--proportion", "0.9", "--precision", "0", "--out", path)
    assert proc.returncode == 0, proc.stderr
    images = mnist.test_images
    expected = pruned_labels(small_run, 0.9, images)
    model = compressed.read(str(path))
    assert np.array_equal(model.predict(images).argmax(1), expected)
    # the same file in MXNet
    network, mus, sigmas, header = load_compressed(str(path))
    assert sigmas is None and header["source"]["proportion"] == 0.9
    assert np.array_equal(net(nd.array(images), mus, network=network).asnumpy().argmax(1),
                          expected)
    # narrower than the run: whole units went, and the file is far smaller than the means
    shapes = model.network.param_shapes()
    assert shapes[0][0] + shapes[2][0] < 200, shapes
    assert os.path.getsize(path) < 4 * 784 * 100 / 5


@pytest.mark.slow
def test_quantized_means_and_sigmas_round_trip(small_run, tmp_path, mnist):
    path = tmp_path / "model.gbbb"
    proc = run(COMPRESS, small_run, "--proportion", "0.5", "--sigma-bits", "4", "--out", path)
    assert proc.returncode == 0, proc.stderr
    assert "times smaller than the float32 means" in proc.stdout
    model = compressed.read(str(path))
    header = model.header
    assert header["predictive_samples"] == 10 and header["unsure_entropy_bits"] > 0
    assert header["source"]["unsure_calibrated_on"] == "the run's 2000 validation images"
    from gluon_bbb import RunDirectory
    run_directory = RunDirectory(small_run)
    config = run_directory.read_config()
    network = config.build_network()
    state = run_directory.load_parameters(config)
    mus = [m.asnumpy() for m in state["mus"]]
    sigmas = [s.asnumpy() for s in config.model_kind.prediction_sigmas(state["rhos"],
                                                                        state["parametrization"])]
    # the narrowed network with its exact means and sigmas, as the file should approximate it
    keep = keep_masks(mus, sigmas, 0.5)
    stages = _stages(network, [m * k for m, k in zip(mus, keep)], sigmas)
    remove_units(stages)
    exact = [(a, sa) for s in stages for a, sa in ((s.W, s.sW), (s.b, s.sb))]
    for stored, sigma, tensor, (mu, posterior) in zip(model.mus, model.sigmas,
                                                      header["tensors"], exact):
        kept = mu != 0
        step = tensor["step"]
        # the step: the median sigma of the kept entries; every mean within half of it
        assert step == pytest.approx(float(np.median(posterior[kept].astype(np.float64))),
                                     rel=1e-6)
        q = stored[kept] / step
        np.testing.assert_allclose(q, np.round(q), atol=1e-3)
        assert np.all(np.abs(stored[kept] - mu[kept]) <= step / 2 + 1e-6)
        # log sigma in 4 bits: within half a level of the posterior's
        low, high = tensor["log_sigma_range"]
        assert np.all(np.abs(np.log(sigma[kept]) - np.log(posterior[kept]))
                      <= (high - low) / 30 + 1e-5)
        assert np.all(sigma[~kept] == 0)
    # a Monte Carlo predictive from the file, with its uncertainty, as good as its mean network
    # (0.88 both, after this short training)
    probs = model.predict(mnist.test_images[:500], num_samples=5)
    assert probs.shape == (500, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    accuracy = np.mean(probs.argmax(1) == mnist.test_labels[:500])
    point = np.mean(model.predict(mnist.test_images[:500]).argmax(1) == mnist.test_labels[:500])
    assert accuracy > 0.8 and abs(accuracy - point) < 0.03, (accuracy, point)


BLOCK_MXNET = ("import sys; sys.modules['mxnet'] = None; "
               "import runpy; sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], "
               "run_name='__main__', alter_sys=True)")


@pytest.mark.slow
def test_the_predictor_runs_where_mxnet_cannot_be_imported(small_run, tmp_path, mnist):
    path = tmp_path / "model.gbbb"
    assert run(COMPRESS, small_run, "--proportion", "0.5", "--sigma-bits", "3",
               "--out", path).returncode == 0
    pixels = np.round(mnist.test_images[:20] * 126).reshape(20, 28, 28)
    np.save(tmp_path / "digits.npy", pixels)
    proc = run([PYTHON, "-c", BLOCK_MXNET, "gluon_bbb.commands.predict"], path, tmp_path / "digits.npy",
               "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    labels = [p["label"] for p in report["predictions"]]
    assert report["samples"] == 10 and len(labels) == 20
    model = compressed.read(str(path))  # the same draws in this process
    assert labels == model.predict(model.inputs(pixels), 10).argmax(1).tolist()
    assert np.mean(np.array(labels) == mnist.test_labels[:20]) >= 0.8
    # the blocked import is real: MXNet is not importable in such a process
    proc = run([PYTHON, "-c", "import sys; sys.modules['mxnet'] = None; import gluon_bbb."
                "shipping.model_file as c; import mxnet"])
    assert proc.returncode == 1 and "import of mxnet halted" in proc.stderr


@pytest.mark.slow
def test_predict_reads_pngs_arrays_and_idx_files(small_run, tmp_path, mnist):
    from PIL import Image
    path = tmp_path / "model.gbbb"
    assert run(COMPRESS, small_run, "--proportion", "0.5", "--out", path).returncode == 0
    raw = np.round(mnist.test_images[:3] * 126).reshape(3, 28, 28).astype(np.uint8)
    Image.fromarray(raw[0]).save(tmp_path / "digit.png")
    Image.fromarray(255 - raw[1]).save(tmp_path / "ink.png")             # dark on light
    Image.fromarray(np.stack([raw[2]] * 3, axis=-1)).save(tmp_path / "grey-rgb.png")
    Image.fromarray(raw[0]).resize((56, 56)).save(tmp_path / "large.png")
    np.save(tmp_path / "one.npy", raw[0].reshape(784))
    proc = run(PREDICT, path, tmp_path / "digit.png", tmp_path / "grey-rgb.png",
               tmp_path / "one.npy")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and lines[0].split()[1] == lines[2].split()[1]
    assert " probability " in lines[0] and lines[0].split()[-1] in ("bits", "unsure")
    inverted = run(PREDICT, path, tmp_path / "ink.png", "--invert", "--json")
    direct = run(PREDICT, path, tmp_path / "one.npy", "--json")
    assert json.loads(inverted.stdout)["predictions"][0]["label"] == int(
        compressed.read(str(path)).predict(mnist.test_images[1:2]).argmax())
    assert json.loads(direct.stdout)["predictions"][0]["input"].endswith("one.npy")
    assert run(PREDICT, path, tmp_path / "large.png", "--resize").returncode == 0
    idx = os.path.join(os.environ["GLUON_BBB_DATA"], "t10k-images-idx3-ubyte.gz")
    proc = run(PREDICT, path, idx, "--json")
    labels = [p["label"] for p in json.loads(proc.stdout)["predictions"]]
    expected = compressed.read(str(path)).predict(mnist.test_images).argmax(1)
    assert labels == expected.tolist()


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


def test_bad_inputs_and_models_are_one_line(tmp_path):
    from PIL import Image
    path = synthetic_model(tmp_path / "model.gbbb", proportion=0.5, precision=1.0)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (28, 28, 3), dtype=np.uint8)).save(tmp_path / "c.png")
    Image.fromarray(rng.integers(0, 255, (40, 30), dtype=np.uint8)).save(tmp_path / "w.png")
    (tmp_path / "notes.txt").write_text("seven")
    (tmp_path / "fake.png").write_text("not a png")
    np.save(tmp_path / "big.npy", np.full((28, 28), 300.0))
    np.save(tmp_path / "shape.npy", np.zeros((5, 5)))
    damaged = tmp_path / "damaged.gbbb"
    damaged.write_bytes(path.read_bytes()[:-10] + b"0123456789")
    for model, inputs, expected in (
            (path, [tmp_path / "missing.png"], "missing.png: no such file"),
            (path, [tmp_path / "c.png"], "c.png: a colour image (RGB); give a grayscale PNG"),
            (path, [tmp_path / "w.png"], "w.png: is 30x40, the model takes 28x28 (--resize"),
            (path, [tmp_path / "notes.txt"], "notes.txt: not a PNG image, a .npy array or an "
                                             "IDX image file"),
            (path, [tmp_path / "fake.png"], "fake.png: not a readable PNG image"),
            (path, [tmp_path / "big.npy"], "pixel values: they must lie in [0, 255]"),
            (path, [tmp_path / "shape.npy"], "an array of shape (5, 5)"),
            (tmp_path / "notes.txt", [tmp_path / "c.png"], "is not a compressed gluon-bbb "
                                                            "model"),
            (damaged, [tmp_path / "c.png"], "is damaged: its checksum does not match"),
            (tmp_path / "nothing", [tmp_path / "c.png"], "no such model"),
            (path, [tmp_path / "c.png", "--samples", "3"], "--samples must be 0 for")):
        assert_one_line_error(run(PREDICT, model, *inputs), expected)


def test_compress_refuses_what_it_cannot_do(tmp_path):
    small_run = tmp_path / "run"  # its flags are checked before the run is read
    for args, expected in (
            (["--proportion", "1.5"], "--proportion must be in [0, 1], got 1.5"),
            (["--proportion", "1"], "--proportion must be below 1"),
            (["--precision", "-1"], "--precision must be a number from 0 (float32 means) to 1000"),
                (["--precision", "1e308"], "--precision must be a number from 0"),
            (["--sigma-bits", "9"], "--sigma-bits must be an integer in [0, 8]"),
            (["--proportion", "0.5", "--max-error-increase", "0.2"], "not allowed with")):
        assert_one_line_error(run(COMPRESS, small_run, *args, "--out", tmp_path / "m.gbbb"),
                              expected)
    assert_one_line_error(run(COMPRESS, tmp_path / "none", "--out", tmp_path / "m.gbbb"),
                          "does not exist")
    assert not (tmp_path / "m.gbbb").exists()


@pytest.mark.slow
def test_max_error_increase_chooses_the_largest_proportion_within_it(small_run, tmp_path):
    path = tmp_path / "model.gbbb"
    proc = run(COMPRESS, small_run, "--max-error-increase", "2", "--out", path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "choosing the proportion on the run's 2000 validation images:"
    assert lines[1].startswith("  the largest whose error is within 2 percentage points of the "
                               "unpruned mean network's ")
    unpruned = float(lines[1].rsplit(" ", 1)[1][:-1])
    searched = [line for line in lines if line.startswith("proportion ")]
    errors = {float(line.split()[1][:-1]): float(line.split()[3][:-1]) for line in searched}
    header = compressed.read(str(path)).header
    chosen = header["source"]["proportion"]
    within = [p for p, e in errors.items() if e <= unpruned + 2 + 1e-9]
    assert within and chosen == max(within) and max(errors) > chosen
    assert header["source"]["error"] * 100 == pytest.approx(errors[chosen], abs=0.006)
    assert header["source"]["unpruned_error"] * 100 == pytest.approx(unpruned, abs=0.006)
    assert "warning" not in proc.stdout


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

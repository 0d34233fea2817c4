"""What the package refuses rather than compute wrong: non-finite parameters (training stops,
every reader refuses them), an output that would write over a run or a command's inputs, models
and inputs that are not what they claim, and a model that is poor everywhere, which says so.
Each case ends on one line with status 2, through the commands as a user runs them."""
import json
import lzma
import os
import shutil
import struct
import tracemalloc
import zlib

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from commands import (COMPRESS, EVALUATE, PREDICT, PRUNE, PYTHON, TRAIN, assert_one_line_error,
                      run)
from test_model_file import synthetic_model
from gluon_bbb import Config, TrainingDiverged, train
from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.shipping.writer import compress_parameters
from gluon_bbb.networks.layers import parse_network
from gluon_bbb.learning.step import TrainingStep



def test_training_stops_when_a_parameter_turns_non_finite_with_a_finite_loss(
        tmp_path, mnist, monkeypatch):
    # the last update of the epoch overflows one mean: its loss was finite, the checkpoint
    # must not be written with it
    update = TrainingStep._update

    def overflowing(step, index, param, grad):
        update(step, index, param, grad)
        if index == 0 and step.num_update == 5:
            param[3] = np.inf
    monkeypatch.setattr(TrainingStep, "_update", overflowing)
    config = Config(train_size=640, epochs=1, seed=0, num_hidden_units=20)
    with pytest.raises(TrainingDiverged) as info:
        train(config, mnist, mx.cpu(), out_dir=str(tmp_path), log=lambda line: None)
    assert str(info.value).startswith(
        "mu:0 (1 of its 15680 entries) became non-finite (inf) at epoch 1, in batches 1 to 5, "
        "while the losses were finite; stopping.")
    assert not (tmp_path / "checkpoint.params").exists()


def png_header_only(path, width, height):
    """A PNG whose header declares ``width`` x ``height`` grayscale pixels and whose image data
    is a few bytes: what a reader must refuse by its header, before decoding."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height,
                                                                       8, 0, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))
    return path


def test_predict_takes_or_refuses_each_kind_of_odd_input(tmp_path):
    from PIL import Image
    model = synthetic_model(tmp_path / "model.gbbb")
    digit = np.random.default_rng(1).integers(0, 256, (28, 28), dtype=np.uint8)
    Image.fromarray(digit).save(tmp_path / "gray.png")
    Image.fromarray(np.stack([digit, np.full_like(digit, 255)], -1), "LA").save(
        tmp_path / "gray-alpha.png")
    Image.fromarray(np.stack([digit, np.full_like(digit, 100)], -1), "LA").save(
        tmp_path / "see-through.png")
    # a gray+alpha PNG with full alpha is the grayscale image
    gray, with_alpha = (run(PREDICT, model, tmp_path / name) for name in ("gray.png",
                                                                          "gray-alpha.png"))
    assert with_alpha.returncode == 0, with_alpha.stderr
    assert gray.stdout.split()[1:] == with_alpha.stdout.split()[1:]
    png_header_only(tmp_path / "huge.png", 15000, 15000)
    png_header_only(tmp_path / "large.png", 5000, 5000)
    (tmp_path / "empty-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, 0, 28, 28))
    (tmp_path / "folder").mkdir()
    np.save(tmp_path / "unit.npy", np.random.default_rng(2).uniform(size=(28, 28)))
    nan = np.zeros((28, 28))
    nan[3, 4] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    np.save(tmp_path / "binary.npy", (digit > 128).astype(np.int64))  # 0s and 1s
    Image.fromarray((digit > 128).astype(np.uint8)).save(tmp_path / "binary.png")
    for inputs, expected in (
            ([tmp_path / "see-through.png"], "has transparent pixels"),
            ([tmp_path / "huge.png"], "huge.png: too large to be a digit (over 89 million "
                                      "pixels by its header"),
            ([tmp_path / "large.png"], "large.png: is 5000x5000, the model takes 28x28"),
            ([tmp_path / "large.png", "--resize"], "large.png: is 5000x5000, too large to be a "
                                                   "digit (at most 16777216 pixels"),
            ([tmp_path / "empty-idx3-ubyte"], "an IDX file that holds no image"),
            ([tmp_path / "folder"], "folder: a directory; give the image files in it"),
            ([tmp_path / "unit.npy"], "as images scaled to [0, 1] do; the model takes MNIST's "
                                      "raw values 0 to 255 (multiply the array by 255)"),
            ([tmp_path / "nan.npy"], "nan.npy: pixel values: 1 of them are NaN or infinite"),
            ([tmp_path / "binary.npy"], "binary.npy: pixel values: they run from 0 to 1, as "
                                        "images scaled to [0, 1] do"),
            ([tmp_path / "binary.png"], "binary.png: pixel values: they run from 0 to 1")):
        assert_one_line_error(run(PREDICT, model, *inputs), expected)


def test_a_model_file_whose_header_is_not_as_written_is_refused(tmp_path):
    model = synthetic_model(tmp_path / "model.gbbb")
    header, body = compressed.unpack(model.read_bytes())
    blobs = [body]  # the arrays, back to back, as the header names them

    def variant(name, change):
        edited = change(dict(header))
        path = tmp_path / name
        path.write_bytes(compressed.pack(edited, blobs))  # its checksum is valid
        return path
    cases = (
        (variant("no-threshold.gbbb", lambda h: {k: v for k, v in h.items()
                                                 if k != "unsure_entropy_bits"}),
         "'unsure_entropy_bits' is missing or not a number"),
        (variant("list.gbbb", lambda h: list(h)), "holds no compressed model"),
        (variant("classes.gbbb", lambda h: dict(h, classes="ten")),
         "'classes' is missing or not a int"),
        (variant("scale.gbbb", lambda h: dict(h, input=dict(h["input"], pixel_scale=0))),
         "'pixel_scale' is not a positive number"),
        (variant("tensor.gbbb", lambda h: dict(h, tensors=[dict(t, value_dtype="object")
                                                           for t in h["tensors"]])),
         "'value_dtype' is not as written"),
        # a header believed only as far as it is checked: no 182 TiB of means for a network
        # it says is that large, no classifier's prediction for a regression's likelihood
        (variant("huge.gbbb", lambda h: dict(h, input=dict(h["input"], features=10 ** 12))),
         "more than this reader takes (268435456)"),
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


def test_a_model_poor_everywhere_flags_its_predictions_unsure(tmp_path):
    # near-uniform predictions: the entropy threshold, calibrated on the model's own poor
    # entropies, passes them; the probability floor does not
    flat = [np.zeros((20, 784), np.float32), np.zeros(20, np.float32),
            np.random.default_rng(0).normal(0, 1e-3, (10, 20)).astype(np.float32),
            np.zeros(10, np.float32)]
    model = synthetic_model(tmp_path / "flat.gbbb", flat, unsure_entropy_bits=10.0)
    np.save(tmp_path / "digits.npy", np.random.default_rng(1).integers(0, 256, (30, 28, 28)))
    proc = run(PREDICT, model, tmp_path / "digits.npy")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 30 and all(line.endswith("unsure") for line in lines)
    # entropies 0.881, 0.971, 0.993 and 0.081 bits
    probs = np.array([[0.3, 0.7], [0.6, 0.4], [0.45, 0.55], [0.99, 0.01]])
    np.testing.assert_array_equal(compressed.unsure(probs, 0.98), [False, False, True, False])
    np.testing.assert_array_equal(compressed.unsure(probs, 0.9), [False, True, True, False])
    np.testing.assert_array_equal(compressed.unsure(probs, None), [False] * 4)
    np.testing.assert_array_equal(compressed.unsure(probs, None, 0.65),
                                  [False, True, True, False])
    np.testing.assert_array_equal(compressed.unsure(np.array([[0.4, 0.3, 0.3]]), 2.0), [True])


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, mnist):
    """README's quick start in small: no validation images."""
    run_dir = str(tmp_path_factory.mktemp("refusals") / "run")
    train(Config(train_size=2000, epochs=2, seed=0, num_hidden_units=50), mnist, mx.cpu(),
          out_dir=run_dir, log=lambda line: None)
    return run_dir


@pytest.mark.slow
def test_no_command_writes_over_the_run_it_reads_or_its_inputs(quick_run, tmp_path):
    checkpoint = os.path.join(quick_run, "checkpoint.params")
    before = {name: open(os.path.join(quick_run, name), "rb").read()
              for name in ("checkpoint.params", "config.json", "history.json")}
    os.symlink(checkpoint, tmp_path / "link.params")
    data = tmp_path / "mnist"
    shutil.copytree(os.environ["GLUON_BBB_DATA"], data)
    for out, extra, expected in (
            (checkpoint, [], "run/checkpoint.params, which this command reads"),
            (os.path.join(quick_run, "config.json"), [], "which this command reads"),
            (os.path.join(quick_run, "..", "run", "history.json"), [], "history.json, which"),
            (tmp_path / "link.params", [], "link.params is %s, which this command reads"
             % checkpoint),
            # a file of another kind is never replaced, whoever reads it
            (data / "t10k-images-idx3-ubyte.gz", ["--data-dir", data],
             "t10k-images-idx3-ubyte.gz holds something other than a compressed model")):
        proc = run(COMPRESS, quick_run, "--proportion", "0.5", "--out", out, *extra)
        assert_one_line_error(proc, "--out %s " % out)
        assert expected in proc.stderr
    for name, content in before.items():
        assert open(os.path.join(quick_run, name), "rb").read() == content
    assert_one_line_error(run(COMPRESS, quick_run, "--precision", "1e-30", "--out",
                              tmp_path / "m.gbbb"), "--precision must be at least")


@pytest.mark.slow
def test_compress_without_flags_chooses_on_training_images_and_says_so(quick_run, tmp_path):
    path = tmp_path / "model.gbbb"
    proc = run(COMPRESS, quick_run, "--out", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        "choosing the proportion on 2000 of its training images (it holds out no validation "
        "images):\n  the largest whose error is within 0.25 percentage points")
    source = compressed.read(str(path)).header["source"]
    assert source["error"] <= source["unpruned_error"] + 0.0025
    assert "warning" not in proc.stdout
    # an explicit proportion that costs more is written, with a warning naming the figure
    proc = run(COMPRESS, quick_run, "--proportion", "0.995", "--out", tmp_path / "worse.gbbb")
    assert proc.returncode == 0, proc.stderr
    warning = proc.stdout.splitlines()[-2:]
    assert warning[0].startswith("warning: --proportion 0.995 costs ") and warning[0].endswith(
        " percentage points on 2000 of its training images (it holds out no validation "
        "images),")
    assert warning[1] == "  more than the 0.25 a compress without --proportion allows"
    # where the quantized means alone cost more than the allowance, no proportion is within it
    proc = run(COMPRESS, quick_run, "--max-error-increase", "0", "--precision", "4", "--out",
               tmp_path / "coarse.gbbb")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2].startswith(
        "warning: no proportion is within it: with nothing pruned, --precision 4 costs ")
    assert compressed.read(str(tmp_path / "coarse.gbbb")).header["source"]["proportion"] == 0


@pytest.mark.slow
def test_every_command_refuses_a_run_with_non_finite_parameters(quick_run, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(quick_run, broken)
    arrays = nd.load(str(broken / "checkpoint.params"))
    arrays["mu:1"][3] = np.nan
    del arrays["checksum"]  # written so, by hand or by another program
    nd.save(str(broken / "checkpoint.params"), arrays)
    expected = "holds non-finite parameters: 1 of the 50 entries of mu:1 are NaN or infinite"
    digit = tmp_path / "digit.npy"
    np.save(digit, np.zeros((28, 28)))
    # each command that reads one run takes it as RUN or as --checkpoint RUN
    for cmd, args in ((PRUNE, ["--checkpoint", broken]),
                      (EVALUATE, [broken]),
                      (COMPRESS, ["--checkpoint", broken, "--proportion", "0.5", "--out",
                                  tmp_path / "m.gbbb"]),
                      (PREDICT, [broken, digit]),
                      (TRAIN, ["--resume", "--out", broken, "--epochs", "3"])):
        assert_one_line_error(run(cmd, *args), expected)
    assert not (tmp_path / "m.gbbb").exists()
    # and a compressed model is not a run
    model = synthetic_model(tmp_path / "model.gbbb")
    for cmd, args in ((PRUNE, [model]), (EVALUATE, ["--checkpoint", model])):
        assert_one_line_error(run(cmd, *args),
                              "model.gbbb is a compressed model, not a run: classify images "
                              "with it with gluon-bbb predict")


@pytest.mark.parametrize("command", ["prune", "evaluate", "compress"])
def test_a_command_that_reads_one_run_takes_it_once_in_either_form(command, capsys):
    import importlib
    build_parser = importlib.import_module("gluon_bbb.commands." + command).build_parser
    for argv in (["runs/a"], ["--checkpoint", "runs/a"]):
        args = build_parser().parse_args(argv + ["--out", "elsewhere"])
        assert args.run == "runs/a" and not hasattr(args, "run_flag")
    for argv, expected in (([], "required: RUN (or --checkpoint RUN)"),
                           (["runs/a", "--checkpoint", "runs/b"], "RUN and --checkpoint both")):
        with pytest.raises(SystemExit) as exit_info:
            build_parser().parse_args(argv + ["--out", "elsewhere"])
        assert exit_info.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], lines


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


def test_a_backend_that_cannot_serve_the_run_is_refused_before_its_directory_is_made(
        tmp_path, native_kernels):
    out = tmp_path / "run"
    proc = run(TRAIN, "--parametrization", "log-variance", "--backend", "native", "--out", out)
    assert_one_line_error(proc, "--backend must be ndarray here: the C kernels serve no "
                                "estimator sample with the reverse mc KL, prior gaussian and "
                                "parametrization log_variance (native.table.SERVED)")
    assert not out.exists()

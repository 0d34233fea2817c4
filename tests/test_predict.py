"""commands/predict.py: PNGs, arrays and IDX files read, a large stack predicted in parts, with
progress, to the same figures as at once; bad, odd and special inputs and models one line each;
a model poor everywhere says so."""
import json
import os
import stat
import struct
import zlib

import numpy as np

from commands import COMPRESS, PREDICT, assert_one_line_error, run
from gluon_bbb.shipping import model_file as compressed

from test_model_file import synthetic_model
from gluon_bbb.analysis.robustness import load_model
from gluon_bbb.commands.predict import probabilities_with_progress


def test_a_stack_predicted_in_parts_gives_the_figures_of_the_whole(tmp_path, capsys):
    # parts a whole number of the predictor's batches of 100, as PROGRESS_IMAGES is
    path = str(synthetic_model(tmp_path / "m.gbbb", sigma_bits=4))
    pixels = np.random.default_rng(0).integers(0, 256, (250, 28, 28)).astype(np.float32)
    for samples in (0, 3):
        model, run = load_model(path, samples, "samples")
        assert run is None and model.num_samples == samples
        whole = model.probabilities(model.inputs(pixels))
        parts = probabilities_with_progress(model, pixels, part=100)
        np.testing.assert_array_equal(parts, whole)
    assert capsys.readouterr().err.splitlines()[-1].startswith("predict: 250 of 250 images, ")


def test_predict_reads_pngs_arrays_and_idx_files(runs, tmp_path, mnist):
    from PIL import Image
    path = tmp_path / "model.gbbb"
    assert run(COMPRESS, runs["mlp"], "--proportion", "0.5", "--out", path).returncode == 0
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
    idx = os.path.join(os.environ["GLUON_BBB_DATA"], "t10k-images-idx3-ubyte")
    proc = run(PREDICT, path, idx, "--json")
    labels = [p["label"] for p in json.loads(proc.stdout)["predictions"]]
    expected = compressed.read(str(path)).predict(mnist.test_images).argmax(1)
    assert labels == expected.tolist()


def test_bad_inputs_and_models_are_one_line(tmp_path):
    from PIL import Image
    path = synthetic_model(tmp_path / "model.gbbb", proportion=0.5, precision=1.0)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (28, 28, 3), dtype=np.uint8)).save(tmp_path / "c.png")
    Image.fromarray(rng.integers(0, 255, (40, 30), dtype=np.uint8)).save(tmp_path / "w.png")
    (tmp_path / "notes.txt").write_text("seven")
    (tmp_path / "text.npy").write_text("not an array")
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
            (path, [tmp_path / "text.npy"], "text.npy: not a .npy array file (it does not begin "
                                            "as NumPy's do)"),
            (tmp_path / "notes.txt", [tmp_path / "c.png"], "is not a compressed gluon-bbb "
                                                            "model"),
            (damaged, [tmp_path / "c.png"], "is damaged: its checksum does not match"),
            (tmp_path / "nothing", [tmp_path / "c.png"], "no such model (a file gluon-bbb "
                                                          "compress wrote, or a run directory)"),
            (path, [tmp_path / "c.png", "--samples", "3"],
             "--samples must be 0 for %s (it keeps no sigmas to sample), got 3" % path)):
        assert_one_line_error(run(PREDICT, model, *inputs), expected)


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
    os.mkfifo(tmp_path / "digit.png")
    os.mknod(tmp_path / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    (tmp_path / "zero.png").symlink_to(tmp_path / "zero")
    for arguments, expected in (
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
            ([tmp_path / "binary.png"], "binary.png: pixel values: they run from 0 to 1"),
            ([tmp_path / "digit.png"], "digit.png: a FIFO, not an image file"),
            ([tmp_path / "zero.png"], "zero.png: a link to a character device, not an image "
                                      "file")):
        assert_one_line_error(run(PREDICT, model, *arguments), expected)
    assert_one_line_error(run(PREDICT, tmp_path / "digit.png", tmp_path / "zero.png"),
                          "digit.png: a FIFO, not a model")


def test_a_model_poor_everywhere_flags_its_predictions_unsure(tmp_path):
    # near-uniform predictions: the entropy threshold, calibrated on the model's own poor
    # entropies, passes them; the probability floor does not
    flat = [np.zeros((20, 784), np.float32), np.zeros(20, np.float32),
            np.random.default_rng(0).normal(0, 1e-3, (10, 20)).astype(np.float32),
            np.zeros(10, np.float32)]
    model = synthetic_model(tmp_path / "flat.gbbb", flat, unsure_entropy_bits=np.log2(10))
    np.save(tmp_path / "digits.npy", np.random.default_rng(1).integers(0, 256, (30, 28, 28)))
    proc = run(PREDICT, model, tmp_path / "digits.npy")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 30 and all(line.endswith("unsure") for line in lines)

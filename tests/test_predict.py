"""commands/predict.py: PNGs, arrays and IDX files read, a large stack predicted in parts, with
progress, to the same figures as at once; bad inputs and models one line each (more odd inputs:
test_refusals.py)."""
import json
import os

import numpy as np
import pytest

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
            (tmp_path / "nothing", [tmp_path / "c.png"], "no such model (a file gluon-bbb "
                                                          "compress wrote, or a run directory)"),
            (path, [tmp_path / "c.png", "--samples", "3"],
             "--samples must be 0 for %s (it keeps no sigmas to sample), got 3" % path)):
        assert_one_line_error(run(PREDICT, model, *inputs), expected)

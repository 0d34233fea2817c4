"""commands/compress.py: round trips (NumPy and MXNet give the pruned mean network's labels),
quantized means and sigmas, a process where MXNet cannot be imported, the largest proportion
within --max-error-increase on validation or training images, and what compress refuses."""
import json
import os
import shutil

import numpy as np
import pytest
from mxnet import nd

from commands import COMPRESS, PYTHON, assert_one_line_error, run
from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.shipping.writer import _stages, load_compressed, remove_units
from gluon_bbb.tutorial import net
from gluon_bbb.analysis.snr import keep_masks, prune_weights


def run_state(run_dir):
    """(config, mus, sigmas) of a run, as its readers predict with it."""
    from gluon_bbb import RunDirectory
    run_directory = RunDirectory(str(run_dir))
    config = run_directory.read_config()
    state = run_directory.load_predictive(config)
    return config, state["mus"], state["sigmas"]


def test_a_file_of_float32_means_predicts_the_pruned_mean_networks_labels(runs, tmp_path,
                                                                          mnist):
    path = tmp_path / "model.gbbb"
    proc = run(COMPRESS, runs["mlp"], "--proportion", "0.9", "--precision", "0", "--out", path)
    assert proc.returncode == 0, proc.stderr
    images = mnist.test_images[:2000]
    config, mus, sigmas = run_state(runs["mlp"])
    expected = net(nd.array(images), prune_weights(mus, sigmas, 0.9),
                   network=config.build_network()).asnumpy().argmax(1)
    model = compressed.read(str(path))
    assert np.array_equal(model.predict(images).argmax(1), expected)
    # the same file in MXNet
    network, file_mus, file_sigmas, header = load_compressed(str(path))
    assert file_sigmas is None and header["source"]["proportion"] == 0.9
    assert np.array_equal(net(nd.array(images), file_mus, network=network).asnumpy().argmax(1),
                          expected)
    # narrower than the run: whole units went, and the file is far smaller than the means
    shapes = model.network.param_shapes()
    assert shapes[0][0] + shapes[2][0] < 100, shapes
    assert os.path.getsize(path) < 4 * 784 * 50 / 5


def test_quantized_means_and_sigmas_round_trip(runs, tmp_path, mnist):
    path = tmp_path / "model.gbbb"
    proc = run(COMPRESS, runs["mlp"], "--proportion", "0.5", "--sigma-bits", "4", "--out", path)
    assert proc.returncode == 0, proc.stderr
    assert "times smaller than the float32 means" in proc.stdout
    model = compressed.read(str(path))
    header = model.header
    assert header["predictive_samples"] == 10 and header["unsure_entropy_bits"] > 0
    assert header["source"]["unsure_calibrated_on"] == "the run's 1000 validation images"
    config, mus, sigmas = run_state(runs["mlp"])
    mus, sigmas = [m.asnumpy() for m in mus], [s.asnumpy() for s in sigmas]
    # the narrowed network with its exact means and sigmas, as the file should approximate it
    keep = keep_masks(mus, sigmas, 0.5)
    stages = _stages(config.build_network(), [m * k for m, k in zip(mus, keep)], sigmas)
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
    # (0.85 and 0.84, measured)
    probs = model.predict(mnist.test_images[:500], num_samples=5)
    assert probs.shape == (500, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    accuracy = np.mean(probs.argmax(1) == mnist.test_labels[:500])
    point = np.mean(model.predict(mnist.test_images[:500]).argmax(1) == mnist.test_labels[:500])
    assert accuracy > 0.75 and abs(accuracy - point) < 0.04, (accuracy, point)
    # the predictor where MXNet cannot be imported: the same draws in a process without it
    pixels = np.round(mnist.test_images[:20] * 126).reshape(20, 28, 28)
    np.save(tmp_path / "digits.npy", pixels)
    block_mxnet = ("import sys; sys.modules['mxnet'] = None; import runpy; "
                   "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', "
                   "alter_sys=True)")
    proc = run([PYTHON, "-c", block_mxnet, "gluon_bbb.commands.predict"], path,
               tmp_path / "digits.npy", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["samples"] == 10
    assert [p["label"] for p in report["predictions"]] == model.predict(
        model.inputs(pixels), 10).argmax(1).tolist()
    proc = run([PYTHON, "-c", "import sys; sys.modules['mxnet'] = None; import gluon_bbb."
                "shipping.model_file as c; import mxnet"])
    assert proc.returncode == 1 and "import of mxnet halted" in proc.stderr


def test_compress_refuses_what_it_cannot_do(tmp_path, runs):
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
    os.mkfifo(tmp_path / "fifo")
    assert_one_line_error(run(COMPRESS, tmp_path / "fifo", "--out", tmp_path / "m.gbbb"),
                          "fifo is a FIFO, not a run directory")
    assert_one_line_error(run(COMPRESS, runs["small"], "--precision", "1e-30", "--out",
                              tmp_path / "m.gbbb"), "--precision must be at least")
    assert not (tmp_path / "m.gbbb").exists()


def test_no_compress_writes_over_the_run_it_reads_or_its_inputs(runs, tmp_path):
    run_dir = runs["small"]
    checkpoint = os.path.join(run_dir, "checkpoint.params")
    before = {name: (run_dir / name).read_bytes() for name in ("checkpoint.params",
                                                                "config.json", "history.json")}
    os.symlink(checkpoint, tmp_path / "link.params")
    data = tmp_path / "mnist"
    shutil.copytree(os.environ["GLUON_BBB_DATA"], data)
    for out, extra, expected in (
            (checkpoint, [], "small/checkpoint.params, which this command reads"),
            (os.path.join(run_dir, "config.json"), [], "which this command reads"),
            (os.path.join(run_dir, "..", "small", "history.json"), [], "history.json, which"),
            (tmp_path / "link.params", [], "link.params is %s, which this command reads"
             % checkpoint),
            # a file of another kind is never replaced, whoever reads it
            (data / "t10k-images-idx3-ubyte", ["--data-dir", data],
             "t10k-images-idx3-ubyte holds something other than a compressed model")):
        proc = run(COMPRESS, run_dir, "--proportion", "0.5", "--out", out, *extra)
        assert_one_line_error(proc, "--out %s " % out)
        assert expected in proc.stderr
    for name, content in before.items():
        assert (run_dir / name).read_bytes() == content


def test_max_error_increase_chooses_the_largest_proportion_within_it(runs, tmp_path):
    path = tmp_path / "model.gbbb"
    proc = run(COMPRESS, runs["mlp"], "--max-error-increase", "2", "--out", path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "choosing the proportion on the run's 1000 validation images:"
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


def test_without_validation_images_compress_chooses_on_training_images_and_says_so(runs,
                                                                                   tmp_path):
    run_dir = runs["small"]
    path = tmp_path / "model.gbbb"
    proc = run(COMPRESS, run_dir, "--out", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        "choosing the proportion on 256 of its training images (it holds out no validation "
        "images):\n  the largest whose error is within 0.25 percentage points")
    source = compressed.read(str(path)).header["source"]
    assert source["error"] <= source["unpruned_error"] + 0.0025
    assert "warning" not in proc.stdout
    # an explicit proportion that costs more is written, with a warning naming the figure
    proc = run(COMPRESS, run_dir, "--proportion", "0.995", "--out", tmp_path / "worse.gbbb")
    assert proc.returncode == 0, proc.stderr
    warning = proc.stdout.splitlines()[-2:]
    assert warning[0].startswith("warning: --proportion 0.995 costs ") and warning[0].endswith(
        " percentage points on 256 of its training images (it holds out no validation "
        "images),")
    assert warning[1] == "  more than the 0.25 a compress without --proportion allows"
    # where the quantized means alone cost more than the allowance, no proportion is within it
    proc = run(COMPRESS, run_dir, "--max-error-increase", "0", "--precision", "4", "--out",
               tmp_path / "coarse.gbbb")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2].startswith(
        "warning: no proportion is within it: with nothing pruned, --precision 4 costs ")
    assert compressed.read(str(tmp_path / "coarse.gbbb")).header["source"]["proportion"] == 0

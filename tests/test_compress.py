"""commands/compress.py: round trips (NumPy and MXNet give the pruned mean network's labels),
quantized means and sigmas, a process where MXNet cannot be imported, the largest proportion
within --max-error-increase, and what compress refuses."""
import json
import os

import numpy as np
import pytest
from mxnet import nd

from commands import COMPRESS, PYTHON, assert_one_line_error, run
from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.shipping.writer import _stages, load_compressed, remove_units
from gluon_bbb.tutorial import net
from gluon_bbb.analysis.snr import keep_masks, prune_weights


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



"""analysis/report.py: the uncertainty report of a deterministic baseline and a Bayes by
Backprop run, on MNIST, noise and another dataset's images, and what it refuses."""
import json

import mxnet as mx
import numpy as np
import pytest

from gluon_bbb import Config, train

from commands import EVALUATE, TRAIN, run
from test_uncertainty import write_idx_images


@pytest.mark.slow
def test_mlp_baseline_and_uncertainty_report(tmp_path, mnist):
    config = Config(train_size=2000, epochs=1, seed=0, model="mlp", num_hidden_units=100)
    result = train(config, mnist, mx.cpu(), out_dir=str(tmp_path / "mlp"), log=lambda l: None)
    assert result.history[-1]["test_accuracy"] >= 0.6  # 0.73 measured: 16 SGD steps
    np.testing.assert_array_equal(result.rhos[0].asnumpy(), -3.0)  # rho is not trained
    bbb = tmp_path / "bbb"
    proc = run(TRAIN, "--out", bbb, "--train-size", "2000", "--epochs", "1", "--seed", "0",
               "--num-hidden-units", "100", "--test-samples", "3")
    assert proc.returncode == 0, proc.stderr
    assert "uncertainty (3 weight samples): test accuracy" in proc.stdout
    ood_dir = tmp_path / "ood"
    ood_dir.mkdir()
    write_idx_images(str(ood_dir / "t10k-images-idx3-ubyte.gz"),
                     np.random.default_rng(0).integers(0, 256, size=(50, 28, 28)))
    # a deterministic network has no weights to sample: asking for samples is refused
    proc = run(EVALUATE, "--checkpoint", tmp_path / "mlp", "--test-samples", "3")
    assert proc.returncode == 2 and proc.stderr == (
        "gluon-bbb evaluate: error: --test-samples must be 0 for a deterministic "
        "network (model deterministic has no weight distribution to sample), got 3\n")
    for run_dir, samples in ((tmp_path / "mlp", []), (bbb, ["--test-samples", "3"])):
        proc = run(EVALUATE, "--checkpoint", run_dir, "--ood-data-dir", ood_dir, *samples,
                   "--json")
        assert proc.returncode == 0, proc.stderr
        # stdout is the report's JSON alone; what was written is said on stderr
        assert json.loads(proc.stdout)["model"] == ("deterministic" if not samples else "bbb")
        assert proc.stderr == "wrote %s, %s\n" % (run_dir / "uncertainty.json",
                                                  run_dir / "uncertainty.png")
        with open(run_dir / "uncertainty.json") as f:
            report = json.load(f)
        assert report["test_samples"] == (3 if samples else 0)
        assert report["ood_data_dir"] == str(ood_dir) and report["epoch"] == 1
        assert report["checkpoint"] == str(run_dir / "checkpoint.params")
        assert set(report["in_distribution"]) >= {"accuracy", "nll", "ece", "mean_entropy"}
        # random-pixel images are told from digits by their entropy better than by chance:
        # 0.611 (deterministic) and 0.615 (Bayes by Backprop, 3 draws) measured after one epoch
        assert report["ood"]["auroc"] > 0.55 and report["noise"]["mean_entropy"] > 0
        assert 0.4 < report["in_distribution"]["accuracy"] <= 1  # 0.58 and 0.73 measured
        assert (run_dir / "uncertainty.png").read_bytes()[:4] == b"\x89PNG"

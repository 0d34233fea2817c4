"""commands/evaluate.py: the report on a run, a deterministic one, the best validation epoch and
another dataset's images; what it refuses (the report's figures: test_report.py)."""
import gzip
import json
import os
import struct

import numpy as np
import pytest

from commands import EVALUATE, TRAIN, assert_one_line_error, run
from conftest import SMALL
from test_uncertainty import write_idx_images


def test_evaluate_writes_the_report_of_a_run_or_of_its_best_epoch(runs, tmp_path):
    ood_dir = tmp_path / "ood"
    ood_dir.mkdir()
    write_idx_images(str(ood_dir / "t10k-images-idx3-ubyte.gz"),
                     np.random.default_rng(0).integers(0, 256, size=(50, 28, 28)))
    # a deterministic network has no weights to sample: asking for samples is refused
    deterministic, bbb = runs.copy("deterministic", tmp_path), runs.copy("mlp", tmp_path)
    proc = run(EVALUATE, "--checkpoint", deterministic, "--test-samples", "3")
    assert proc.returncode == 2 and proc.stderr == (
        "gluon-bbb evaluate: error: --test-samples must be 0 for a deterministic "
        "network (model deterministic has no weight distribution to sample), got 3\n")
    for run_dir, samples in ((deterministic, []), (bbb, ["--test-samples", "3"])):
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
        assert report["ood_data_dir"] == str(ood_dir)
        assert report["checkpoint"] == str(run_dir / "checkpoint.params")
        assert set(report["in_distribution"]) >= {"accuracy", "nll", "ece", "mean_entropy"}
        assert report["noise"]["mean_entropy"] > 0
        if samples:  # random pixels told from digits by their entropy: 0.78 measured
            assert report["ood"]["auroc"] > 0.6
        assert (run_dir / "uncertainty.png").read_bytes()[:4] == b"\x89PNG"
    # the best validation epoch's report, beside the last one's
    overshooting = runs["overshooting"]
    proc = run(EVALUATE, "--checkpoint", os.path.join(overshooting, "best.params"),
               "--test-samples", "2", "--out", tmp_path / "best")
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "best" / "best-uncertainty.json") as f:
        report = json.load(f)
    with open(overshooting / "history.json") as f:
        history = json.load(f)
    best = max(history, key=lambda record: record["validation_accuracy"])
    assert report["in_distribution"]["mean_weights_accuracy"] == pytest.approx(
        best["test_accuracy"], abs=1e-6)
    assert (tmp_path / "best" / "best-uncertainty.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluate_errors(runs, tmp_path):
    assert_one_line_error(run(EVALUATE, "--checkpoint", tmp_path / "none"), "does not exist")
    # another dataset's images of another size are refused as they are read, by training too
    ood = tmp_path / "ood"
    ood.mkdir()
    with gzip.open(str(ood / "t10k-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, 5, 32, 32) + bytes(5 * 32 * 32))
    expected = "%s: images are 32x32, the network takes 28x28" % (
        ood / "t10k-images-idx3-ubyte.gz")
    assert_one_line_error(run(EVALUATE, "--checkpoint", runs["small"], "--ood-data-dir", ood),
                          expected)
    proc = run(TRAIN, "--out", tmp_path / "new", "--epochs", "1", "--ood-data-dir", ood, *SMALL)
    assert_one_line_error(proc, expected)
    assert not (tmp_path / "new").exists()

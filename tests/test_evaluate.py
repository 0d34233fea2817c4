"""commands/evaluate.py: the report on the best validation epoch, and evaluate's errors."""
import json
import os

import pytest


from commands import EVALUATE, run


@pytest.mark.slow
def test_evaluate_on_the_best_validation_epoch(overshooting_run, tmp_path):
    run_dir, history = overshooting_run
    proc = run(EVALUATE, "--checkpoint", os.path.join(run_dir, "best.params"),
               "--test-samples", "2", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "best-uncertainty.json") as f:
        report = json.load(f)
    best = max(history, key=lambda record: record["validation_accuracy"])
    assert report["in_distribution"]["mean_weights_accuracy"] == pytest.approx(
        best["test_accuracy"], abs=1e-6)
    assert (tmp_path / "best-uncertainty.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluate_errors(tmp_path):
    proc = run(EVALUATE, "--checkpoint", tmp_path / "none")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr

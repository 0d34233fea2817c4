"""commands/prune.py: the pruning table of a run, its best epoch and a deterministic run, and
what it refuses (SNR pruning against NumPy: test_snr.py)."""
import json
import os
import shutil

import pytest
from mxnet import nd

from gluon_bbb.analysis.snr import load_pruned

from commands import PRUNE, assert_one_line_error, run


def test_prune_command_on_a_training_run(runs, tmp_path):
    out = tmp_path / "pruned"
    run_dir = str(runs["mlp"])
    proc = run(PRUNE, run_dir, "--out", out, "--ctx", "cpu:1", "--proportions", "0", "0.5",
               "0.95", "--save-pruned", "0.95")
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 4 and table[1].startswith("| 0% |") and table[3].startswith("| 95% |")
    with open(out / "pruning.json") as f:
        report = json.load(f)
    rows = report["rows"]
    assert report["epoch"] == 2 and report["criterion"] == "snr"
    assert report["checkpoint"] == os.path.join(run_dir, "checkpoint.params")
    assert [r["proportion"] for r in rows] == [0.0, 0.5, 0.95]
    total = 784 * 50 + 50 + 50 * 50 + 50 + 50 * 10 + 10
    assert rows[0]["weights_remaining"] == total
    assert rows[2]["weights_remaining"] == total - int(0.95 * total)
    with open(os.path.join(run_dir, "history.json")) as f:
        assert rows[0]["test_accuracy"] == pytest.approx(json.load(f)[-1]["test_accuracy"])
    for png in ("pruning.png", "snr.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "pruned at 0.95" in proc.stdout
    assert sum(int((m.asnumpy() != 0).sum()) for m in load_pruned(str(out / "pruned-0.95.params"))) \
        <= rows[2]["weights_remaining"]


def test_prune_command_on_the_best_validation_epoch_and_a_deterministic_run(runs, tmp_path):
    out = runs.copy("overshooting", tmp_path)
    proc = run(PRUNE, "--checkpoint", str(out / "best.params"), "--proportions", "0", "0.5")
    assert proc.returncode == 0, proc.stderr
    with open(out / "best-pruning.json") as f:
        rows = json.load(f)["rows"]
    with open(out / "history.json") as f:
        history = json.load(f)
    best = max(history, key=lambda record: record["validation_accuracy"])
    assert rows[0]["test_accuracy"] == pytest.approx(best["test_accuracy"], abs=1e-6)
    assert rows[0]["test_accuracy"] != pytest.approx(history[-1]["test_accuracy"], abs=1e-6)
    assert (out / "best-snr.png").is_file() and not (out / "pruning.json").exists()
    assert "wrote best-pruning.json, best-pruning.png, best-snr.png" in proc.stdout
    deterministic = runs.copy("deterministic", tmp_path)
    proc = run(PRUNE, "--checkpoint", deterministic, "--proportions", "0", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert "| removed by magnitude |" in proc.stdout
    with open(deterministic / "pruning.json") as f:
        report = json.load(f)
    assert report["criterion"] == "magnitude" and report["model"] == "deterministic"


def test_prune_command_errors(runs, tmp_path):
    short_run = str(runs["small"])
    cases = [
        (["--checkpoint", short_run, "--proportions", "0.5", "1.5"],
         "--proportions must be in [0, 1], got 1.5"),
        (["--checkpoint", short_run, "--save-pruned", "2"],
         "prune.py: error: --save-pruned must be in [0, 1], got 2.0"),
        (["--checkpoint", str(tmp_path / "missing")], "does not exist"),
    ]
    garbage = tmp_path / "garbage"
    shutil.copytree(short_run, garbage)
    (garbage / "checkpoint.params").write_bytes(b"not a checkpoint")
    cases.append((["--checkpoint", str(garbage)],
                  "is not a parameter file: it does not begin as MXNet's nd.save files do"))
    truncated = tmp_path / "truncated"
    shutil.copytree(short_run, truncated)
    whole = (truncated / "checkpoint.params").read_bytes()
    (truncated / "checkpoint.params").write_bytes(whole[:len(whole) // 2])
    cases.append((["--checkpoint", str(truncated)], "is damaged or cut short: MXNet cannot "
                                                    "read its arrays ("))
    # one byte changed among the arrays' values, and one in the file's first lengths
    for name, position, words in (("flipped", len(whole) - 4000,
                                   "is damaged: its arrays do not match the checksum"),
                                  ("flipped-length", 40, "is damaged or cut short")):
        flipped = tmp_path / name
        shutil.copytree(short_run, flipped)
        damaged = bytearray(whole)
        damaged[position] ^= 0xFF
        (flipped / "checkpoint.params").write_bytes(bytes(damaged))
        cases.append((["--checkpoint", str(flipped)], words))
    # parameters written by hand with nd.save, without the optimizer's step count
    partial = tmp_path / "partial"
    shutil.copytree(short_run, partial)
    arrays = {key: array for key, array in nd.load(str(partial / "checkpoint.params")).items()
              if key != "num_update"}
    nd.save(str(partial / "checkpoint.params"), arrays)
    cases.append((["--checkpoint", str(partial)], "lacks 'num_update'"))
    mismatch = tmp_path / "mismatch"
    shutil.copytree(short_run, mismatch)
    with open(mismatch / "config.json") as f:
        config = json.load(f)
    config["num_hidden_units"] = 64
    with open(mismatch / "config.json", "w") as f:
        json.dump(config, f)
    cases.append((["--checkpoint", str(mismatch)], "holds parameters of shapes"))
    for args, expected in cases:
        assert_one_line_error(run(PRUNE, *args), expected)

"""SNR pruning against a NumPy reference, and prune.py on a short training run."""
import json
import os
import shutil
import signal

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, train
from gluon_bbb.analysis.snr import load_pruned

from commands import PRUNE, run


def np_prune(mus, sigmas, proportion):
    """Reference: rank |mu|/sigma over all entries (ties by flat position), zero the lowest."""
    snr = np.concatenate([(np.abs(m) / s).ravel() for m, s in zip(mus, sigmas)])
    k = int(np.floor(proportion * snr.size + 1e-7))
    order = np.lexsort((np.arange(snr.size), snr))
    keep = np.ones(snr.size, dtype=bool)
    keep[order[:k]] = False
    out, start = [], 0
    for m in mus:
        out.append(np.where(keep[start:start + m.size].reshape(m.shape), m, 0))
        start += m.size
    return out


def random_params(rng, shapes, ties=False):
    mus = [rng.normal(size=s).astype(np.float32) for s in shapes]
    sigmas = [rng.uniform(0.1, 1.0, size=s).astype(np.float32) for s in shapes]
    if ties:  # many exactly equal SNRs, across arrays too
        mus = [np.round(m * 2) / 2 + 0.25 for m in mus]  # never 0
        sigmas = [np.full(s, 0.5, dtype=np.float32) for s in shapes]
    return mus, sigmas


@pytest.fixture(scope="module")
def short_run(tmp_path_factory, mnist):
    run_dir = str(tmp_path_factory.mktemp("run"))
    train(Config(train_size=2000, epochs=1, seed=0, num_hidden_units=100), mnist, mx.cpu(),
          out_dir=run_dir, log=lambda line: None)
    return run_dir


def run_prune(*args):
    return run(PRUNE, *args)


@pytest.mark.slow
def test_prune_command_on_a_training_run(short_run, tmp_path):
    out = tmp_path / "pruned"
    proc = run_prune(short_run, "--out", str(out), "--ctx", "cpu:1",
                     "--proportions", "0", "0.5", "0.95", "--save-pruned", "0.95")
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert len(table) == 4 and table[1].startswith("| 0% |") and table[3].startswith("| 95% |")
    with open(out / "pruning.json") as f:
        report = json.load(f)
    rows = report["rows"]
    assert report["epoch"] == 1 and report["criterion"] == "snr"
    assert report["checkpoint"] == os.path.join(short_run, "checkpoint.params")
    assert [r["proportion"] for r in rows] == [0.0, 0.5, 0.95]
    total = 784 * 100 + 100 + 100 * 100 + 100 + 100 * 10 + 10
    assert rows[0]["weights_remaining"] == total
    assert rows[2]["weights_remaining"] == total - int(0.95 * total)
    with open(os.path.join(short_run, "history.json")) as f:
        assert rows[0]["test_accuracy"] == pytest.approx(json.load(f)[-1]["test_accuracy"])
    for png in ("pruning.png", "snr.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "pruned at 0.95" in proc.stdout
    assert sum(int((m.asnumpy() != 0).sum()) for m in load_pruned(str(out / "pruned-0.95.params"))) \
        <= rows[2]["weights_remaining"]


@pytest.mark.slow
def test_prune_command_whose_reader_goes_away(short_run, tmp_path):
    # as `python prune.py ... | head -0`: the pipe is closed before the table is printed
    out = tmp_path / "piped"
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = run(PRUNE, "--checkpoint", short_run, "--out", out, "--save-pruned", "0.5",
                   stdout=writer)
    finally:
        os.close(writer)
    assert proc.returncode == 128 + signal.SIGPIPE and proc.stderr == "", proc.stderr
    assert sorted(os.listdir(out)) == [".lock", "pruned-0.5.params", "pruning.json",
                                       "pruning.png", "snr.png"]


@pytest.mark.slow
def test_prune_command_on_the_best_validation_epoch(overshooting_run, tmp_path):
    run_dir, history = overshooting_run
    out = tmp_path / "best"
    shutil.copytree(run_dir, out)
    proc = run_prune("--checkpoint", str(out / "best.params"), "--proportions", "0", "0.5")
    assert proc.returncode == 0, proc.stderr
    with open(out / "best-pruning.json") as f:
        rows = json.load(f)["rows"]
    best = max(history, key=lambda record: record["validation_accuracy"])
    assert rows[0]["test_accuracy"] == pytest.approx(best["test_accuracy"], abs=1e-6)
    assert rows[0]["test_accuracy"] != pytest.approx(history[-1]["test_accuracy"], abs=1e-6)
    assert (out / "best-snr.png").is_file() and not (out / "pruning.json").exists()
    assert "wrote best-pruning.json, best-pruning.png, best-snr.png" in proc.stdout


def test_prune_command_errors(short_run, tmp_path):
    cases = [
        (["--checkpoint", short_run, "--proportions", "0.5", "1.5"],
         "--proportions must be in [0, 1], got 1.5"),
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
        proc = run_prune(*args)
        assert proc.returncode != 0, args
        assert expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1

"""What the commands print for a person: a short summary (a table where there are rows), no
line longer than 150 characters in a user's terminal, and with ``--json`` the JSON alone on
standard output, the JSON the command wrote to its files."""
import json

import numpy as np

from commands import (COMPRESS, EVALUATE, PREDICT, PRUNE, REGRESSION, SHIFT, TRAIN, run)

WIDEST = 150
# a gated network under the log-uniform prior: every column of the epoch table, the units left,
# the ndarray backend's two lines
GATED = ["--network", "dense:20,gate,relu,dense:10",
         "--prior", "log-uniform", "--kl", "analytic", "--parametrization", "log-variance",
         "--estimator", "lrt", "--remove-switched-off", "--validation", "1000", "--eval-train",
         "--kl-warmup-epochs", "2", "--epochs", "2", "--train-size", "256", "--seed", "0",
         "--test-samples", "2", "--optimizer", "adam"]


def widest(text):
    return max((len(line) for line in text.splitlines()), default=0)


def test_no_command_prints_a_line_longer_than_150_characters(tmp_path):
    np.save(tmp_path / "digit.npy", np.zeros((28, 28)))
    steps = [
        (TRAIN, ["--out", "run"] + GATED),
        (PRUNE, ["--checkpoint", "run"]),
        (EVALUATE, ["--checkpoint", "run/best.params", "--test-samples", "1"]),
        (COMPRESS, ["run", "--sigma-bits", "4", "--out", "run.gbbb"]),
        (COMPRESS, ["run", "--proportion", "0.999", "--out", "small.gbbb"]),
        (SHIFT, ["run", "run.gbbb", "--out", "shift", "--test-size", "50", "--test-samples", "1"]),
        (PREDICT, ["run.gbbb", "digit.npy"]),
        (REGRESSION, ["--data", "sine", "--out", "sine", "--epochs", "20", "--test-samples", "5"]),
    ]
    for cmd, args in steps:
        proc = run(cmd, *args, cwd=str(tmp_path))
        assert proc.returncode == 0, (args, proc.stderr)
        assert widest(proc.stdout) <= WIDEST, proc.stdout
        assert widest(proc.stderr) <= WIDEST, proc.stderr
    # the report's JSON alone on stdout with --json, as its file holds it
    for cmd, args, written in (
            (EVALUATE, ["--checkpoint", "run", "--json", "--test-samples", "1"],
             "run/uncertainty.json"),
            (PRUNE, ["--checkpoint", "run", "--proportions", "0", "0.5", "--json"],
             "run/pruning.json"),
            (SHIFT, ["run", "--out", "run/shift", "--test-size", "50", "--shift", "rotation",
                     "--json", "--test-samples", "1"], "run/shift/shift-rotation.json")):
        proc = run(cmd, *args, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("{"), (args, proc.stdout)
        printed = json.loads(proc.stdout)
        with open(tmp_path / written) as f:
            in_file = json.load(f)
        assert printed.get("rotation", printed) == in_file

"""commands/sweep.py and what a worker runs for one trial (learning/trials.py's ``run_trial``):
the spec's and the flags' refusals, a trial trained, resumed where a worker died, skipped when
done, pruned without training again where only its record is missing, its failure's cause; a
changed spec refused; then, as processes, one sweep on a local Dask cluster (stopped by Ctrl-C
and run again: the same figures as its trials run by hand, nothing trained twice) and one on a
running ``dask scheduler`` with two ``dask worker``s."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from commands import PRUNE, SWEEP, TRAIN, assert_one_line_error, run, run_process, start
from gluon_bbb.learning import trials

TINY = {"train-size": 256, "num-hidden-units": 8, "epochs": 2, "validation": 1000,
        "test-samples": 0}


def write_spec(path, base, grid, proportions=(0, 0.5, 0.95)):
    path.write_text(json.dumps({"base": base, "grid": grid, "proportions": list(proportions)}))
    return path


def read_json(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("content, expected", [
    ("[]", "a sweep spec is a JSON object with base, grid"),
    ('{"base": {}, "grid": {"seed": []}}', "grid seed must be a non-empty list"),
    ('{"base": {"out": "x"}, "grid": {"seed": [0]}}', "out is the sweep's to set"),
    ('{"base": {}, "grid": {"seed": [0]}, "proportions": [2]}',
     "proportions must be a list of numbers"),
    ('{"grid": {"seed": [0]}}', "a sweep spec names its base, the flags every trial takes"),
    ('{"base": {"learning-rate": 0.1, "learning_rate": 0.2}, "grid": {"seed": [0]}}',
     "base names --learning-rate twice (learning-rate and learning_rate)"),
    ('{"base": {"sigma-p": -1}, "grid": {"seed": [0]}}',
     "trial seed-0: --sigma-p must be a finite number > 0 (from 1.18e-38 to 3.4e+38: "
     "float32's normal numbers), got -1.0"),
    ('{"base": {"network": "dense:0,dense:10"}, "grid": {"seed": [0]}}',
     "trial seed-0: --network must be mlp, lenet, or layers"),
    ('{"base": {"colour": "blue"}, "grid": {"seed": [0]}}',
     "trial seed-0: unrecognized arguments: --colour blue"),
    ('{"base": {"epochs": 1}, "grid": {"seed": %s, "num-hidden-units": %s}}'
     % (list(range(1000)), list(range(1, 101))), "the grid gives 100000 trials, more than the "
                                                 "%d a sweep runs" % trials.MAX_TRIALS),
    ('{"base": {}, "grid": {"seed": [0, "0"]}}', "the grid gives one trial twice: seed=0 and "
                                                 "seed='0' train the same network (their "
                                                 "values are equal)"),
    ('{"base": {}, "grid": {"learning-rate": [0.001, "1e-3"], "seed": [0]}}',
     "learning-rate=0.001, seed=0 and learning-rate=1e-3, seed=0 train the same network"),
    ('{"base": {}, "grid": {"kl-scale": [1, 1.0]}}', "kl-scale=1 and kl-scale=1.0"),
])
def test_a_bad_spec_is_one_line(tmp_path, content, expected):
    spec = tmp_path / "spec.json"
    spec.write_text(content)
    assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out"), expected)
    assert not (tmp_path / "out").exists()


def test_bad_sweep_flags_are_one_line(tmp_path, monkeypatch):
    spec = write_spec(tmp_path / "spec.json", TINY, {"seed": [0]})
    for args, expected in (
            (["--workers", "0"], "--workers must be an integer from 1 to "),
            (["--workers", "99999999999999999999"], "per core of the "),
            (["--threads-per-trial", "5000"], "--threads-per-trial must be an integer from 1 "
                                              "to 1024"),
            (["--scheduler", "notanaddress"], "cannot use the Dask scheduler --scheduler "
                                              "notanaddress: missing port number in address "
                                              "'notanaddress'")):
        assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out", *args), expected)
    assert_one_line_error(run(SWEEP, tmp_path / "missing.json", "--out", tmp_path / "out"),
                          "cannot read sweep spec")
    # a second sweep into a working sweep's --out stops at once
    from gluon_bbb import outputs
    with outputs.locked_beside(str(tmp_path / "out")):  # as the first sweep holds it
        assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out"),
                              "out is being written by another process (its lock ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mode", [pytest.param("silent", marks=pytest.mark.slow), "garbage"])
def test_a_scheduler_that_is_not_one_is_said_within_its_bound(tmp_path, monkeypatch, mode):
    from gluon_bbb.commands import sweep
    monkeypatch.setattr(sweep, "CONNECT_SECONDS", 6)  # the bound, not the wait, is tested
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def serve():
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)
            if mode == "garbage":
                connection.sendall(b"\xff" * 64 + b"HTTP/1.1 200 OK\r\n\r\nhello" * 10)
    threading.Thread(target=serve, daemon=True).start()
    spec = write_spec(tmp_path / "spec.json", TINY, {"seed": [0]})
    try:
        proc = run(SWEEP, spec, "--out", tmp_path / "out", "--scheduler",
                   "tcp://127.0.0.1:%d" % server.getsockname()[1])
    finally:
        server.close()
    # a peer of other bytes: Dask's parser fails on them, or (Dask before 2024) its handshake
    # waits for a frame that never comes
    assert_one_line_error(proc, "did not answer as a Dask scheduler within " if mode == "silent"
                          else " a Dask scheduler")
    assert proc.stdout.splitlines()[-1].startswith("sweep: connecting to the Dask scheduler")
    assert not (tmp_path / "out").exists()


def test_the_sweep_imports_no_mxnet():
    # what the sweep's process imports, its parsers of the trials' flags included
    proc = run_process([sys.executable, "-c", "import sys, gluon_bbb.commands.sweep, "
                        "gluon_bbb.learning.trials; gluon_bbb.learning.trials.trial_config("
                        "['--preset', 'lenet']); print(sorted(m for m in sys.modules "
                        "if 'mxnet' in m))"])
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


# What a worker runs for one trial, its commands run in this process.

class InProcess:
    """``subprocess`` as ``trials._run`` starts a trial's command (``python -m MODULE ...``),
    running the command in this process instead."""
    COMMANDS = {trials.TRAIN_MODULE: TRAIN, trials.PRUNE_MODULE: PRUNE}
    DEVNULL, PIPE = subprocess.DEVNULL, subprocess.PIPE

    @classmethod
    def run(cls, argv, env=None, **kwargs):
        at = argv.index("-m")
        proc = run(cls.COMMANDS[argv[at + 1]], *argv[at + 2:])
        return subprocess.CompletedProcess(argv, proc.returncode, None, proc.stderr)


def trial_log(trial_dir):
    return (trial_dir / trials.TRIAL_LOG).read_text()


def test_a_trial_is_trained_resumed_where_its_worker_died_skipped_once_done_and_pruned_again(
        tmp_path, monkeypatch):
    from gluon_bbb.learning.rundir import RunDirectory
    monkeypatch.setattr(trials, "subprocess", InProcess)
    spec = trials.load_spec(str(write_spec(tmp_path / "spec.json", TINY, {"seed": [0]})))
    trial, = trials.trials(spec)
    args = (trial["train_args"], spec["proportions"], 1)
    whole = tmp_path / "whole"
    assert trials.run_trial(str(whole), *args)["status"] == "done"
    # a worker that dies after the trial's first epoch: its rerun resumes, to the same figures
    save_epoch = RunDirectory.save_epoch

    def dies_after_the_first_epoch(self, step, history, best=False):
        save_epoch(self, step, history, best)
        raise KeyboardInterrupt
    monkeypatch.setattr(RunDirectory, "save_epoch", dies_after_the_first_epoch)
    trial_dir = tmp_path / "trial"
    assert trials.run_trial(str(trial_dir), *args)["status"] == "failed"
    monkeypatch.setattr(RunDirectory, "save_epoch", save_epoch)
    record = trials.run_trial(str(trial_dir), *args)
    assert without_seconds(record["figures"]) == without_seconds(
        read_json(whole / trials.TRIAL_FILE)["figures"])
    assert [r["epoch"] for r in read_json(trial_dir / "history.json")] == [1, 2]
    log = trial_log(trial_dir)
    assert log.count(" train") == 1 and log.count(" resume") == 1, log
    # done: skipped, nothing run
    assert trials.run_trial(str(trial_dir), *args) == dict(record, status="skipped")
    assert trial_log(trial_dir) == log
    # stopped between the end of training and the trial's record: pruned again, not trained
    for name in (trials.TRIAL_FILE, "pruning.json", "pruning.png", "snr.png"):
        os.remove(trial_dir / name)
    assert trials.run_trial(str(trial_dir), *args) == record
    assert trial_log(trial_dir).count(" train") == 1
    assert trial_log(trial_dir).count(" resume") == 2


def test_a_failing_trial_says_its_cause(tmp_path, monkeypatch):
    monkeypatch.setattr(trials, "subprocess", InProcess)
    spec = trials.load_spec(str(write_spec(tmp_path / "spec.json", TINY,
                                           {"learning-rate": [1000.0]})))
    trial, = trials.trials(spec)
    record = trials.run_trial(str(tmp_path / "trial"), trial["train_args"], spec["proportions"],
                              1)
    assert record["status"] == "failed"
    assert record["error"].startswith("train_mnist.py: error: loss became non-finite")


MXNET_TRACEBACK = """Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/site/gluon_bbb/learning/step.py", line 120, in _run
    loss = op(*[inputs[name] for name in names])
mxnet.base.MXNetError: Traceback (most recent call last):
  File "../src/imperative/./imperative_utils.h", line 203
MXNetError: Error in operator fullyconnected0: Shape inconsistent, Provided = [50,784], inferred shape=(50,10)
operator attributes:
num_hidden : 50
"""


def test_a_trial_that_crashes_is_reported_by_the_exception_not_the_last_line(tmp_path):
    # a stand-in interpreter for the trial's command: it fails as MXNet does on a bug
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\ncat >&2 <<'EOF'\n%sEOF\nexit 1\n" % MXNET_TRACEBACK)
    fake.chmod(0o755)
    record = trials.run_trial(str(tmp_path / "trial"), ["--seed", "0"], [0.0], 1,
                              python=str(fake))
    assert record == {"status": "failed", "error": "train ended with status 1: MXNetError: "
                      "Error in operator fullyconnected0: Shape inconsistent, Provided = "
                      "[50,784], inferred shape=(50,10)"}
    assert trials.failure_cause("x.py: error: --epochs must be at least 1\n", "train", 2) == \
        "x.py: error: --epochs must be at least 1"
    assert trials.failure_cause("", "prune", -9) == "prune was killed by signal 9"


def test_a_changed_spec_rerun_into_the_same_out_is_refused(tmp_path, monkeypatch):
    # the trials already in --out were trained at 0.001 (the default): a spec asking 0.0005
    # names the flag and both values, and nothing runs
    monkeypatch.setattr(trials, "subprocess", InProcess)
    base = dict(TINY, epochs=1)
    spec = {"base": base, "grid": {"prior": ["gaussian", "scale-mixture"], "seed": [0]},
            "proportions": [0.0]}
    out = tmp_path / "out"
    for trial in trials.trials(spec):
        assert trials.run_trial(str(out / trial["name"]), trial["train_args"], [0.0],
                                1)["status"] == "done"
    logs = {name: trial_log(out / name) for name in os.listdir(out)}
    changed_spec = tmp_path / "changed.json"
    for change, expected in (
            (dict(base={"learning-rate": 0.0005}), "%s holds a trial trained with "
             "--learning-rate 0.001; this spec gives it --learning-rate 0.0005: a changed spec "
             "needs another --out" % (out / "prior-gaussian_seed-0")),
            (dict(base={"epochs": 3}), "trained with --epochs 1; this spec gives it --epochs 3"),
            # a prior's setting is named as its flag; given where a trial's prior has none,
            # refused
            (dict(base={"sigma-p": 0.5}), "trial prior-scale-mixture_seed-0: --sigma-p must be "
             "given with a prior that has it (gaussian; this run's: --prior scale-mixture), got "
             "0.5"),
            (dict(base={"sigma-p": 0.5}, grid={"prior": ["gaussian"], "seed": [0]}),
             "trained with --sigma-p 1.0; this spec gives it --sigma-p 0.5")):
        changed_spec.write_text(json.dumps(dict(spec, base=dict(base, **change["base"]),
                                                grid=change.get("grid", spec["grid"]))))
        assert_one_line_error(run(SWEEP, changed_spec, "--out", out), expected)
    assert {name: trial_log(out / name) for name in os.listdir(out)} == logs


# Sweeps as processes: a local cluster's and a running scheduler's.

def processes_training(out_dir):
    """(pid, parent pid) of each training command's process writing into ``out_dir``."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % pid) as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if (any(a.endswith(b"train_mnist.py") or a == b"gluon_bbb.commands.train" for a in argv)
                and str(out_dir).encode() in argv):
            found.append((int(pid), parent))
    return found


def wait_for(condition, seconds=180):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


def epochs_done(trial_dir):
    try:
        return len(read_json(trial_dir / "history.json"))
    except (OSError, ValueError):
        return 0


def by_hand(tmp_path, spec_path, name):
    """The figures of trial ``name`` run by hand, as a user would: its commands' processes,
    one thread each."""
    spec = trials.load_spec(str(spec_path))
    trial = next(t for t in trials.trials(spec) if t["name"] == name)
    out = tmp_path / "by-hand" / name
    env = {"OMP_NUM_THREADS": "1"}
    assert run_process(TRAIN, *trial["train_args"], "--out", out, env=env).returncode == 0
    assert run_process(PRUNE, "--checkpoint", out, "--proportions",
                       *["%g" % p for p in spec["proportions"]], env=env).returncode == 0
    return without_seconds(trials.trial_figures(str(out)))


def without_seconds(figures):
    """A trial's figures less its training seconds: the time a trial took is measured, not
    reproduced, and is the one figure two runs of the same trial differ in."""
    assert figures["seconds"] >= 0
    return {name: value for name, value in figures.items() if name != "seconds"}


def sweep_figures(out):
    return {t["name"]: without_seconds(t["figures"]) for t in read_json(out / "sweep.json")["trials"]}


@pytest.mark.slow
def test_a_local_sweep_stopped_by_ctrl_c_and_run_again_trains_nothing_twice(tmp_path):
    # a terminal sends SIGINT to its whole process group: the sweep, its local cluster's
    # workers and their trials; the sweep alone speaks, nothing is left running, the completed
    # epochs are kept; run again, the sweep finishes what is left and trains nothing twice
    # two trials train while the third waits for a worker
    spec = write_spec(tmp_path / "spec.json", TINY, {"seed": [0, 1, 2]})
    out = tmp_path / "sweep"
    sweep = start(SWEEP, spec, "--out", out, "--workers", "2", start_new_session=True)
    try:
        wait_for(lambda: epochs_done(out / "seed-0") >= 1 or epochs_done(out / "seed-1") >= 1)
        os.killpg(sweep.pid, signal.SIGINT)
        _, stderr = sweep.communicate(timeout=120)
    finally:
        sweep.kill()
    assert sweep.returncode == 128 + signal.SIGINT, stderr
    assert stderr.strip() == "gluon-bbb sweep: interrupted by SIGINT", stderr
    names = ("seed-0", "seed-1", "seed-2")
    wait_for(lambda: not any(processes_training(out / name) for name in names), 60)
    finished = {name for name in names if (out / name / trials.TRIAL_FILE).exists()}
    assert len(finished) < 3 and any(epochs_done(out / name) for name in names)
    # a trial stopped before it saved an epoch has nothing to resume and starts again (the
    # signal can land inside a trial's first epoch); one that saved an epoch never trains from
    # the start again
    started_unsaved = {name for name in names if (out / name / trials.TRIAL_LOG).exists()
                       and not epochs_done(out / name)}
    proc = run_process(SWEEP, spec, "--out", out, "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # how many trials, before they are planned, then where they run
    assert lines[0] == "sweep: 3 trials in %s; checking each trial's flags" % spec
    assert lines[1] == "sweep: 3 trials on a local cluster of 2 workers, 1 thread each, into %s" % out
    assert max(len(line) for line in lines) <= 150  # a person reads them in a terminal
    assert proc.stdout.count("skipped ") == len(finished)
    progress = [line for line in lines if line.startswith(("done ", "skipped "))]
    assert len(progress) == 3 and progress[-1].endswith("[done 3, running 0, waiting 0]")
    for name in names:
        assert trial_log(out / name).count(" train") == 1 + (name in started_unsaved)
        assert [r["epoch"] for r in read_json(out / name / "history.json")] == [1, 2]
    assert "| all | 3 |" in (out / "sweep.md").read_text()
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    assert sweep_figures(out)["seed-2"] == by_hand(tmp_path, spec, "seed-2")


@pytest.mark.slow
def test_a_sweep_on_a_running_scheduler_with_two_workers(tmp_path):
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    address_file = tmp_path / "scheduler.json"
    processes = [start([dask, "scheduler", "--port", "0", "--no-dashboard",
                        "--scheduler-file", address_file], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)]
    try:
        wait_for(lambda: address_file.exists() and address_file.read_text().strip(), 60)
        address = read_json(address_file)["address"]
        for _ in range(2):
            processes.append(start([dask, "worker", address, "--nthreads", "1",
                                    "--no-dashboard"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL))
        from distributed import Client
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
            spec = write_spec(tmp_path / "spec.json", dict(TINY, epochs=1), {"seed": [0, 1]})
            out = tmp_path / "sweep"
            proc = run_process(SWEEP, spec, "--out", out, "--scheduler", address)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.splitlines()[1] == ("sweep: connecting to the Dask scheduler at "
                                                   "%s (at most 30 s)" % address)
            assert proc.stdout.splitlines()[2].startswith("sweep: 2 trials on the cluster at %s"
                                                          % address)
            # the workers ran the trials without importing MXNet themselves
            assert set(client.run(lambda: "mxnet" in sys.modules).values()) == {False}
        assert sorted(t["status"] for t in read_json(out / "sweep.json")["trials"]) == [
            "done", "done"]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=60)


WORKER_LOGS = """
import logging, sys
from distributed import Client, LocalCluster
from gluon_bbb.commands import sweep

def log_an_error():
    logging.getLogger("distributed.worker").error("a worker's error, as a heartbeat logs it")
    return 1

if __name__ == "__main__":
    level = getattr(logging, sys.argv[1]) if len(sys.argv) > 1 else sweep.WORKER_LOG_LEVEL
    with sweep._local_cluster(LocalCluster, 1, level) as cluster, Client(cluster) as client:
        print(client.submit(log_an_error).result())
"""


@pytest.mark.slow
def test_a_local_clusters_workers_print_nothing_on_the_terminal(tmp_path):
    # what a worker logs (a heartbeat that finds the scheduler closed after Ctrl-C, with its
    # traceback) would land on the sweep's terminal before its one line; ERROR would show it
    script = tmp_path / "worker_logs.py"
    script.write_text(WORKER_LOGS)
    quiet = run_process([sys.executable], script, timeout=120)
    assert quiet.returncode == 0 and quiet.stdout.strip() == "1", quiet.stderr
    assert "a worker's error" not in quiet.stderr, quiet.stderr
    shown = run_process([sys.executable], script, "ERROR", timeout=120)
    assert "a worker's error" in shown.stderr, shown.stderr  # the check can fail

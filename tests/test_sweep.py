"""Sweeps on Dask: the spec and the trials' identity, a local two-worker sweep against the same
trials run one by one, a rerun (skipped, refused for a changed spec, finishing a trial whose
training ended), a worker killed in the middle of a trial, the sweep itself stopped by SIGTERM
or Ctrl-C and rerun (same figures, nothing trained twice), a trial's failure and its cause, and
a sweep on a running ``dask scheduler`` with two ``dask worker``s."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from commands import PRUNE, SWEEP, TRAIN, assert_one_line_error, run, start

TINY = {"train-size": 512, "num-hidden-units": 20, "epochs": 2, "validation": 1000,
        "test-samples": 0}


def write_spec(path, base, grid, proportions=(0, 0.5, 0.95)):
    path.write_text(json.dumps({"base": base, "grid": grid, "proportions": list(proportions)}))
    return path


def read_json(path):
    with open(path) as f:
        return json.load(f)


# The figures of each trial run by hand, by its command lines: the tests share trials, so that
# each is run by hand once (a module's tests run in one process).
BY_HAND = {}


def one_by_one(tmp_path, spec_path, directories=False):
    """The figures of the spec's trials run one after another, one thread each, as a user
    would run them by hand (with ``directories``: the run directories of those runs)."""
    from gluon_bbb.learning.trials import load_spec, trial_figures, trials
    spec = load_spec(str(spec_path))
    proportions = ["%g" % p for p in spec["proportions"]]
    found = {}
    for trial in trials(spec):
        key = (tuple(trial["train_args"]), tuple(proportions))
        if key not in BY_HAND:
            out = tmp_path / "by-hand" / trial["name"]
            env = {"OMP_NUM_THREADS": "1"}
            assert run(TRAIN, *trial["train_args"], "--out", out, env=env).returncode == 0
            assert run(PRUNE, "--checkpoint", out, "--proportions", *proportions,
                       env=env).returncode == 0
            BY_HAND[key] = results(trial_figures(str(out))), out
        found[trial["name"]] = BY_HAND[key][1 if directories else 0]
    return found


def results(figures):
    """A trial's figures less its training seconds: the time a trial took is measured, not
    reproduced, and is the one figure two runs of the same trial differ in."""
    assert figures["seconds"] >= 0
    return {name: value for name, value in figures.items() if name != "seconds"}


def sweep_figures(out):
    return {t["name"]: results(t["figures"])
            for t in read_json(out / "sweep.json")["trials"]}


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
])
def test_a_bad_spec_is_one_line(tmp_path, content, expected):
    spec = tmp_path / "spec.json"
    spec.write_text(content)
    assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out"), expected)
    assert not (tmp_path / "out").exists()


def test_bad_sweep_flags_are_one_line(tmp_path):
    spec = write_spec(tmp_path / "spec.json", TINY, {"seed": [0]})
    assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out", "--workers", "0"),
                          "--workers must be an integer from 1 to ")
    assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out", "--workers",
                              "99999999999999999999"), "per core of the ")
    assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out", "--threads-per-trial",
                              "5000"), "--threads-per-trial must be an integer from 1 to 1024")
    assert_one_line_error(run(SWEEP, tmp_path / "missing.json", "--out", tmp_path / "out"),
                          "cannot read sweep spec")
    assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out", "--scheduler",
                              "notanaddress"),
                          "cannot use the Dask scheduler --scheduler notanaddress: missing port "
                          "number in address 'notanaddress'")
    assert not (tmp_path / "out").exists()


def test_a_second_sweep_into_a_working_sweeps_out_stops_at_once(tmp_path):
    from gluon_bbb import outputs
    spec = write_spec(tmp_path / "spec.json", TINY, {"seed": [0]})
    with outputs.locked_beside(str(tmp_path / "out")):  # as the first sweep holds it
        assert_one_line_error(run(SWEEP, spec, "--out", tmp_path / "out"),
                              "out is being written by another process (its lock ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mode", ["silent", "garbage"])
def test_a_scheduler_that_is_not_one_is_said_within_its_bound(tmp_path, mode):
    import socket
    import threading
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
    started = time.time()
    proc = run(SWEEP, spec, "--out", tmp_path / "out", "--scheduler",
               "tcp://127.0.0.1:%d" % server.getsockname()[1], timeout=120)
    server.close()
    assert time.time() - started < 60
    # a peer of other bytes: Dask's parser fails on them, or (Dask before 2024) its handshake
    # waits for a frame that never comes
    assert_one_line_error(proc, "did not answer as a Dask scheduler within " if mode == "silent"
                          else " a Dask scheduler")
    assert proc.stdout.splitlines()[-1].startswith("sweep: connecting to the Dask scheduler")
    assert not (tmp_path / "out").exists()


def test_the_sweep_imports_no_mxnet(tmp_path):
    # what the sweep's process imports, its parsers of the trials' flags included
    proc = run([sys.executable, "-c", "import sys, gluon_bbb.commands.sweep, gluon_bbb.learning.trials; "
                "gluon_bbb.learning.trials.trial_config(['--preset', 'lenet']); "
                "print(sorted(m for m in sys.modules if 'mxnet' in m))"])
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    """(spec path, --out, the command's result) of a local two-worker sweep of four trials."""
    tmp_path = tmp_path_factory.mktemp("local")
    spec = write_spec(tmp_path / "spec.json", TINY, {"prior": ["gaussian", "scale-mixture"],
                                                      "seed": [0, 1]})
    out = tmp_path / "sweep"
    return spec, out, run(SWEEP, spec, "--out", out, "--workers", "2")


def trial_logs(out):
    return {name: (out / name / "trial.log").read_text() for name in sorted(os.listdir(out))
            if (out / name / "trial.log").exists()}


@pytest.mark.slow
def test_a_local_sweep_equals_its_trials_run_one_by_one(local_sweep, tmp_path):
    spec, out, proc = local_sweep
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # how many trials, before they are planned, then where they run
    assert lines[0] == "sweep: 4 trials in %s; checking each trial's flags" % spec
    assert lines[1] == "sweep: 4 trials on a local cluster of 2 workers, 1 thread each, into %s" % out
    assert max(len(line) for line in lines) <= 150  # a person reads them in a terminal
    progress = [line for line in lines if line.startswith("done ")]
    assert len(progress) == 4 and progress[-1].endswith("[done 4, running 0, waiting 0]")
    assert sweep_figures(out) == one_by_one(tmp_path, spec)
    table = (out / "sweep.md").read_text()
    assert "| prior=gaussian | 2 |" in table and "| prior=scale-mixture | 2 |" in table
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    # run again: every trial is skipped, nothing is trained
    proc = run(SWEEP, spec, "--out", out, "--workers", "2")
    assert proc.returncode == 0 and proc.stdout.count("skipped ") == 4, proc.stdout
    for log in trial_logs(out).values():
        assert log.count(" train") == 1 and " resume" not in log


@pytest.mark.slow
def test_a_changed_spec_rerun_into_the_same_out_is_refused(local_sweep, tmp_path):
    # the trials already in --out were trained at 0.001 (the default): a spec asking 0.0005
    # names the flag and both values, and nothing runs
    spec, out, _ = local_sweep
    changed = json.loads(spec.read_text())
    changed["base"]["learning-rate"] = 0.0005
    changed_spec = tmp_path / "changed.json"
    changed_spec.write_text(json.dumps(changed))
    logs = trial_logs(out)
    proc = run(SWEEP, changed_spec, "--out", out, "--workers", "2")
    assert_one_line_error(proc, "%s holds a trial trained with --learning-rate 0.001; this spec "
                                "gives it --learning-rate 0.0005: a changed spec needs another "
                                "--out" % (out / "prior-gaussian_seed-0"))
    assert trial_logs(out) == logs
    # more epochs are other training too
    changed["base"]["learning-rate"], changed["base"]["epochs"] = 0.001, 3
    changed_spec.write_text(json.dumps(changed))
    assert_one_line_error(run(SWEEP, changed_spec, "--out", out, "--workers", "2"),
                          "trained with --epochs 2; this spec gives it --epochs 3")
    # a prior's setting is named as its flag; given where a trial's prior has none, refused
    changed["base"]["epochs"], changed["base"]["sigma-p"] = 2, 0.5
    changed_spec.write_text(json.dumps(changed))
    assert_one_line_error(run(SWEEP, changed_spec, "--out", out, "--workers", "2"),
                          "trial prior-scale-mixture_seed-0: --sigma-p must be given with a "
                          "prior that has it (gaussian; this run's: --prior scale-mixture), got 0.5")
    changed["grid"]["prior"] = ["gaussian"]
    changed_spec.write_text(json.dumps(changed))
    assert_one_line_error(run(SWEEP, changed_spec, "--out", out, "--workers", "2"),
                          "trained with --sigma-p 1.0; this spec gives it --sigma-p 0.5")
    assert trial_logs(out) == logs


@pytest.mark.parametrize("grid, flags", [
    ({"seed": [0, 0]}, "seed=0 and seed=0"),
    ({"seed": [0, "0"]}, "seed=0 and seed='0'"),
    ({"learning-rate": [0.001, "1e-3"], "seed": [0]}, "learning-rate=0.001, seed=0 and "
                                                       "learning-rate=1e-3, seed=0"),
    ({"kl-scale": [1, 1.0]}, "kl-scale=1 and kl-scale=1.0"),
])
def test_a_trial_given_twice_is_refused(tmp_path, grid, flags):
    spec = write_spec(tmp_path / "spec.json", TINY, grid)
    proc = run(SWEEP, spec, "--out", tmp_path / "out")
    assert_one_line_error(proc, "the grid gives one trial twice: %s train the same network "
                                "(their values are equal)" % flags)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_trial_whose_training_ended_before_its_record_is_finished(local_sweep, tmp_path):
    # stopped between the end of training and the trial's record: a rerun prunes it without
    # training it again (its checkpoint holds all its epochs)
    spec, out, _ = local_sweep
    trial = one_by_one(tmp_path, spec, directories=True)["prior-gaussian_seed-1"]
    stopped = tmp_path / "stopped"
    shutil.copytree(trial, stopped / "prior-gaussian_seed-1")
    for name in ("pruning.json", "pruning.png", "snr.png"):
        os.remove(stopped / "prior-gaussian_seed-1" / name)
    proc = run(SWEEP, spec, "--out", stopped, "--workers", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "done prior-gaussian_seed-1: test error" in proc.stdout
    log = (stopped / "prior-gaussian_seed-1" / "trial.log").read_text()
    assert " train" not in log and log.count(" resume") == 1, log
    assert [r["epoch"] for r in read_json(stopped / "prior-gaussian_seed-1" / "history.json")] \
        == [1, 2]
    assert sweep_figures(stopped) == one_by_one(tmp_path, spec)


@pytest.mark.slow
def test_a_failing_trial_is_reported_with_its_cause_and_the_others_finish(tmp_path):
    spec = write_spec(tmp_path / "spec.json", TINY, {"learning-rate": [0.001, 1000.0]})
    proc = run(SWEEP, spec, "--out", tmp_path / "sweep", "--workers", "2")
    assert proc.returncode == 1
    assert ("failed learning-rate-1000.0: gluon-bbb train: error: loss became "
            "non-finite") in proc.stdout
    trials = {t["name"]: t for t in read_json(tmp_path / "sweep" / "sweep.json")["trials"]}
    assert trials["learning-rate-0.001"]["status"] == "done"


MXNET_TRACEBACK = """Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/site/gluon_bbb/learning/ndarray_backend.py", line 120, in _run
    loss = op(*[inputs[name] for name in names])
mxnet.base.MXNetError: Traceback (most recent call last):
  File "../src/imperative/./imperative_utils.h", line 203
MXNetError: Error in operator fullyconnected0: Shape inconsistent, Provided = [50,784], inferred shape=(50,10)
operator attributes:
num_hidden : 50
"""


def test_a_trial_that_crashes_is_reported_by_the_exception_not_the_last_line(tmp_path):
    # a stand-in interpreter for the trial's command: it fails as MXNet does on a bug
    from gluon_bbb.learning.trials import failure_cause, run_trial
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\ncat >&2 <<'EOF'\n%sEOF\nexit 1\n" % MXNET_TRACEBACK)
    fake.chmod(0o755)
    record = run_trial(str(tmp_path / "trial"), ["--seed", "0"], [0.0], 1, python=str(fake))
    assert record == {"status": "failed", "error": "train ended with status 1: MXNetError: "
                      "Error in operator fullyconnected0: Shape inconsistent, Provided = "
                      "[50,784], inferred shape=(50,10)"}
    assert failure_cause("x.py: error: --epochs must be at least 1\n", "train", 2) == \
        "x.py: error: --epochs must be at least 1"
    assert failure_cause("", "prune", -9) == "prune was killed by signal 9"


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


SLOW = dict(TINY, **{"train-size": 3000, "num-hidden-units": 100, "epochs": 6,
                      "num-samples": 3})


def epochs_done(trial_dir):
    try:
        return len(read_json(trial_dir / "history.json"))
    except (OSError, ValueError):
        return 0


@pytest.mark.slow
def test_a_worker_killed_mid_trial_has_its_trial_resumed_elsewhere(tmp_path):
    spec = write_spec(tmp_path / "spec.json", SLOW, {"seed": [0, 1]})
    out = tmp_path / "sweep"
    sweep = start(SWEEP, spec, "--out", out, "--workers", "2")
    try:
        trial = out / "seed-0"
        wait_for(lambda: 1 <= epochs_done(trial) < 6)
        pid, worker = wait_for(lambda: processes_training(trial))[0]
        os.kill(worker, signal.SIGKILL)  # the worker, not the trial: as a lost machine
        stdout, stderr = sweep.communicate(timeout=600)
    finally:
        sweep.kill()
    assert sweep.returncode == 0, stdout + stderr
    log = (trial / "trial.log").read_text()
    assert log.count(" train") == 1 and log.count(" resume") >= 1, log
    assert [r["epoch"] for r in read_json(trial / "history.json")] == [1, 2, 3, 4, 5, 6]
    assert sweep_figures(out) == one_by_one(tmp_path, spec)


@pytest.mark.slow
def test_a_sweep_stopped_and_run_again_trains_nothing_twice(tmp_path):
    spec = write_spec(tmp_path / "spec.json", SLOW, {"seed": [0, 1, 2]})
    out = tmp_path / "sweep"
    sweep = start(SWEEP, spec, "--out", out, "--workers", "2")
    try:
        wait_for(lambda: (out / "seed-0" / "trial.json").exists()
                 or (out / "seed-1" / "trial.json").exists())
        sweep.send_signal(signal.SIGTERM)
        _, stderr = sweep.communicate(timeout=120)
    finally:
        sweep.kill()
    assert sweep.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.strip().endswith("terminated by SIGTERM"), stderr
    wait_for(lambda: not any(processes_training(out / name) for name in os.listdir(out)
                             if (out / name).is_dir()), 60)
    finished = {name for name in os.listdir(out) if (out / name / "trial.json").exists()}
    assert finished and len(finished) < 3
    # a trial stopped before it saved an epoch has nothing to resume and starts again (on a
    # loaded machine the signal can land inside a trial's first epoch); one that saved an epoch
    # never trains from the start again
    started_unsaved = {name for name in ("seed-0", "seed-1", "seed-2")
                       if (out / name / "trial.log").exists() and not epochs_done(out / name)}
    proc = run(SWEEP, spec, "--out", out, "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("skipped ") == len(finished)
    for name in ("seed-0", "seed-1", "seed-2"):
        log = (out / name / "trial.log").read_text()
        assert log.count(" train") == 1 + (name in started_unsaved), log
        assert [r["epoch"] for r in read_json(out / name / "history.json")] == [1, 2, 3, 4, 5, 6]
    assert sweep_figures(out) == one_by_one(tmp_path, spec)


@pytest.mark.slow
def test_ctrl_c_ends_a_sweep_with_one_line(tmp_path):
    # a terminal sends SIGINT to its whole process group: the sweep, its local cluster's
    # workers and their trials; the sweep alone speaks, and nothing is left running
    spec = write_spec(tmp_path / "spec.json", SLOW, {"seed": [0, 1]})
    out = tmp_path / "sweep"
    sweep = start(SWEEP, spec, "--out", out, "--workers", "2", start_new_session=True)
    try:
        wait_for(lambda: epochs_done(out / "seed-0") >= 1)
        os.killpg(sweep.pid, signal.SIGINT)
        _, stderr = sweep.communicate(timeout=120)
    finally:
        sweep.kill()
    assert sweep.returncode == 128 + signal.SIGINT, stderr
    assert stderr.strip() == "gluon-bbb sweep: interrupted by SIGINT", stderr
    wait_for(lambda: not any(processes_training(out / name) for name in ("seed-0", "seed-1")),
             60)
    assert epochs_done(out / "seed-0") >= 1  # its completed epochs are kept


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
            # the trials of the local sweep's first setting
            spec = write_spec(tmp_path / "spec.json", TINY, {"prior": ["gaussian"],
                                                              "seed": [0, 1]})
            out = tmp_path / "sweep"
            proc = run(SWEEP, spec, "--out", out, "--scheduler", address)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.splitlines()[1] == ("sweep: connecting to the Dask scheduler at "
                                                   "%s (at most 30 s)" % address)
            assert proc.stdout.splitlines()[2].startswith("sweep: 2 trials on the cluster at %s"
                                                          % address)
            # the workers ran the trials without importing MXNet themselves
            assert set(client.run(lambda: "mxnet" in sys.modules).values()) == {False}
        assert sweep_figures(out) == one_by_one(tmp_path, spec)
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


def test_a_local_clusters_workers_print_nothing_on_the_terminal(tmp_path):
    # what a worker logs (a heartbeat that finds the scheduler closed after Ctrl-C, with its
    # traceback) would land on the sweep's terminal before its one line; ERROR would show it
    script = tmp_path / "worker_logs.py"
    script.write_text(WORKER_LOGS)
    quiet = run([sys.executable], script, timeout=120)
    assert quiet.returncode == 0 and quiet.stdout.strip() == "1", quiet.stderr
    assert "a worker's error" not in quiet.stderr, quiet.stderr
    shown = run([sys.executable], script, "ERROR", timeout=120)
    assert "a worker's error" in shown.stderr, shown.stderr  # the check can fail

"""commands/cli.py: what every command shares, as a user meets it. A signal ends a command on one
line with its status, wherever it lands (in a finalizer, in a library that turns it into its own
error, inside a native call, before the first epoch); a signal a user's shell ignores stays
ignored; an environment MXNet, OpenMP or matplotlib would stop on is one line; standard output
full, closed or gone is said or kept quiet. The tests whose subject is the process (a signal from
outside, closed descriptors, the interpreter's own variables) run one; the rest run in this
process through ``run_main``."""
import io
import json
import os
import signal
import stat
import sys
import time

import numpy as np
import pytest

from commands import (PREDICT, PRUNE, TRAIN, assert_one_line_error, captured, run, run_process,
                      start, stopped_by)
from conftest import SMALL
from gluon_bbb.commands.cli import run_main
from test_model_file import synthetic_model


def run_main_captured(main, prog):
    """(status, stdout, stderr) of ``run_main(main, [], prog)``."""
    return captured(lambda: run_main(main, [], prog=prog))


# 1. Signals.

@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_whose_handler_runs_in_a_finalizer_still_ends_the_command(name):
    # Python ignores the KeyboardInterrupt a handler raises inside __del__ (MXNet frees every
    # NDArray in one): the command must still end, on one line
    class SignalsWhenFreed:
        def __del__(self):
            os.kill(os.getpid(), getattr(signal, name))  # its handler runs in this finalizer

    def main(argv):
        SignalsWhenFreed()
        time.sleep(30)
        print("went on")
        return 0
    status, out, err = run_main_captured(main, "finalizer")
    assert (status, out, err.strip()) == (128 + getattr(signal, name), "",
                                          stopped_by("finalizer", name))


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_an_interrupt_a_library_turns_into_its_own_error_still_ends_as_an_interrupt(name):
    # as NumPy's import does when interrupted (ImportError with a page of advice), or a C
    # extension's import of NumPy (import_array: PyErr_Print, which shows the error through
    # sys.excepthook, then ImportError)
    def main(argv):
        try:
            os.kill(os.getpid(), getattr(signal, name))
            time.sleep(30)
        except KeyboardInterrupt:
            sys.excepthook(*sys.exc_info())
            raise ImportError("importing failed.\nPlease check...")
        return 0
    status, _, err = run_main_captured(main, "converting")
    assert (status, err.strip()) == (128 + getattr(signal, name), stopped_by("converting", name))


def test_a_command_started_with_sigint_ignored_keeps_ignoring_it():
    # as a job started with nohup or in the background of a non-interactive shell
    def main(argv):
        os.kill(os.getpid(), signal.SIGINT)
        print("went on")
        return 0
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert run_main_captured(main, "ignoring") == (0, "went on\n", "")
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("where", ["frees", "builds"])
def test_ctrl_c_while_mxnet_frees_or_builds_an_ndarray_ends_training_on_one_line(
        tmp_path, monkeypatch, where):
    """SIGINT sent from inside NDArrayBase's finalizer (Python ignores a KeyboardInterrupt
    raised there: training would go on) or its constructor (an NDArray left without its
    handle, whose finalizer would print a traceback under the command's line), the first time
    it runs after epoch 1 is saved."""
    from mxnet._ctypes.ndarray import NDArrayBase
    from gluon_bbb.learning.rundir import RunDirectory
    save_epoch, armed = RunDirectory.save_epoch, []

    def save_epoch_then_arm(self, *args, **kwargs):
        save_epoch(self, *args, **kwargs)
        armed.append(True)

    def interrupt_once():
        if armed:
            del armed[:]
            os.kill(os.getpid(), signal.SIGINT)
    monkeypatch.setattr(RunDirectory, "save_epoch", save_epoch_then_arm)
    if where == "frees":
        free = NDArrayBase.__del__

        def free_then_interrupt(self):
            free(self)
            interrupt_once()
        monkeypatch.setattr(NDArrayBase, "__del__", free_then_interrupt)
    else:
        def init_interrupted(self, handle, writable=True):
            interrupt_once()
            self.handle = handle
            self.writable = writable
        monkeypatch.setattr(NDArrayBase, "__init__", init_interrupted)
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, "--epochs", "50", *SMALL)  # ends where the signal is lost
    assert proc.returncode == 130, proc.stderr
    # where the handler lands in a finalizer the signal is sent again 10 ms later, and again,
    # until it lands in the program's own code: by then more epochs may be saved
    saved = len(json.loads((out / "history.json").read_text()))
    assert saved >= 1 and proc.stderr.strip() == stopped_by("train_mnist.py", "SIGINT") + (
        "; %d completed epoch%s saved in %s; --resume continues the run"
        % (saved, " is" if saved == 1 else "s are", out)), proc.stderr


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_before_the_first_epoch_claims_nothing_saved(tmp_path, monkeypatch, name):
    from gluon_bbb.learning.step import TrainingStep
    step = TrainingStep.__call__

    def signalled(self, *args):
        os.kill(os.getpid(), getattr(signal, name))
        return step(self, *args)
    monkeypatch.setattr(TrainingStep, "__call__", signalled)
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, "--epochs", "1", *SMALL)
    assert proc.returncode == 128 + getattr(signal, name), proc.stderr
    assert proc.stderr.strip() == stopped_by("train_mnist.py", name) + (
        "; no epoch was completed, so nothing is saved")
    assert proc.stdout.startswith("training on") and not out.exists()


@pytest.mark.slow
def test_a_signal_from_a_terminal_ends_training_after_an_epoch_and_resume_goes_on(tmp_path):
    # the process as a user's terminal stops it: SIGINT to its process group, mid-run
    out = tmp_path / "run"
    proc = start(TRAIN, "--out", out, "--epochs", "100000", *SMALL, start_new_session=True)
    try:
        deadline = time.time() + 120
        while not (out / "checkpoint.params").exists() and time.time() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, stderr
    lines = stderr.strip().splitlines()
    saved = len(json.loads((out / "history.json").read_text()))
    assert lines == [stopped_by("train_mnist.py", "SIGINT") + (
        "; %d completed epoch%s saved in %s; --resume continues the run"
        % (saved, " is" if saved == 1 else "s are", out))], stderr
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]
    assert run(TRAIN, "--out", out, "--resume", "--epochs", saved + 1).returncode == 0


INSIDE_A_NATIVE_CALL = """
import sys
from gluon_bbb.commands.cli import load_mxnet, run_main
def main(argv):
    load_mxnet()  # as a command loads it
    from mxnet import nd
    a = nd.random.normal(shape=(10000, 10000))
    a.wait_to_read()
    print("waiting", flush=True)
    # one product of 2 TFLOP, tens of seconds on two cores: one native call that no signal
    # interrupts, the operator's own (the package's NaiveEngine runs it in this thread)
    nd.dot(a, a).wait_to_read()
    print("went on")
    return 0
sys.exit(run_main(main, [], prog="native"))
"""


@pytest.mark.slow
def test_a_signal_ends_a_command_stuck_inside_a_native_call():
    from gluon_bbb.commands.cli import STUCK_SECONDS
    proc = start([sys.executable, "-c", INSIDE_A_NATIVE_CALL])
    try:
        assert proc.stdout.readline() == "waiting\n"
        time.sleep(0.5)  # into the product
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STUCK_SECONDS + 60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert proc.stderr.read().strip() == stopped_by("native", "SIGTERM") + (
        "; it was inside a native call that did not return for %g s, so it ends there"
        % STUCK_SECONDS)


# 2. The environment.

@pytest.mark.parametrize("name, value, words", [
    ("OMP_NUM_THREADS", "abc", "OMP_NUM_THREADS='abc' must be a whole number of threads"),
    ("OMP_NUM_THREADS", "100000", "from 1 to 1024"),
    ("OMP_NUM_THREADS", "4,2", "from 1 to 1024"),
    ("MXNET_CPU_WORKER_NTHREADS", "abc", "MXNET_CPU_WORKER_NTHREADS='abc' must be an integer"),
    ("MXNET_EXEC_BULK_EXEC_TRAIN", "maybe", "must be 0, 1, true or false"),
    ("MXNET_ENGINE_TYPE", "bogus", "must be one of NaiveEngine, ThreadedEngine"),
    # OpenMP's own, which libgomp would warn of on the terminal and ignore
    ("OMP_PROC_BIND", "bogus", "OMP_PROC_BIND='bogus' must be true, false, or a list of"),
    ("OMP_SCHEDULE", "static;4", "must be static, dynamic, guided or auto"),
    ("OMP_THREAD_LIMIT", "0", "must be a whole number >= 1"),
    ("GOMP_SPINCOUNT", "x", "must be a count such as 300k, or infinite"),
    ("MPLBACKEND", "bogus", "MPLBACKEND='bogus' must be a matplotlib backend"),
])
def test_an_environment_mxnet_or_matplotlib_would_stop_on_is_one_line(tmp_path, name, value,
                                                                      words):
    out = tmp_path / "run"
    assert_one_line_error(run(TRAIN, "--out", out, "--epochs", "1", *SMALL, env={name: value}),
                          words)
    assert not out.exists()


def test_the_values_openmp_takes_are_taken():
    from gluon_bbb.commands.cli import check_environment
    check_environment({"OMP_PROC_BIND": "Spread, close", "OMP_SCHEDULE": "monotonic:dynamic,4",
                       "OMP_STACKSIZE": "4M", "OMP_PLACES": "{0:2},{2:2}", "OMP_DYNAMIC": "TRUE",
                       "GOMP_SPINCOUNT": "infinite", "OMP_WAIT_POLICY": "passive",
                       "OMP_THREAD_LIMIT": "8", "OMP_MAX_ACTIVE_LEVELS": "0"})


@pytest.mark.slow
def test_warnings_as_errors_another_backend_and_an_ascii_terminal_train_as_ever(tmp_path):
    # the interpreter's own variables, read as it starts: a path the terminal's encoding cannot
    # show is printed with escapes; a HOME matplotlib cannot keep its cache in says nothing
    (tmp_path / "home").write_text("a file, not a directory")
    proc = run_process(TRAIN, "--out", tmp_path / "r\u00e9sultat", "--epochs", "1", *SMALL,
                       env={"PYTHONWARNINGS": "error", "MPLBACKEND": "svg",
                            "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "ascii",
                            "HOME": str(tmp_path / "home"), "MPLCONFIGDIR": None})
    assert proc.returncode == 0, proc.stderr
    assert "r\\xe9sultat" in proc.stdout and proc.stderr == ""
    assert (tmp_path / "r\u00e9sultat" / "uncertainty.png").exists()


@pytest.mark.parametrize("body, words", [
    ("import sys\nsys.exit(3)\n", "(SystemExit: 3)"),
    ("raise KeyboardInterrupt\n", "(KeyboardInterrupt)"),
    ("raise ValueError('no')\n", "(ValueError: no)")])
def test_an_import_of_a_users_module_that_exits_or_raises_is_one_line(tmp_path, body, words):
    (tmp_path / "users_module.py").write_text(body)
    proc = run(TRAIN, "--import", "users_module", "--out", tmp_path / "run", cwd=tmp_path)
    assert_one_line_error(proc, "--import must be a module Python can import here %s, got "
                                "'users_module'" % words)
    assert not (tmp_path / "run").exists()


def test_a_signal_inside_mxnets_import_leaves_no_engine_line_at_exit(monkeypatch):
    # MXNet starts its engine at exit where no operator started it, and says so where
    # MXNET_ENGINE_TYPE is set: after the command's last line
    import gluon_bbb
    from gluon_bbb.commands import cli
    monkeypatch.setenv("MXNET_ENGINE_TYPE", "NaiveEngine")
    monkeypatch.setattr(gluon_bbb, "_engine_started", False)
    cli._no_engine_line_at_exit()
    assert "MXNET_ENGINE_TYPE" not in os.environ
    monkeypatch.setattr(gluon_bbb, "_engine_started", True)
    monkeypatch.setenv("MXNET_ENGINE_TYPE", "NaiveEngine")
    cli._no_engine_line_at_exit()
    assert os.environ["MXNET_ENGINE_TYPE"] == "NaiveEngine"


# 3. Standard output.

def test_a_full_standard_output_is_named_not_the_disk(tmp_path):
    model = synthetic_model(tmp_path / "m.gbbb")
    digits = tmp_path / "digits.npy"
    np.save(digits, np.zeros((3000, 28, 28)))
    full = tmp_path / "full"
    os.mknod(full, 0o600 | stat.S_IFCHR, os.makedev(1, 7))  # as /dev/full
    from gluon_bbb.commands import predict
    import contextlib
    err = io.StringIO()
    with open(full, "w") as stream, contextlib.redirect_stdout(stream), \
            contextlib.redirect_stderr(err):
        status = predict.run([str(model), str(digits)], prog="gluon-bbb predict")
    assert status == 2 and err.getvalue() == (
        "gluon-bbb predict: error: cannot write to standard output: No space left on device\n")


@pytest.mark.slow
def test_commands_with_standard_output_closed_or_gone_finish_quietly(tmp_path, runs):
    digit = tmp_path / "digit.npy"
    np.save(digit, np.zeros((28, 28)))
    model = synthetic_model(tmp_path / "m.gbbb")
    for cmd, args in ((TRAIN, ["--out", tmp_path / "run", "--epochs", "1", *SMALL]),
                      (PREDICT, [model, digit])):
        proc = run_process(cmd, *args, stdout=None, preexec_fn=lambda: os.close(1))
        assert proc.returncode == 0 and proc.stderr == "", (cmd, proc.stderr)
    assert (tmp_path / "run" / "checkpoint.params").exists()
    # as `prune.py ... | head -0`: the reader is gone before the table is printed
    out = tmp_path / "piped"
    proc = run_process(["/bin/bash", "-c", '"$@" | head -0; echo ${PIPESTATUS[0]}', "bash",
                        *PRUNE, "--checkpoint", runs["small"], "--out", out, "--save-pruned",
                        "0.5"])
    assert proc.stderr == "" and proc.stdout.strip() == str(128 + signal.SIGPIPE)
    assert sorted(os.listdir(out)) == [".lock", "pruned-0.5.params", "pruning.json",
                                       "pruning.png", "snr.png"]


@pytest.mark.parametrize("command", ["prune", "evaluate", "compress"])
def test_a_command_that_reads_one_run_takes_it_once_in_either_form(command, capsys):
    import importlib
    build_parser = importlib.import_module("gluon_bbb.commands." + command).build_parser
    for argv in (["runs/a"], ["--checkpoint", "runs/a"]):
        args = build_parser().parse_args(argv + ["--out", "elsewhere"])
        assert args.run == "runs/a" and not hasattr(args, "run_flag")
    for argv, expected in (([], "required: RUN (or --checkpoint RUN)"),
                           (["runs/a", "--checkpoint", "runs/b"], "RUN and --checkpoint both")):
        with pytest.raises(SystemExit) as exit_info:
            build_parser().parse_args(argv + ["--out", "elsewhere"])
        assert exit_info.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], lines

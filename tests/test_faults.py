"""Bad input and faults: each refused on one line with exit status 2, no file of an existing
run changed; a run directory locked against a second process; a crash between the history and
the checkpoint writes loses no history row."""
import gzip
import hashlib
import json
import os
import shutil
import signal
import struct
import sys
import time

import numpy as np
import pytest

from commands import EVALUATE, PRUNE, TRAIN, assert_one_line_error, run, start, stopped_by

SMALL = ["--train-size", "512", "--num-hidden-units", "20", "--test-samples", "2", "--seed", "1"]


def hashes(directory, lock=False):
    """sha256 of each file of a run directory; the lock file (the last holder's pid, not part
    of the run) only with ``lock``."""
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
            for name in sorted(os.listdir(directory))
            if (directory / name).is_file() and (lock or name != ".lock")}


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    proc = run(TRAIN, "--out", str(out), "--epochs", "1", *SMALL)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_a_second_process_on_a_locked_run_directory_is_refused(tmp_path):
    out = tmp_path / "busy"
    first = start(TRAIN, "--out", out, "--epochs", "100000", *SMALL)
    try:
        deadline = time.time() + 120
        while not (out / "checkpoint.params").exists() and time.time() < deadline:
            time.sleep(0.2)  # the first run holds the lock and has written an epoch
        assert first.poll() is None
        before = hashes(out, lock=True)
        for cmd, args in ((TRAIN, ["--out", str(out), "--epochs", "1", *SMALL]),
                          (TRAIN, ["--out", str(out), "--resume", "--epochs", "200000"]),
                          (PRUNE, ["--checkpoint", str(out)]),
                          (EVALUATE, ["--checkpoint", str(out)])):
            proc = run(cmd, *args)
            assert_one_line_error(proc, "%s is in use by another process (pid %d)"
                                  % (out, first.pid))
        after = hashes(out, lock=True)
        # the first run goes on writing; the refused ones wrote nothing
        finished = lambda names: {n for n in names if not n.endswith(".tmp")}  # mid-write
        assert finished(after) == finished(before) and after[".lock"] == before[".lock"]
        assert after["config.json"] == before["config.json"]
    finally:
        first.kill()
        first.wait()
    # a killed holder leaves no stale lock: the run resumes
    proc = run(TRAIN, "--out", str(out), "--resume", "--epochs",
               str(json.loads((out / "history.json").read_text())[-1]["epoch"] + 1))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("cmd", ["train", "prune", "evaluate"])
@pytest.mark.parametrize("where", ["file", "under_file", "unwritable"])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(tmp_path, trained_run,
                                                                     cmd, where):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    out = {"file": a_file, "under_file": a_file / "out",
           # /proc refuses new entries even to root, as a read-only directory would
           "unwritable": "/proc/gluon-bbb-test"}[where]
    before = hashes(trained_run)
    if cmd == "train":
        proc = run(TRAIN, "--out", str(out), "--epochs", "1", *SMALL)
    else:
        proc = run(PRUNE if cmd == "prune" else EVALUATE, "--checkpoint", str(trained_run),
                   "--out", str(out))
    message = ("--out %s is a file, not a directory" % out if where == "file"
               else "--out %s cannot be written" % out)
    assert_one_line_error(proc, message)
    assert proc.stdout == "" or "|" not in proc.stdout  # no table printed first
    assert hashes(trained_run) == before and a_file.read_text() == "not a directory"


def idx_images(path, count, rows, cols):
    header = struct.pack(">IIII", 0x803, count, rows, cols)
    with gzip.open(path, "wb") as f:
        f.write(header + np.zeros(count * rows * cols, dtype=np.uint8).tobytes())


def test_ood_images_of_the_wrong_size_are_refused_at_load(tmp_path, trained_run):
    ood = tmp_path / "ood"
    ood.mkdir()
    idx_images(str(ood / "t10k-images-idx3-ubyte.gz"), 5, 32, 32)
    expected = "%s: images are 32x32, the network takes 28x28" % (
        ood / "t10k-images-idx3-ubyte.gz")
    proc = run(TRAIN, "--out", str(tmp_path / "new"), "--epochs", "1", "--ood-data-dir",
               str(ood), *SMALL)
    assert_one_line_error(proc, expected)
    assert not (tmp_path / "new" / "checkpoint.params").exists()
    before = hashes(trained_run)
    assert_one_line_error(run(EVALUATE, "--checkpoint", str(trained_run), "--ood-data-dir",
                              str(ood)), expected)
    assert hashes(trained_run) == before


def test_a_batch_larger_than_the_training_set_is_refused(tmp_path):
    proc = run(TRAIN, "--out", str(tmp_path / "big"), "--epochs", "1", "--batch-size", "100000",
               "--train-size", "5000", "--validation", "10000")
    assert_one_line_error(proc, "--batch-size must be at most the 5000 training images "
                                "(after --train-size and --validation), got 100000")
    assert not (tmp_path / "big" / "checkpoint.params").exists()


def test_nothing_to_train_is_refused(tmp_path, trained_run):
    proc = run(TRAIN, "--out", str(tmp_path / "zero"), "--epochs", "0", *SMALL)
    assert_one_line_error(proc, "--epochs must be at least 1 for a new run (nothing to train)")
    assert not (tmp_path / "zero" / "checkpoint.params").exists()
    assert not (tmp_path / "zero" / "accuracy.png").exists()
    before = hashes(trained_run)
    proc = run(TRAIN, "--out", str(trained_run), "--resume", "--epochs", "0")
    assert_one_line_error(proc, "%s has trained 1 epochs already; --epochs must be at least 1 "
                                "(more trains on; as many trains nothing and draws the run's "
                                "reports again)" % trained_run)
    assert hashes(trained_run) == before


@pytest.mark.slow
def test_a_run_that_trained_all_its_epochs_resumes_to_its_reports(tmp_path, trained_run):
    # a run stopped after its last checkpoint but before its reports (a signal, a sweep ended
    # between the two) is finished by --resume: nothing is trained, the reports are drawn
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run, run_dir)
    for name in ("uncertainty.json", "uncertainty.png", "accuracy.png"):
        os.remove(run_dir / name)
    before = hashes(run_dir)
    for args in ([], ["--epochs", "1"]):
        proc = run(TRAIN, "--out", run_dir, "--resume", *args)
        assert proc.returncode == 0, proc.stderr
        assert "%s has trained all its 1 epochs: nothing to train" % run_dir in proc.stdout
        assert "epoch 1/1" not in proc.stdout
        after = hashes(run_dir)
        assert {name: after[name] for name in before} == before
        assert {"uncertainty.json", "uncertainty.png", "accuracy.png"} <= set(after)


# Runs train_mnist.py with the run directory's parameter writer patched to send the process
# CRASH_SIGNAL (default SIGKILL, as a power cut) when it is about to write the checkpoint of
# epoch CRASH_AT (history.json and best.params of that epoch are written by then).
CRASHING_TRAIN = """
import os, runpy, signal, sys
from gluon_bbb.learning.rundir import RunDirectory
write = RunDirectory.save_parameters
def save_parameters(self, step, epoch, best=False):
    if epoch == int(os.environ["CRASH_AT"]) and not best:
        os.kill(os.getpid(), getattr(signal, os.environ.get("CRASH_SIGNAL", "SIGKILL")))
    return write(self, step, epoch, best)
RunDirectory.save_parameters = save_parameters
sys.argv = [%r] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
""" % TRAIN[1]


@pytest.mark.slow
def test_a_crash_between_history_and_checkpoint_loses_no_history_row(tmp_path, mnist):
    out = tmp_path / "crash"
    proc = run([sys.executable, "-c", CRASHING_TRAIN], "--out", str(out), "--epochs", "3",
               "--validation", "2000", *SMALL, env={"CRASH_AT": "2"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert [r["epoch"] for r in json.loads((out / "history.json").read_text())] == [1, 2]
    from gluon_bbb import load_checkpoint
    assert load_checkpoint(str(out))["epoch"] == 1  # the crash came before epoch 2's checkpoint
    proc = run(TRAIN, "--out", str(out), "--resume", "--epochs", "3")
    assert proc.returncode == 0, proc.stderr
    assert [r["epoch"] for r in json.loads((out / "history.json").read_text())] == [1, 2, 3]
    # and the resumed run is the uninterrupted one
    whole = tmp_path / "whole"
    assert run(TRAIN, "--out", str(whole), "--epochs", "3", "--validation", "2000",
               *SMALL).returncode == 0
    for name in ("checkpoint.params", "best.params"):
        ours, theirs = (load_checkpoint(str(d / name)) for d in (out, whole))
        assert ours["epoch"] == theirs["epoch"]
        for a, b in zip(ours["mus"] + ours["rhos"], theirs["mus"] + theirs["rhos"]):
            np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_while_an_epoch_is_written_waits_for_its_checkpoint(tmp_path, name):
    out = tmp_path / "run"
    proc = run([sys.executable, "-c", CRASHING_TRAIN], "--out", str(out), "--epochs", "3",
               *SMALL, env={"CRASH_AT": "2", "CRASH_SIGNAL": name})
    assert proc.returncode == 128 + getattr(signal, name), proc.stderr
    assert proc.stderr.strip().endswith(
        "2 completed epochs are saved in %s; --resume continues the run" % out), proc.stderr
    assert [r["epoch"] for r in json.loads((out / "history.json").read_text())] == [1, 2]
    from gluon_bbb import load_checkpoint
    assert load_checkpoint(str(out))["epoch"] == 2


SIGNAL_IN_A_FINALIZER = """
import os, signal, sys, time
from gluon_bbb.commands.cli import run_main
class SignalsWhenFreed:
    def __del__(self):
        os.kill(os.getpid(), getattr(signal, sys.argv[1]))  # its handler runs in a finalizer
def main(argv):
    SignalsWhenFreed()
    time.sleep(30)
    print("went on")
    return 0
sys.exit(run_main(main, [], prog="finalizer"))
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_whose_handler_runs_in_a_finalizer_still_ends_the_command(name):
    # Python ignores the KeyboardInterrupt a handler raises inside __del__ (MXNet frees every
    # NDArray in one): the command must still end, on one line
    proc = run([sys.executable, "-c", SIGNAL_IN_A_FINALIZER], name, timeout=20)
    assert proc.returncode == 128 + getattr(signal, name), proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip() == stopped_by("finalizer", name)


INSIDE_A_NATIVE_CALL = """
import sys, time
import gluon_bbb
from gluon_bbb.commands.cli import load_mxnet, run_main
def main(argv):
    load_mxnet()  # as a command loads it
    from mxnet import nd
    a = nd.random.normal(shape=(10000, 10000))
    a.wait_to_read()
    print("waiting", flush=True)
    # one product of 2 TFLOP, tens of seconds on two cores: one native call that no signal
    # interrupts, the operator's own (the package's NaiveEngine runs it in this thread) or, on
    # MXNet's threaded engine, the wait for it
    nd.dot(a, a).wait_to_read()
    print("went on")
    return 0
sys.exit(run_main(main, [], prog="native"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_ends_a_command_stuck_inside_a_native_call_within_seconds(name):
    from gluon_bbb.commands.cli import STUCK_SECONDS
    proc = start([sys.executable, "-c", INSIDE_A_NATIVE_CALL])
    try:
        assert proc.stdout.readline() == "waiting\n"
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(getattr(signal, name))
        proc.wait(timeout=STUCK_SECONDS + 10)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 128 + getattr(signal, name)
    assert STUCK_SECONDS <= took <= STUCK_SECONDS + 3, took
    assert proc.stderr.read().strip() == stopped_by("native", name) + (
        "; it was inside a native call that did not return for %g s, so it ends there"
        % STUCK_SECONDS)


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_an_interrupt_a_library_turns_into_its_own_error_still_ends_as_an_interrupt(name):
    # as NumPy's import does when interrupted (ImportError with a page of advice), or a C
    # extension's import of NumPy (import_array: PyErr_Print, which shows the error through
    # sys.excepthook, then ImportError)
    program = ("import os, signal, sys, time\n"
               "from gluon_bbb.commands.cli import run_main\n"
               "def main(argv):\n"
               "    try:\n"
               "        os.kill(os.getpid(), getattr(signal, sys.argv[1]))\n"
               "        time.sleep(30)\n"
               "    except KeyboardInterrupt:\n"
               "        sys.excepthook(*sys.exc_info())\n"
               "        raise ImportError('importing failed.\\nPlease check...')\n"
               "    return 0\n"
               "sys.exit(run_main(main, [], prog='converting'))\n")
    proc = run([sys.executable, "-c", program], name, timeout=20)
    assert proc.returncode == 128 + getattr(signal, name), proc.stderr
    assert proc.stderr.strip() == stopped_by("converting", name)


def test_a_command_started_with_sigint_ignored_keeps_ignoring_it():
    # as a job started with nohup or in the background of a non-interactive shell
    program = ("import os, signal, sys\n"
               "from gluon_bbb.commands.cli import run_main\n"
               "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
               "def main(argv):\n"
               "    os.kill(os.getpid(), signal.SIGINT)\n"
               "    print('went on')\n"
               "    return 0\n"
               "sys.exit(run_main(main, [], prog='ignoring'))\n")
    proc = run([sys.executable, "-c", program], timeout=20)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "went on\n", "")


# Training that sends itself SIGINT from inside one of NDArrayBase's methods (a PATCH below),
# the first time that method runs after epoch 1 is saved
INTERRUPTED_TRAINING = """
import os, runpy, signal, sys
from gluon_bbb.learning.rundir import RunDirectory  # gluon_bbb first: it lets MXNet import on NumPy 1.24+
from mxnet._ctypes.ndarray import NDArrayBase
save_epoch, armed = RunDirectory.save_epoch, []
def save_epoch_then_arm(self, *args, **kwargs):
    save_epoch(self, *args, **kwargs)
    armed.append(True)
def interrupt_once():
    if armed:
        del armed[:]
        os.kill(os.getpid(), signal.SIGINT)
RunDirectory.save_epoch = save_epoch_then_arm
%s
sys.argv = [%r] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
PATCH = {
    # Python ignores a KeyboardInterrupt raised in a finalizer: training would go on
    "frees": """
free = NDArrayBase.__del__
def free_then_interrupt(self):
    free(self)
    interrupt_once()
NDArrayBase.__del__ = free_then_interrupt
""",
    # an NDArray left without its handle: its finalizer would print a traceback under the
    # command's line as the process exits
    "builds": """
def init_interrupted(self, handle, writable=True):
    interrupt_once()
    self.handle = handle
    self.writable = writable
NDArrayBase.__init__ = init_interrupted
"""}


@pytest.mark.parametrize("where", sorted(PATCH))
def test_ctrl_c_while_mxnet_frees_or_builds_an_ndarray_ends_training_on_one_line(tmp_path,
                                                                                  where):
    out = tmp_path / "run"
    program = INTERRUPTED_TRAINING % (PATCH[where], TRAIN[1])
    proc = run([sys.executable, "-c", program], "--out", str(out), "--epochs", "100000",
               *SMALL, timeout=120)
    assert proc.returncode == 130, proc.stderr
    # the signal comes right after epoch 1 is saved; where its handler lands in a finalizer it
    # is sent again 10 ms later, and again, until it lands in the program's own code. An epoch
    # here takes about 50 ms, so on a loaded machine the next epoch may be saved first (seen
    # in CI): not lost either way (before the fix, training went on past epoch 7)
    assert proc.stderr.strip() in [stopped_by("train_mnist.py", "SIGINT") + (
        "; %s saved in %s; --resume continues the run" % (saved, out))
        for saved in ("1 completed epoch is", "2 completed epochs are")], proc.stderr


def test_smaller_messages(tmp_path, trained_run):
    assert_one_line_error(run(PRUNE, "--checkpoint", str(trained_run), "--save-pruned", "2"),
                          "prune.py: error: --save-pruned must be in [0, 1], got 2.0")
    proc = run(EVALUATE, "--checkpoint", str(tmp_path / "none"))
    assert_one_line_error(proc, "gluon-bbb evaluate: error: ")
    from gluon_bbb import DataError, read_idx
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(struct.pack(">IIII", 0x803, 2, 28, 28) + b"\0" * 10)
    with pytest.raises(DataError, match="^%s: truncated" % path):
        read_idx(str(path), ndim=3)

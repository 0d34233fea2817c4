"""learning/threads.py: the team follows the cores other processes leave free, measured from
/proc/stat, and a count the user sets holds."""
import ctypes
import json
import os
import subprocess
import sys
import time

import pytest

from commands import TRAIN, run
from gluon_bbb import cpus_granted
from gluon_bbb.learning import threads
from gluon_bbb.learning.threads import Threads, busy_seconds, team_size

BUSY = [sys.executable, "-c", "while True: pass"]


@pytest.mark.parametrize("granted, elsewhere, expected", [
    (2, 0.0, 2), (2, 0.49, 2), (2, 0.51, 1), (2, 1.0, 1), (2, 2.0, 1), (2, 5.0, 1),
    (1, 0.0, 1), (1, 3.0, 1), (16, 1.0, 15), (16, 2.6, 13), (16, 40.0, 1), (4, 1.4, 3)])
def test_the_team_is_the_cores_left_rounded_and_at_least_one(granted, elsewhere, expected):
    assert team_size(granted, elsewhere) == expected


class FakeMachine:
    """A clock and a /proc/stat whose other processes keep ``elsewhere`` cores busy while this
    one uses ``own`` cores."""

    def __init__(self):
        self.now, self.total, self.own, self.elsewhere = 0.0, 0.0, 0.0, 0.0

    def advance(self, seconds, elsewhere, own=2.0):
        self.now += seconds
        self.own += own * seconds
        self.total += (own + elsewhere) * seconds

    def clock(self):
        return self.now

    def measure(self):
        return self.total, self.own


def omp_max_threads():
    return ctypes.CDLL("libgomp.so.1").omp_get_max_threads()


def test_the_team_follows_the_load_at_most_once_a_window_and_records_each_change():
    machine, before = FakeMachine(), omp_max_threads()
    try:
        threads._set_team(2)  # the process's team: two (a test worker's share is less)
        team = Threads(2, True, machine.clock, machine.measure)
        assert team.adapt and team.segments == [[0, 2]] and omp_max_threads() == 2
        for batch in range(40):
            # idle for 10 steps, then a core busy elsewhere for 20, then idle again
            machine.advance(0.3, 1.0 if 10 <= batch < 30 else 0.0)
            team.step()
            if batch == 20:
                assert team.current == 1 and omp_max_threads() == 1
        assert team.current == 2 and omp_max_threads() == 2
        changes = team.segments
        assert [threads for _, threads in changes] == [2, 1, 2]
        # each change comes within a window (a quarter second: a step here) of the load's
        assert 10 <= changes[1][0] <= 11 and 30 <= changes[2][0] <= 31
        team.start_epoch()
        assert team.segments == [[0, 2]] and team.batch == 0
        # a pause between steps (an evaluation, another program's turn) while other processes
        # keep both cores busy: the steps after it start a window, and the team holds while
        # they have the cores
        machine.advance(5.0, 2.0, own=0.0)
        for _ in range(10):
            machine.advance(0.3, 0.0)
            team.step()
        assert team.segments == [[0, 2]]
    finally:
        threads._set_team(before)


def test_a_team_made_after_another_starts_where_that_one_left_the_process():
    # an evaluation's predictive, made after an epoch that followed a busy process down to one
    # thread, starts on one, and follows the load from there
    machine, before = FakeMachine(), omp_max_threads()
    try:
        threads._set_team(2)
        training = Threads(2, True, machine.clock, machine.measure)
        for _ in range(3):
            machine.advance(0.3, 1.0)
            training.step()
        assert training.current == 1 and omp_max_threads() == 1
        predictive = Threads(2, True, machine.clock, machine.measure)
        assert predictive.segments == [[0, 1]] and omp_max_threads() == 1
        for _ in range(3):
            machine.advance(0.3, 0.0)
            predictive.step()
        # the first step comes a window after it was made: it already runs on two
        assert predictive.segments == [[0, 2]] and omp_max_threads() == 2
    finally:
        threads._set_team(before)


def test_a_count_the_user_set_holds_whatever_the_load():
    machine, before = FakeMachine(), omp_max_threads()
    team = Threads(2, False, machine.clock, machine.measure)
    for _ in range(20):
        machine.advance(0.5, 3.0)
        team.step()
    assert not team.adapt and team.segments == [[0, 2]] and omp_max_threads() == before
    # one granted core, or no /proc/stat: nothing to follow
    assert not Threads(1, True, machine.clock, machine.measure).adapt
    assert not Threads(2, True, machine.clock, lambda: None).adapt


def child_cpu_seconds(pid):
    """The CPU seconds process ``pid`` has used (/proc/PID/stat's utime and stime)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_busy_seconds_counts_another_process_and_this_ones_own():
    """What a busy child uses shows as used elsewhere, and this process's busy half second as
    its own (other tests may run beside: the bounds are the child's and this process's own
    counts)."""
    busy = subprocess.Popen(BUSY)
    try:
        time.sleep(0.3)
        (total, own), child, started = busy_seconds(), child_cpu_seconds(busy.pid), \
            time.monotonic()
        end = started + 0.5
        while time.monotonic() < end:  # this process busy for half the time
            pass
        time.sleep(0.5)
        (total_after, own_after), elapsed = busy_seconds(), time.monotonic() - started
        child_cores = (child_cpu_seconds(busy.pid) - child) / elapsed
    finally:
        busy.kill()
        busy.wait()
    own_cores = (own_after - own) / elapsed
    elsewhere = ((total_after - total) - (own_after - own)) / elapsed
    assert child_cores > 0.3 and 0.1 <= own_cores <= 0.6, (child_cores, own_cores)
    assert child_cores - 0.15 <= elsewhere <= os.cpu_count() - own_cores + 0.15, elsewhere


@pytest.mark.slow
@pytest.mark.skipif(cpus_granted() < 2, reason="one core: no team to follow the load")
def test_training_beside_a_busy_process_takes_the_free_core_and_records_it(tmp_path):
    """A run of 2 epochs of 20,000 images (1.3 s each idle on two cores) beside a busy process: its team drops
    to one thread within a second and its history says from which batch; with OMP_NUM_THREADS
    set it keeps that many."""
    args = ["--epochs", "2", "--train-size", "20000", "--test-samples", "0", "--seed", "0"]
    busy = subprocess.Popen(BUSY)
    try:
        # OMP_NUM_THREADS unset as in a user's shell (pytest's workers set their share)
        followed = run(TRAIN, "--out", tmp_path / "followed", *args,
                       env={"OMP_NUM_THREADS": None})
        fixed = run(TRAIN, "--out", tmp_path / "fixed", *args,
                    env={"OMP_NUM_THREADS": str(cpus_granted())})
    finally:
        busy.kill()
        busy.wait()
    assert followed.returncode == 0 and fixed.returncode == 0, followed.stderr + fixed.stderr
    granted = cpus_granted()
    history = json.loads((tmp_path / "followed" / "history.json").read_text())
    segments = [segment for record in history for segment in record["threads"]]
    # the first epoch starts on the cores granted, or, where its first window closed before
    # the first batch (the setup took longer than a window beside the load), on what it left
    assert segments[0][0] == 0 and 1 <= segments[0][1] <= granted, segments
    assert [0, granted] != segments[-1], segments
    assert all(0 <= batch < 157 and 1 <= count < granted for batch, count in segments[1:])
    assert history[-1]["test_accuracy"] > 0.9
    history = json.loads((tmp_path / "fixed" / "history.json").read_text())
    assert [record["threads"] for record in history] == [[[0, granted]]] * 2


@pytest.mark.parametrize("env, expected", [
    ({"OMP_NUM_THREADS": None}, "0"), ({"OMP_NUM_THREADS": "2"}, "unset"),
    ({"OMP_NUM_THREADS": None, "MXNET_MKLDNN_CACHE_NUM": "5"}, "5")])
def test_a_team_that_follows_has_mxnet_make_its_onednn_primitives_anew(env, expected):
    proc = run([sys.executable, "-c", "import os, gluon_bbb; "
                "print(os.environ.get('MXNET_MKLDNN_CACHE_NUM', 'unset'))"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [expected]


LENET_ON_ONE = """
import os, time
import mxnet as mx
from mxnet import nd
from gluon_bbb import Config
from gluon_bbb.learning import threads
from gluon_bbb.learning.step import TrainingStep
step = TrainingStep(Config(network="lenet", seed=0, batch_size=64).build_plan(), mx.cpu())
step.threads.adapt = False
X, y = nd.random.uniform(shape=(64, 784)), nd.one_hot(nd.arange(64) % 10, 10)
for _ in range(3):  # the convolutions' primitives made on a team of two
    step(X, y, 0.01).wait_to_read()
threads._set_team(1)
start, cpu = time.perf_counter(), sum(os.times()[:2])
for _ in range(15):
    step(X, y, 0.01).wait_to_read()
print((sum(os.times()[:2]) - cpu) / (time.perf_counter() - start))
"""


@pytest.mark.skipif(cpus_granted() < 2, reason="one core: no team of two to leave")
def test_a_convolutional_step_runs_on_the_team_of_the_moment():
    # made on two threads, a LeNet's oneDNN convolutions ran on two after the team was one
    # (1.98 cores busy where one was asked for)
    proc = run([sys.executable, "-c", LENET_ON_ONE], env={"OMP_NUM_THREADS": None})
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.split()[-1]) < 1.3

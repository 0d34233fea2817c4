"""learning/threads.py: the team follows the cores other processes leave free, measured from
/proc/stat, and a count the user sets holds; every measurement here is a fake machine's (the
real ones: bench/bench_shared.py)."""
import ctypes
import os
import sys

import mxnet as mx
import pytest

from commands import run
from gluon_bbb.learning import threads
from gluon_bbb.learning.threads import Threads, busy_seconds, team_size

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


def test_busy_seconds_reads_every_processs_time_and_this_ones(tmp_path):
    """The first line of /proc/stat: user, nice, system, idle, iowait, irq, softirq and steal
    ticks; all but idle and iowait are busy."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  4705 356 584 3699176 23060 0 277 9 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    before = sum(os.times()[:2])
    total, own = busy_seconds(str(stat))
    assert total == (4705 + 356 + 584 + 0 + 277 + 9) / os.sysconf("SC_CLK_TCK")
    assert before <= own <= sum(os.times()[:2])
    stat.write_text("intr 5\n")
    assert busy_seconds(str(stat)) is None and busy_seconds(str(tmp_path / "none")) is None


def test_a_run_records_its_team_epoch_by_epoch(mnist, monkeypatch):
    # beside a process that keeps a core busy (a fake machine's measurements), a run's
    # history says from which batch of each epoch its team was smaller
    from gluon_bbb import Config, train
    machine, before = FakeMachine(), omp_max_threads()

    def followed(cls, ctx):
        threads._set_team(2)
        return Threads(2, True, machine.clock, machine.measure)
    update, steps = threads.Threads.step, []

    def step(self):  # the first step idle, then a core busy elsewhere
        machine.advance(0.3, 1.0 if steps else 0.0)
        steps.append(1)
        update(self)
    monkeypatch.setattr(Threads, "for_process", classmethod(followed))
    monkeypatch.setattr(Threads, "step", step)
    try:
        result = train(Config(train_size=512, epochs=2, num_hidden_units=8, seed=0), mnist,
                       mx.cpu(), log=lambda line: None, progress=False)
    finally:
        threads._set_team(before)
    assert [record["threads"] for record in result.history] == [[[0, 2], [1, 1]], [[0, 1]]]


@pytest.mark.parametrize("env, expected", [
    ({"OMP_NUM_THREADS": None}, "0"), ({"OMP_NUM_THREADS": "2"}, "unset"),
    ({"OMP_NUM_THREADS": None, "MXNET_MKLDNN_CACHE_NUM": "5"}, "5")])
def test_a_team_that_follows_has_mxnet_make_its_onednn_primitives_anew(env, expected):
    proc = run([sys.executable, "-c", "import os, gluon_bbb; "
                "print(os.environ.get('MXNET_MKLDNN_CACHE_NUM', 'unset'))"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [expected]

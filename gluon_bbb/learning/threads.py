"""The OpenMP team a training run uses: every core the process is granted
(``gluon_bbb.cpus_granted``), fewer while other processes keep cores busy; ``OMP_NUM_THREADS``
where the user set it."""
import ctypes
import os
import time

import mxnet as mx

WINDOW_SECONDS = 0.25  # the steps over which the load is measured
PAUSE_SECONDS = 1.0    # a gap between steps that starts the window afresh


def busy_seconds(stat="/proc/stat"):
    """(CPU seconds every process has used, steal included, and this process's), from the
    kernel's ``stat`` file and ``os.times``; None where it cannot be read."""
    try:
        with open(stat) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, _, _, irq, softirq, steal = map(int, fields[1:9])
    own = os.times()
    return ((user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"),
            own.user + own.system)


def team_size(granted, busy_elsewhere):
    """The threads to use of ``granted`` cores while other processes keep ``busy_elsewhere``
    cores busy: the cores left, rounded, at least one."""
    return max(1, min(granted, granted - int(busy_elsewhere + 0.5)))


def _set_team(threads):
    """Make ``threads`` the team of the calling thread's parallel regions (this package's C
    kernels, oneDNN's) and of MXNet's own operators."""
    _libgomp().omp_set_num_threads(threads)
    mx.base.check_call(mx.base._LIB.MXSetNumOMPThreads(ctypes.c_int(threads)))


def _libgomp():
    return ctypes.CDLL("libgomp.so.1")  # the one MXNet has loaded


class Threads:
    """A run's team size, followed step by step: ``step()`` before each training step,
    ``start_epoch()`` before each epoch; ``segments``: the epoch's [first batch, threads]."""

    def __init__(self, granted, adapt, clock=time.monotonic, measure=busy_seconds):
        self.granted, self.current = granted, granted
        self.clock, self.measure = clock, measure
        self.adapt = adapt and granted > 1 and measure() is not None
        if self.adapt:  # from the team the process's last run left (a predictive after an epoch)
            self.current = max(1, min(granted, _libgomp().omp_get_max_threads()))
            _set_team(self.current)
        self.batch, self.segments = 0, [[0, self.current]]
        self._mark()

    @classmethod
    def for_process(cls, ctx):
        """The process's on ``ctx``: ``OMP_NUM_THREADS`` threads, followed on a CPU where the
        user did not set it (``gluon_bbb`` sets it to the cores granted)."""
        import gluon_bbb
        words = os.environ.get("OMP_NUM_THREADS", "")
        granted = int(words) if words.isdigit() and int(words) > 0 else 1
        return cls(granted, ctx.device_type == "cpu" and not gluon_bbb.THREADS_SET_BY_USER)

    def _mark(self):
        self.since = self.last_step = self.clock()
        self.counted = self.measure() if self.adapt else None

    def start_epoch(self):
        self.batch, self.segments = 0, [[0, self.current]]

    def step(self):
        if self.adapt:
            now = self.clock()
            if now - self.last_step > PAUSE_SECONDS:  # a pause: the window starts with the steps
                self._mark()
            elif now - self.since >= WINDOW_SECONDS:
                self._follow()
            self.last_step = now
        self.batch += 1

    def _follow(self):
        (total, own), now = self.counted, self.clock()
        elapsed = now - self.since
        self._mark()
        total_now, own_now = self.counted
        elsewhere = max(0.0, (total_now - total) - (own_now - own)) / elapsed
        threads = team_size(self.granted, elsewhere)
        if threads != self.current:
            _set_team(threads)
            self.current = threads
            if self.segments[-1][0] == self.batch:
                self.segments[-1][1] = threads
            else:
                self.segments.append([self.batch, threads])

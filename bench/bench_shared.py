#!/usr/bin/env python3
"""Time training on a shared machine: our steps and the PyTorch peer's, idle and beside other
load, side by side in one run; print seconds per epoch (median and range), each against its own
idle figure, and ours against PyTorch's under the same load.

Loads, each in turn for every variant, then stopped:

  idle    nothing else started
  busy1   one busy process (``python3 -c "while True: pass"``)
  busy2   two busy processes
  stream  short processes one after another, each busy for 10-200 ms (seeded), about a core
  quota   the variants started afresh in a cgroup granted one core of CPU time (as a
          container's quota is; root only, else the row says why not)

Variants, each in a process of its own with the environment this script was started in:
``ours`` (the default 2x400 step, native backend), ``ours-fixed`` (the same with
``OMP_NUM_THREADS`` set to the cores granted: every step on that many threads, whatever else
runs), ``ours-1`` (the same on one thread: the least a team that follows the free cores can
take), ``ours-ops`` (the same on MXNet's operators), ``ours-lenet`` (the LeNet, native) and
``lenet-1`` (it on one thread), ``pytorch-sample`` and ``pytorch-lenet`` (``pytorch_peer.py``,
where PyTorch is installed for ``--peer-python``). A sample is
``--steps`` steps scaled to an epoch's 469; under each load every variant takes ``--samples``
turns in order, each after a quarter of a second idle and one untimed step.

    python bench/bench_shared.py [--steps 117] [--samples 3] [--loads idle,busy1,...]
                                 [--peer-python PYTHON] [--data-dir DIR]
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import threading

_ENVIRONMENT = dict(os.environ)  # before bench_train imports gluon_bbb, which sets its defaults
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_train  # noqa: E402
from bench_train import (STEPS_PER_EPOCH, WARMUP, ChildProcess, serving,  # noqa: E402
                         settled)

# (name, the child that runs it, the variables its environment adds)
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
VARIANTS = (("ours", "ours", {}),
            ("ours-fixed", "ours", {"OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}),
            ("ours-1", "ours", ONE_THREAD), ("ours-ops", "ours-ops", {}),
            ("ours-lenet", "ours-lenet", {}), ("lenet-1", "ours-lenet", ONE_THREAD),
            ("pytorch-sample", "pytorch-sample", {}), ("pytorch-lenet", "pytorch-lenet", {}))
LOADS = ("idle", "busy1", "busy2", "stream", "quota")
BUSY = "while True: pass"
# a short process: busy until the time its argument gives
SHORT = "import sys, time\nend = time.perf_counter() + float(sys.argv[1])\n" \
        "while time.perf_counter() < end: pass"


class Load:
    """The processes of one load, started by ``start`` and ended by ``stop``."""

    def __init__(self, name):
        self.name, self.processes, self.thread = name, [], None
        self.stopping = threading.Event()

    def start(self):
        busy = {"busy1": 1, "busy2": 2}.get(self.name, 0)
        self.processes = [subprocess.Popen([sys.executable, "-c", BUSY], env=_ENVIRONMENT)
                          for _ in range(busy)]
        if self.name == "stream":
            self.thread = threading.Thread(target=self._stream, daemon=True)
            self.thread.start()

    def _stream(self):
        draw = random.Random(0)
        while not self.stopping.is_set():
            subprocess.run([sys.executable, "-S", "-c", SHORT, str(draw.uniform(0.01, 0.2))],
                           env=_ENVIRONMENT)

    def stop(self):
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        for process in self.processes:
            process.kill()
            process.wait()


class Quota:
    """A cgroup granting one core of CPU time (v2's ``cpu.max``, else v1's ``cpu`` controller),
    which a child joins before it runs; ``Quota.make`` returns None and the reason where this
    process cannot make one."""

    def __init__(self, directory):
        self.directory = directory

    @classmethod
    def make(cls):
        name = "gluon-bbb-bench-%d" % os.getpid()
        for parent, marker, limits in (
                ("/sys/fs/cgroup", "cgroup.subtree_control", {"cpu.max": "100000 100000"}),
                ("/sys/fs/cgroup/cpu", "cpu.cfs_quota_us", {"cpu.cfs_period_us": "100000",
                                                            "cpu.cfs_quota_us": "100000"})):
            try:  # a cgroup file system with the CPU controller, where a cgroup may be made
                with open(os.path.join(parent, marker)) as f:
                    if marker == "cgroup.subtree_control" and "cpu" not in f.read().split():
                        continue
                directory = os.path.join(parent, name)
                os.mkdir(directory)
            except OSError:
                continue
            try:
                for limit, value in limits.items():
                    with open(os.path.join(directory, limit), "w") as f:
                        f.write(value)
                return cls(directory), None
            except OSError:
                os.rmdir(directory)
        return None, "no cgroup with a CPU controller this process may make"

    def join(self):
        """Move the calling process into the cgroup (a child's ``preexec_fn``)."""
        with open(os.path.join(self.directory, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def remove(self):
        os.rmdir(self.directory)


def start_variants(args, names, preexec_fn=None):
    """{name: ChildProcess} of those of ``names`` that started, {name: reason} of the others.
    ``ours-fixed`` is given ``OMP_NUM_THREADS``, the cores this process is granted, so that
    every step runs on that many threads."""
    started, missing = {}, {}
    for name, child, extra in VARIANTS:
        if name not in names:
            continue
        cmd = serving(child, args.data_dir, WARMUP + args.steps)
        if child.startswith("pytorch-"):
            cmd[0] = args.peer_python
        env = dict(_ENVIRONMENT, **extra)
        timer, reason = ChildProcess.start(cmd, env, preexec_fn)
        if timer is None:
            missing[name] = reason
        else:
            timer.time(0, WARMUP)
            started[name] = timer
    return started, missing


def time_under(load, timers, args):
    """{name: [seconds per epoch of each sample]} under ``load``."""
    samples = {name: [] for name in timers}
    load.start()
    try:
        for _ in range(args.samples):
            for name, timer in timers.items():
                settled(timer, WARMUP - 1)
                samples[name].append(timer.time(WARMUP, args.steps) * STEPS_PER_EPOCH
                                     / args.steps)
    finally:
        load.stop()
    return samples


def isa():
    """lscpu's model name and the widest AVX it lists."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "lscpu not found"
    model = next((line.split(":", 1)[1].strip() for line in out.splitlines()
                  if line.startswith("Model name")), "?")
    flags = out.split()
    widest = "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "no avx2"
    return "%s, %s, %d cores" % (model, widest, os.cpu_count())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=117, help="steps a sample")
    parser.add_argument("--samples", type=int, default=3, help="samples a variant under a load")
    parser.add_argument("--loads", default=",".join(LOADS))
    parser.add_argument("--peer-python", default=sys.executable,
                        help="the Python that runs pytorch_peer.py (one with PyTorch)")
    parser.add_argument("--data-dir")
    bench_train.add_settle_flag(parser)
    args = parser.parse_args()
    bench_train.settle_for(args)
    loads = args.loads.split(",")
    if not set(loads) <= set(LOADS) or "idle" not in loads:
        parser.error("--loads takes idle and any of %s" % ", ".join(LOADS[1:]))
    if not 1 <= args.steps <= STEPS_PER_EPOCH - 1 - WARMUP:
        parser.error("--steps must be between 1 and %d" % (STEPS_PER_EPOCH - 1 - WARMUP))
    if not 1 <= args.samples <= 100:
        parser.error("--samples must be between 1 and 100")
    timers, missing = start_variants(args, [name for name, _, _ in VARIANTS])
    versions = {name: timer.version for name, timer in timers.items()
                if name.startswith("pytorch-")}
    print("%s; %d steps a sample, %d samples; PyTorch: %s" % (
        isa(), args.steps, args.samples, next(iter(versions.values()), "not measured (%s)"
                                              % missing.get("pytorch-sample"))))
    results = {}
    try:
        for name in loads:
            if name == "quota":
                continue
            results[name] = time_under(Load(name), timers, args)
    finally:
        for timer in timers.values():
            timer.close()
    if "quota" in loads:
        quota, reason = Quota.make()
        if quota is None:
            print("quota: not measured (%s)" % reason)
        else:
            try:
                inside, _ = start_variants(args, list(timers), quota.join)
                try:
                    results["quota"] = time_under(Load("quota"), inside, args)
                finally:
                    for timer in inside.values():
                        timer.close()
            finally:
                quota.remove()
    report(results)


def report(results):
    """A row per load and variant, then ours against PyTorch's under each load."""
    idle = {name: statistics.median(seconds) for name, seconds in results["idle"].items()}
    print("%-7s %-15s %8s %17s %10s %14s" % ("load", "variant", "s/epoch", "[min, max]",
                                             "x idle", "worst/median"))
    for load, samples in results.items():
        for name, seconds in samples.items():
            median = statistics.median(seconds)
            print("%-7s %-15s %8.2f %17s %10.2f %14.2f" % (
                load, name, median, "[%.2f, %.2f]" % (min(seconds), max(seconds)),
                median / idle[name], max(seconds) / median))
    for load, samples in results.items():
        medians = {name: statistics.median(seconds) for name, seconds in samples.items()}
        pairs = [("ours/pytorch", "ours", "pytorch-sample"),
                 ("ours-fixed/pytorch", "ours-fixed", "pytorch-sample"),
                 ("lenet/pytorch-lenet", "ours-lenet", "pytorch-lenet"),
                 ("ours/ours-ops", "ours", "ours-ops")]
        print("%s: %s" % (load, ", ".join("%s = %.2f" % (label, medians[a] / medians[b])
                                          for label, a, b in pairs
                                          if a in medians and b in medians)))
        # one thread under this load against the team's idle epoch: the best a team that
        # follows the free cores can do where one core is left
        print("%s: %s" % (load, ", ".join("%s x %s's idle = %.2f" % (a, b, medians[a] / idle[b])
                                          for a, b in (("ours-1", "ours"),
                                                       ("lenet-1", "ours-lenet"))
                                          if a in medians and b in idle)))


if __name__ == "__main__":
    from gluon_bbb.commands.cli import run_main
    sys.exit(run_main(lambda argv: main()))

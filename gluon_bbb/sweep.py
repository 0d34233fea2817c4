"""Sweeps: seeds x settings from one command, each trial an ordinary run directory, on Dask.

    python -m gluon_bbb.sweep SPEC --out runs/sweep [--workers N] [--threads-per-trial T]
    python -m gluon_bbb.sweep SPEC --out runs/sweep --scheduler tcp://HOST:8786

SPEC is a JSON file: ``base``, the flags of ``train_mnist.py`` every trial takes (a preset
among them), ``grid``, a list of values for each flag that varies (the seed among them), and
optionally ``proportions``, the pruning table's (default 0 0.5 0.75 0.95 0.98)::

    {"base": {"preset": "paper-2x400", "epochs": 20, "lr-decay-every": 15},
     "grid": {"prior": ["scale-mixture", "gaussian"], "seed": [0, 1, 2]}}

Each combination of the grid is a trial: a run directory ``--out/NAME`` trained by
``train_mnist.py`` in a process of its own (``OMP_NUM_THREADS`` = its threads), then pruned by
``prune.py``; ``trial.json`` there holds its figures. A finished trial is skipped and a partial
one resumed (``--resume``), so rerunning an interrupted sweep trains nothing twice. A worker
that dies has its trial rerun elsewhere by Dask, resuming from the last completed epoch (the
trial's processes end with the worker that started them); a trial that fails for a reason of its
own is reported with its one-line error and does not stop the others. A trial holds a lock on
its directory while it runs. ``sweep.json``, ``sweep.md`` (mean and standard deviation over
seeds, per setting) and ``sweep.png`` (the pruning curves with error bars) go to ``--out``.

This module, and everything a worker runs, imports no MXNet: MXNet is imported only in the
trials' processes (fork+exec), where OpenMP keeps all its threads.
"""
import contextlib
import errno
import fcntl
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time

from .cli import ArgumentParser, run_main
from .errors import ConfigError, GluonBBBError
from .files import save_figure, write_json, write_text
from .rundir import CHECKPOINT_FILE, HISTORY_FILE, LOCK_FILE, check_output_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRIAL_FILE = "trial.json"          # a finished trial's figures
TRAINED_FILE = "trained.json"      # training ended (its command's status was 0)
TRIAL_LOCK = ".trial.lock"         # held by the process running the trial
TRIAL_LOG = "trial.log"            # one line per command a trial ran
DEFAULT_PROPORTIONS = (0.0, 0.5, 0.75, 0.95, 0.98)
RESERVED_FLAGS = ("out", "resume")
# A dead worker's trial process may still be ending (SIGTERM) when its rerun starts: wait this
# long for the run directory's lock.
LOCK_WAIT_SECONDS = 120.0


class SpecError(GluonBBBError):
    """A sweep spec that is not one."""


def load_spec(path):
    """The spec in the JSON file ``path``, checked: ``{"base": {...}, "grid": {...},
    "proportions": [...]}``, flags without their dashes."""
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as exc:
        raise SpecError("cannot read sweep spec %s: %s", path, exc) from None
    if not isinstance(spec, dict) or set(spec) - {"base", "grid", "proportions"}:
        raise SpecError("%s: a sweep spec is a JSON object with base, grid and, optionally, "
                        "proportions", path)
    base, grid = spec.get("base", {}), spec.get("grid", {})
    if not isinstance(base, dict) or not isinstance(grid, dict) or not grid:
        raise SpecError("%s: base must be an object of flags and grid a non-empty object of "
                        "lists", path)
    for name, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SpecError("%s: grid %s must be a non-empty list", path, name)
    for name in list(base) + list(grid):
        if _flag_name(name) in RESERVED_FLAGS:
            raise SpecError("%s: %s is the sweep's to set", path, name)
    proportions = spec.get("proportions", list(DEFAULT_PROPORTIONS))
    if not (isinstance(proportions, list) and proportions and all(
            isinstance(p, (int, float)) and 0 <= p <= 1 for p in proportions)):
        raise SpecError("%s: proportions must be a list of numbers in [0, 1]", path)
    return {"base": base, "grid": grid, "proportions": proportions}


def _flag_name(name):
    return str(name).lstrip("-").replace("_", "-")


def _flag_args(values):
    """``{flag: value}`` as command-line arguments: ``--flag value``, ``--flag`` for true."""
    args = []
    for name, value in values.items():
        flag = "--" + _flag_name(name)
        if value is True:
            args.append(flag)
        elif value is not False and value is not None:  # 0 == False, but --seed 0 is a seed
            args += [flag, str(value)]
    return args


def trials(spec):
    """One dict per combination of the grid: ``name`` (its directory), ``setting`` (the grid's
    values but the seed: trials that differ only in their seed share it), ``seed`` and
    ``train_args``."""
    names = list(spec["grid"])
    found = []
    for values in itertools.product(*(spec["grid"][name] for name in names)):
        chosen = dict(zip(names, values))
        seed = chosen.get("seed")
        setting = ", ".join("%s=%s" % (_flag_name(k), v) for k, v in chosen.items()
                            if _flag_name(k) != "seed") or "all"
        name = "_".join("%s-%s" % (_flag_name(k), v) for k, v in chosen.items())
        found.append({"name": re.sub(r"[^A-Za-z0-9._=-]+", "-", name), "setting": setting,
                      "seed": seed, "train_args": _flag_args(dict(spec["base"], **chosen))})
    return found


# What a worker runs. It imports nothing of MXNet and keeps no state: everything it knows of a
# trial is in the trial's directory, so any worker can take a trial up where another left it.

def run_trial(trial_dir, train_args, proportions, threads, python=sys.executable):
    """Train, resume or skip the trial in ``trial_dir``, prune it, and return its record:
    ``status`` (``done``, ``skipped`` or ``failed``), ``error`` (one line) and ``figures``."""
    os.makedirs(trial_dir, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    with _trial_lock(trial_dir):
        result_path = os.path.join(trial_dir, TRIAL_FILE)
        if os.path.exists(result_path):
            with open(result_path) as f:
                return dict(json.load(f), status="skipped")
        if not os.path.exists(os.path.join(trial_dir, TRAINED_FILE)):
            _wait_for_run_lock(trial_dir)
            resume = os.path.exists(os.path.join(trial_dir, CHECKPOINT_FILE))
            command = ([os.path.join(ROOT, "train_mnist.py")] + list(train_args)
                       + ["--out", trial_dir] + (["--resume"] if resume else []))
            error = _run(python, command, env, trial_dir, "resume" if resume else "train")
            if error:
                return {"status": "failed", "error": error}
            write_json(os.path.join(trial_dir, TRAINED_FILE), {"command": command})
        command = [os.path.join(ROOT, "prune.py"), "--checkpoint", trial_dir,
                   "--proportions"] + ["%g" % p for p in proportions]
        error = _run(python, command, env, trial_dir, "prune")
        if error:
            return {"status": "failed", "error": error}
        record = {"status": "done", "figures": trial_figures(trial_dir)}
        write_json(result_path, record)
        return record


# Run in the child between fork and exec of the command: end the command with its parent
# (SIGTERM, which the commands take as SIGINT: they keep their completed epochs), and end now
# if that parent has already gone.
_DIE_WITH_PARENT = ("import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 15); "
                    "os.getppid() == int(sys.argv[1]) or sys.exit(143); "
                    "os.execv(sys.executable, [sys.executable] + sys.argv[2:])")


def _run(python, command, env, trial_dir, what):
    """Run ``python command`` (ending with this process); None, or its one-line error."""
    with open(os.path.join(trial_dir, TRIAL_LOG), "a") as log:
        log.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), what))
    wrapper = [python, "-c", _DIE_WITH_PARENT, str(os.getpid())] if sys.platform.startswith(
        "linux") else [python]
    proc = subprocess.run(wrapper + command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else "%s exited with status %d" % (what, proc.returncode)


@contextlib.contextmanager
def _trial_lock(trial_dir):
    """Hold the trial's lock, waiting for another process that holds it."""
    with open(os.path.join(trial_dir, TRIAL_LOCK), "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        yield


def _wait_for_run_lock(trial_dir):
    """Wait until no process holds the run directory's own lock (a dead worker's trial
    process ending on SIGTERM), for at most LOCK_WAIT_SECONDS."""
    path = os.path.join(trial_dir, LOCK_FILE)
    if not os.path.exists(path):
        return
    deadline = time.time() + LOCK_WAIT_SECONDS
    with open(path, "a") as lock_file:
        while True:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(lock_file, fcntl.LOCK_UN)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.time() > deadline:
                    return  # the command itself then says who holds it
                time.sleep(0.5)


def trial_figures(trial_dir):
    """A finished trial's figures from its files: the test error at each pruned proportion,
    the epochs trained, and the best validation epoch's test error where there is one."""
    with open(os.path.join(trial_dir, "pruning.json")) as f:
        pruning = json.load(f)
    with open(os.path.join(trial_dir, HISTORY_FILE)) as f:
        history = json.load(f)
    figures = {"epochs": len(history),
               "test_error": {"%g" % row["proportion"]: row["test_error"]
                              for row in pruning["rows"]}}
    validated = [r for r in history if "validation_accuracy" in r]
    if validated:
        best = max(validated, key=lambda r: r["validation_accuracy"])
        figures.update(best_validation_epoch=best["epoch"],
                       best_validation_test_error=1.0 - best["test_accuracy"])
    return figures


# The sweep's own process.

def summarize(records, proportions):
    """Per setting, in the order first seen: n, and the mean and sample standard deviation over
    its finished trials of each test error (pruned proportions, best validation epoch)."""
    settings = {}
    for record in records:
        if record.get("figures"):
            settings.setdefault(record["setting"], []).append(record["figures"])
    table = []
    for setting, figures in settings.items():
        row = {"setting": setting, "n": len(figures), "test_error": {}}
        for p in ["%g" % p for p in proportions]:
            row["test_error"][p] = _mean_sd([f["test_error"][p] for f in figures])
        best = [f["best_validation_test_error"] for f in figures
                if "best_validation_test_error" in f]
        if best:
            row["best_validation_test_error"] = _mean_sd(best)
        table.append(row)
    return table


def _mean_sd(values):
    mean = sum(values) / len(values)
    sd = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
          if len(values) > 1 else 0.0)
    return {"mean": mean, "sd": sd}


def markdown_table(table, proportions):
    """The summary as a Markdown table of test errors in percent, mean +- sd over seeds."""
    with_best = any("best_validation_test_error" in row for row in table)
    header = (["setting", "n"] + ["%g%% removed" % (100 * p) for p in proportions]
              + (["best validation epoch"] if with_best else []))
    lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(header) - 2)]
    cell = lambda stat: "%.2f +- %.2f" % (100 * stat["mean"], 100 * stat["sd"])
    for row in table:
        cells = [row["setting"], str(row["n"])] + [cell(row["test_error"]["%g" % p])
                                                   for p in proportions]
        if with_best:
            cells.append(cell(row["best_validation_test_error"])
                         if "best_validation_test_error" in row else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_sweep(table, proportions, path):
    """Test error against the proportion removed, one curve with error bars per setting."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for row in table:
        stats = [row["test_error"]["%g" % p] for p in proportions]
        ax.errorbar([100 * p for p in proportions], [100 * s["mean"] for s in stats],
                    yerr=[100 * s["sd"] for s in stats], marker="o", capsize=3,
                    label="%s (n=%d)" % (row["setting"], row["n"]))
    ax.set_xlabel("parameters removed by signal-to-noise ratio (%)")
    ax.set_ylabel("test error (%), mean +- sd over seeds")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def run_sweep(spec, out_dir, client, threads, log=print):
    """Run every trial of ``spec`` under ``out_dir`` on the Dask ``client``; write sweep.json,
    sweep.md and sweep.png there; return the records."""
    from distributed import as_completed
    all_trials = trials(spec)
    futures = {}
    for trial in all_trials:
        future = client.submit(run_trial, os.path.join(os.path.abspath(out_dir), trial["name"]),
                               trial["train_args"], spec["proportions"], threads,
                               key="trial-%s-%s" % (trial["name"], os.urandom(4).hex()),
                               pure=False)
        futures[future] = trial
    records, done = [], 0
    for future in as_completed(futures):
        trial = futures[future]
        try:
            result = future.result()
        except Exception as exc:  # the worker died too often, or the trial raised
            result = {"status": "failed", "error": "%s: %s" % (type(exc).__name__, exc)}
        records.append(dict(trial, **result))
        done += 1
        # assigned to a worker is not yet running: a worker runs one trial per thread
        processing = {key for keys in client.processing().values() for key in keys}
        running = min(sum(client.nthreads().values()),
                      sum(1 for f in futures if not f.done() and f.key in processing))
        log("%s %s: %s  [done %d, running %d, waiting %d]" % (
            result["status"], trial["name"], _describe(result), done, running,
            len(futures) - done - running))
    records.sort(key=lambda r: [t["name"] for t in all_trials].index(r["name"]))
    table = summarize(records, spec["proportions"])
    write_json(os.path.join(out_dir, "sweep.json"), {"spec": spec, "trials": records,
                                                     "summary": table})
    text = markdown_table(table, spec["proportions"])
    write_text(os.path.join(out_dir, "sweep.md"), text + "\n")
    if table:
        plot_sweep(table, spec["proportions"], os.path.join(out_dir, "sweep.png"))
    log("\n" + text)
    return records


def _describe(result):
    if result["status"] == "failed":
        return result["error"]
    errors = result["figures"]["test_error"]
    return "test error %s" % ", ".join("%.2f%% at %s" % (100 * e, p) for p, e in errors.items())


def build_parser():
    parser = ArgumentParser(prog=PROG, description="Run seeds x settings of train_mnist.py on "
                            "Dask, each trial pruned, and tabulate mean and sd over seeds.")
    parser.add_argument("spec", help="JSON file: {\"base\": {flags}, \"grid\": {flag: [values]}, "
                        "\"proportions\": [...]}")
    parser.add_argument("--out", required=True, help="directory of the trials' run "
                        "directories and the sweep's results")
    parser.add_argument("--scheduler", help="address of a running Dask scheduler "
                        "(tcp://HOST:8786); default: a local cluster started here")
    parser.add_argument("--workers", type=int, help="local cluster: trials at a time (default: "
                        "the cores divided by --threads-per-trial)")
    parser.add_argument("--threads-per-trial", type=int, default=1,
                        help="OpenMP threads of each trial's process (default 1)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    spec = load_spec(args.spec)
    for name in ("threads_per_trial", "workers"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ConfigError(name, getattr(args, name), "an integer >= 1")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = args.workers or max(1, cores // args.threads_per_trial)
    check_output_dir(args.out)
    import logging
    from distributed import Client, LocalCluster
    with contextlib.ExitStack() as stack:
        if args.scheduler:
            client = stack.enter_context(Client(args.scheduler, timeout="30s"))
            where = "the cluster at %s" % args.scheduler
        else:
            cluster = stack.enter_context(LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True,
                dashboard_address=None, silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
            where = "a local cluster of %d workers" % workers
        print("sweep: %d trials on %s, %d thread%s each, into %s" % (
            len(trials(spec)), where, args.threads_per_trial,
            "" if args.threads_per_trial == 1 else "s", args.out), flush=True)
        records = run_sweep(spec, args.out, client, args.threads_per_trial,
                            log=lambda line: print(line, flush=True))
    failed = [r for r in records if r["status"] == "failed"]
    print("wrote sweep.json, sweep.md%s to %s" % (", sweep.png" if len(failed) < len(records)
                                                  else "", args.out))
    return 1 if failed else 0


PROG = "python -m gluon_bbb.sweep"

if __name__ == "__main__":
    sys.exit(run_main(main, prog=PROG))

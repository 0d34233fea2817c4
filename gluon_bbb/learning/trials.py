"""Sweeps: seeds x settings, each trial an ordinary run directory trained and pruned by the
package's own commands in a process of its own, on Dask. This module holds the spec, each
trial's identity, what a worker runs for one trial and the summary over seeds; the command is
``gluon_bbb.commands.sweep``."""
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

from ..commands.cli import FlagError, flag_for
from ..errors import CheckpointError, ConfigError, GluonBBBError, is_real
from .. import _ENGINE_CHOSEN_HERE, jsonfile, outputs
from ..outputs import write_json, write_text
from ..plots import plot_sweep
from .rundir import (CHECKPOINT_FILE, CONFIG_FILE, LOCK_FILE, UNCERTAINTY_FILE,
                     RunDirectory, best_validation_epoch)

TRAIN_MODULE, PRUNE_MODULE = "gluon_bbb.commands.train", "gluon_bbb.commands.prune"
TRIAL_FILE = "trial.json"          # a finished trial's flags, proportions and figures
TRIAL_LOCK = ".trial.lock"         # held by the process running the trial
TRIAL_LOG = "trial.log"            # one line per command a trial ran
# what the sweep writes into its directory, beside the trials' run directories
SWEEP_FILES = {"sweep.json": outputs.JSON, "sweep.md": outputs.TEXT, "sweep.png": outputs.PNG}
DEFAULT_PROPORTIONS = (0.0, 0.5, 0.75, 0.95, 0.98)
RESERVED_FLAGS = ("out", "resume")
# A dead worker's trial process may still be ending (SIGTERM) when its rerun starts: wait this
# long for the run directory's lock.
LOCK_WAIT_SECONDS = 120.0
# a failed command's cause, at most this long
CAUSE_LENGTH = 400
# the most trials one sweep plans: each is a process, a directory and a Dask task
MAX_TRIALS = 10000
# a spec's size: flags and lists of values for that many trials
MAX_SPEC_BYTES = 1 << 20


class SpecError(GluonBBBError):
    """A sweep spec that is not one, or that does not fit the trials already in --out."""


def load_spec(path):
    """The spec in the JSON file ``path``, checked: ``{"base": {...}, "grid": {...},
    "proportions": [...]}``, flags without their dashes."""
    problem = outputs.path_problem(path)
    if problem:
        raise SpecError("cannot read sweep spec %s: it is %s, not a file", path, problem)
    spec = jsonfile.read(path, SpecError, MAX_SPEC_BYTES, "sweep spec")
    if not isinstance(spec, dict) or set(spec) - {"base", "grid", "proportions"}:
        raise SpecError("%s: a sweep spec is a JSON object with base, grid and, optionally, "
                        "proportions", path)
    if "base" not in spec:
        raise SpecError("%s: a sweep spec names its base, the flags every trial takes ({{}} for "
                        "the training command's defaults)", path)
    base, grid = spec["base"], spec.get("grid", {})
    if not isinstance(base, dict) or not isinstance(grid, dict) or not grid:
        raise SpecError("%s: base must be an object of flags and grid a non-empty object of "
                        "lists", path)
    for name, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SpecError("%s: grid %s must be a non-empty list", path, name)
    try:  # a flag's value is a string, a number or a switch, never a list or an object
        for where, flags in (("base", base), ("grid", grid)):
            for name, value in flags.items():
                for i, item in enumerate(value if where == "grid" else [value]):
                    jsonfile.scalar(item, "%s %s%s" % (where, name,
                                                       "[%d]" % i if where == "grid" else ""))
    except ConfigError as exc:
        raise SpecError("%s: %s", path, exc.describe()) from None
    for where, flags in (("base", base), ("grid", grid)):
        spelt = {}
        for name in flags:
            if _flag_name(name) in RESERVED_FLAGS:
                raise SpecError("%s: %s is the sweep's to set", path, name)
            if _flag_name(name) in spelt:
                raise SpecError("%s: %s names --%s twice (%s and %s)", path, where,
                                _flag_name(name), spelt[_flag_name(name)], name)
            spelt[_flag_name(name)] = name
    proportions = spec.get("proportions", list(DEFAULT_PROPORTIONS))
    if not (isinstance(proportions, list) and proportions and all(
            is_real(p) and 0 <= p <= 1 for p in proportions)):
        raise SpecError("%s: proportions must be a list of numbers in [0, 1]", path)
    if len({"%g" % p for p in proportions}) < len(proportions):
        raise SpecError("%s: proportions must differ from each other", path)
    checked = {"base": base, "grid": grid, "proportions": proportions}
    count = trial_count(checked)
    if count > MAX_TRIALS:
        raise SpecError("%s: the grid gives %d trials, more than the %d a sweep runs: split it "
                        "into several sweeps", path, count, MAX_TRIALS)
    return checked


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


def trial_count(spec):
    """How many trials the grid of ``spec`` gives (the product of its lists' lengths)."""
    return math.prod(len(values) for values in spec["grid"].values())


def trials(spec, where="the spec"):
    """One dict per combination of the grid: ``name`` (its directory), ``setting`` (the grid's
    values but the seed: trials that differ only in their seed share it), ``seed`` and
    ``train_args``."""
    return plan(spec, where)[0]


def plan(spec, where="the spec"):
    """``(trials, configs)``: ``trials(spec)`` and the ``Config`` each trains, by name."""
    from ..commands.train import build_parser
    parser = build_parser(raise_errors=True)
    names = list(spec["grid"])
    found, configs, by_config, by_name = [], {}, {}, {}
    for values in itertools.product(*(spec["grid"][name] for name in names)):
        chosen = dict(zip(names, values))
        seed = next((v for k, v in chosen.items() if _flag_name(k) == "seed"), None)
        setting = ", ".join("%s=%s" % (_flag_name(k), v) for k, v in chosen.items()
                            if _flag_name(k) != "seed") or "all"
        name = "_".join("%s-%s" % (_flag_name(k), v) for k, v in chosen.items())
        trial = {"name": re.sub(r"[^A-Za-z0-9._=+-]+", "-", name), "setting": setting,
                 "seed": seed, "train_args": _flag_args(dict(spec["base"], **chosen))}
        config = trial_config(trial["train_args"], where, trial["name"], parser)
        key = json.dumps(config.to_dict(), sort_keys=True)
        other = by_config.get(key) or by_name.get(trial["name"])
        if other:
            raise SpecError("%s: the grid gives one trial twice: %s and %s %s", where,
                            _described(other), _described(trial),
                            "train the same network (their values are equal)"
                            if key in by_config else "share the directory %s" % trial["name"])
        configs[trial["name"]], by_config[key], by_name[trial["name"]] = config, trial, trial
        found.append(trial)
    return found, configs


def _described(trial):
    return "%s%s" % (trial["setting"] if trial["setting"] != "all" else "",
                     "" if trial["seed"] is None else
                     "%sseed=%r" % (", " if trial["setting"] != "all" else "", trial["seed"]))


def trial_config(train_args, where="the spec", name="a trial", parser=None):
    """The ``Config`` the training command trains from ``train_args`` (read by its own parser,
    ``parser`` where one is at hand, without MXNet); SpecError saying what it refuses."""
    from ..commands.train import build_parser, config_from_args
    try:
        parser = parser or build_parser(raise_errors=True)
        return config_from_args(parser.parse_args(list(train_args)))
    except (FlagError, ConfigError) as exc:
        raise SpecError("%s: trial %s: %s", where, name, exc.describe(flag_for)) from None


def check_against_out(planned, out_dir):
    """SpecError where a trial's directory in ``out_dir`` holds a run trained with other
    training flags than the spec gives that trial (a changed spec rerun into the same --out),
    naming the flags and both values."""
    found, configs = planned
    for trial in found:
        run = RunDirectory(os.path.join(out_dir, trial["name"]))
        if not os.path.exists(run.file(CONFIG_FILE)):
            continue
        try:
            saved = run.read_config()
        except CheckpointError as exc:
            raise SpecError("%s", exc.describe(flag_for)) from None
        saved, wanted = saved.to_flat(), configs[trial["name"]].to_flat()
        differing = [(name, saved.get(name), value) for name, value in wanted.items()
                     if saved.get(name) != value and not (name == "seed" and value is None)]
        if differing:
            raise SpecError(
                "%s holds a trial trained with %s; this spec gives it %s: a changed spec needs "
                "another {out_dir} (or remove that trial's directory)", run.path,
                ", ".join("%s %s" % (flag_for(name), _value(old)) for name, old, _ in differing),
                ", ".join("%s %s" % (flag_for(name), _value(new)) for name, _, new in differing))


def _value(value):
    return str(value).replace("_", "-") if isinstance(value, str) else repr(value)


# What the sweep reads back of a trial's files
PRUNING_SCHEMA = {"rows": jsonfile.list_of(jsonfile.record(
    {"proportion": jsonfile.proportion, "test_error": jsonfile.proportion}), 1)}
REPORT_SCHEMA = {"in_distribution": jsonfile.optional(jsonfile.record(
    {"accuracy": jsonfile.optional(jsonfile.proportion),
     "ece": jsonfile.optional(jsonfile.proportion)}))}
TRIAL_SCHEMA = {"status": jsonfile.one_of("done"),
                "train_args": jsonfile.list_of(jsonfile.text),
                "proportions": jsonfile.list_of(jsonfile.text, 1),
                "figures": jsonfile.record(dict(
                    epochs=jsonfile.whole(), seconds=jsonfile.number(0),
                    test_error=jsonfile.mapping_of(jsonfile.proportion),
                    best_validation_epoch=jsonfile.optional(jsonfile.whole(1)),
                    **{name: jsonfile.optional(jsonfile.proportion) for name in (
                        "best_validation_test_error", "predictive_test_error",
                        "predictive_ece")}))}


# What a worker runs. It imports nothing of MXNet and keeps no state: everything it knows of a
# trial is in the trial's directory, so any worker can take a trial up where another left it.

# a trial record's status, as trial.json and sweep.json keep it
DONE, SKIPPED, FAILED = "done", "skipped", "failed"


def failed(record):
    """Whether a trial's record says it failed."""
    return record["status"] == FAILED


# the variables that set a process's threads (OpenMP's, the BLAS libraries'), which a Dask
# worker's nanny sets to 1 in the environment a trial inherits
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def trial_environment(environ, threads):
    """The environment a trial's commands run in: ``environ`` with every variable of
    THREAD_VARIABLES set to ``threads``, without the MXNet engine this package chose for its
    own process (the trial's command chooses by its --ctx)."""
    env = dict(environ, **{name: str(threads) for name in THREAD_VARIABLES})
    if _ENGINE_CHOSEN_HERE:
        env.pop("MXNET_ENGINE_TYPE", None)
    return env


def run_trial(trial_dir, train_args, proportions, threads, python=sys.executable):
    """Train, resume or skip the trial in ``trial_dir``, prune it, and return its record:
    ``status`` (``done``, ``skipped`` or ``failed``), ``error`` (one line) and ``figures``."""
    outputs.make_directory(trial_dir, "out")
    env = trial_environment(os.environ, threads)
    proportions = ["%g" % p for p in proportions]
    with _trial_lock(trial_dir):
        result_path = os.path.join(trial_dir, TRIAL_FILE)
        finished = _read_record(result_path)
        if finished and finished.get("proportions") == proportions:
            return dict(finished, status=SKIPPED)
        if not finished:
            _wait_for_run_lock(trial_dir)
            # --resume on a run whose checkpoint holds all its epochs trains nothing and
            # draws its reports again: training that ended before its reports, or before
            # this process knew it had, is not trained twice
            resume = os.path.exists(os.path.join(trial_dir, CHECKPOINT_FILE))
            error = _run(python, [TRAIN_MODULE] + list(train_args) + ["--out", trial_dir]
                         + (["--resume"] if resume else []), env, trial_dir,
                         "resume" if resume else "train")
            if error:
                return {"status": FAILED, "error": error}
        error = _run(python, [PRUNE_MODULE, trial_dir, "--proportions"]
                     + proportions, env, trial_dir, "prune")
        if error:
            return {"status": FAILED, "error": error}
        record = {"status": DONE, "train_args": list(train_args), "proportions": proportions,
                  "figures": trial_figures(trial_dir)}
        write_json(result_path, record)
        return record


def _read_record(path):
    """A finished trial's record (``TRIAL_FILE``) as its schema takes it, or None where the
    trial has none; SpecError naming the file and the field where it is not one."""
    if not os.path.lexists(path):
        return None
    return jsonfile.check(jsonfile.read(path, SpecError), TRIAL_SCHEMA, path, SpecError,
                          "object of a trial's record")


# Run in the child between fork and exec of the command: end the command with its parent
# (SIGTERM, which the commands take as SIGINT: they keep their completed epochs), and end now
# if that parent has already gone.
_DIE_WITH_PARENT = ("import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 15); "
                    "os.getppid() == int(sys.argv[1]) or sys.exit(143); "
                    "os.execv(sys.executable, [sys.executable] + sys.argv[2:])")


def _run(python, module_args, env, trial_dir, what):
    """Run ``python -m MODULE ARGS`` (ending with this process); None, or its failure's cause
    in one line."""
    outputs.append_line(os.path.join(trial_dir, TRIAL_LOG),
                        "%s %s" % (time.strftime("%Y-%m-%dT%H:%M:%S"), what))
    wrapper = [python, "-c", _DIE_WITH_PARENT, str(os.getpid())] if sys.platform.startswith(
        "linux") else [python]
    proc = subprocess.run(wrapper + ["-m"] + module_args, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode == 0:
        return None
    return failure_cause(proc.stderr, what, proc.returncode)


# a command's own one-line error, and a Python exception's line ("ValueError: ...")
_ONE_LINE_ERROR = re.compile(r"^\S+( \S+)*: error: ")
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(Error|Exception|Interrupt|Exit)(: (?P<text>.*))?$")


def failure_cause(stderr, what, status):
    """What a failed command's stderr says of the cause, in one line: its own one-line error
    (the commands end every error a user can cause with one), else the exception a traceback
    ends with (not the traceback's last line, which may be the tail of a long message), else
    its status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    own = [line for line in lines if _ONE_LINE_ERROR.match(line)]
    if own:
        return own[-1][:CAUSE_LENGTH]
    exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)
                  and not line.endswith("Traceback (most recent call last):")]
    if exceptions:
        return ("%s ended with status %d: %s" % (what, status, exceptions[-1]))[:CAUSE_LENGTH]
    if status < 0:
        return "%s was killed by signal %d" % (what, -status)
    return "%s exited with status %d%s" % (what, status, ": %s" % lines[-1] if lines else "")


@contextlib.contextmanager
def _trial_lock(trial_dir):
    """Hold the trial's lock, waiting for another process that holds it."""
    with outputs.open_lock_file(os.path.join(trial_dir, TRIAL_LOCK)) as lock_file:
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
    the epochs trained and the seconds they took, the best validation epoch's test error where
    there is one, and the Monte Carlo predictive's test error and ECE where the run wrote its
    uncertainty report."""
    pruning = jsonfile.check(jsonfile.read(os.path.join(trial_dir, "pruning.json"), SpecError),
                             PRUNING_SCHEMA, os.path.join(trial_dir, "pruning.json"), SpecError)
    history = RunDirectory(trial_dir).read_history(0)
    figures = {"epochs": len(history),
               "seconds": sum(record.get("epoch_seconds", 0.0) for record in history),
               "test_error": {"%g" % row["proportion"]: row["test_error"]
                              for row in pruning["rows"]}}
    best = best_validation_epoch(history)
    if best is not None:
        figures.update(best_validation_epoch=best["epoch"],
                       best_validation_test_error=1.0 - best["test_accuracy"])
    report = os.path.join(trial_dir, UNCERTAINTY_FILE)
    if os.path.isfile(report):
        in_distribution = jsonfile.check(jsonfile.read(report, SpecError), REPORT_SCHEMA,
                                         report, SpecError)["in_distribution"] or {}
        if "accuracy" in in_distribution and "ece" in in_distribution:
            figures.update(predictive_test_error=1.0 - in_distribution["accuracy"],
                           predictive_ece=in_distribution["ece"])
    return figures


# The sweep's own process.

# what a summary row holds beside the pruned test errors, where every trial has it
_SUMMARY_FIGURES = ("best_validation_test_error", "predictive_test_error", "predictive_ece",
                    "seconds")


def summarize(records, proportions):
    """Per setting, in the order first seen: n, and over its finished trials the median, range
    (min, max), mean and sample standard deviation of each test error (pruned proportions, best
    validation epoch, the Monte Carlo predictive's), of the predictive's ECE and of the
    training seconds."""
    settings = {}
    for record in records:
        if record.get("figures"):
            settings.setdefault(record["setting"], []).append(record["figures"])
    table = []
    for setting, figures in settings.items():
        row = {"setting": setting, "n": len(figures), "test_error": {}}
        for p in ["%g" % p for p in proportions]:
            row["test_error"][p] = seed_statistics([f["test_error"][p] for f in figures])
        for name in _SUMMARY_FIGURES:
            if all(name in f for f in figures):
                row[name] = seed_statistics([f[name] for f in figures])
        table.append(row)
    return table


def seed_statistics(values):
    """The median, min, max, mean and sample standard deviation (0 for one value) of
    ``values``."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = (ordered[middle] if len(ordered) % 2
              else (ordered[middle - 1] + ordered[middle]) / 2)
    mean = sum(values) / len(values)
    sd = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
          if len(values) > 1 else 0.0)
    return {"median": median, "min": ordered[0], "max": ordered[-1], "mean": mean, "sd": sd}


def markdown_table(table, proportions):
    """The summary as a Markdown table: each figure's median over seeds and its range
    [min, max] where there are several; errors and ECE in percent, time in minutes."""
    columns = [("best_validation_test_error", "best validation epoch", 100.0, "%.2f"),
               ("predictive_test_error", "predictive (MC)", 100.0, "%.2f"),
               ("predictive_ece", "ECE (MC)", 100.0, "%.2f"),
               ("seconds", "minutes", 1 / 60.0, "%.1f")]
    columns = [c for c in columns if any(c[0] in row for row in table)]
    header = (["setting", "n"] + ["%g%% removed" % (100 * p) for p in proportions]
              + [c[1] for c in columns])
    lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(header) - 2)]

    def cell(stat, unit=100.0, number="%.2f"):
        if stat is None:
            return ""
        if stat["min"] == stat["max"]:
            return number % (unit * stat["median"])
        return ("%s [%s, %s]" % (number, number, number)
                % tuple(unit * stat[k] for k in ("median", "min", "max")))
    for row in table:
        cells = ([row["setting"], str(row["n"])]
                 + [cell(row["test_error"]["%g" % p]) for p in proportions]
                 + [cell(row.get(name), unit, number) for name, _, unit, number in columns])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_sweep(spec, out_dir, client, threads, log=print, all_trials=None):
    """Run every trial of ``spec`` (``all_trials``: ``trials(spec)`` where already planned)
    under ``out_dir`` on the Dask ``client``; write sweep.json, sweep.md and sweep.png there;
    return the records."""
    from distributed import as_completed
    all_trials = trials(spec) if all_trials is None else all_trials
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
            result = {"status": FAILED, "error": "%s: %s" % (type(exc).__name__, exc)}
        records.append(dict(trial, **result))
        done += 1
        # assigned to a worker is not yet running: a worker runs one trial per thread
        processing = {key for keys in client.processing().values() for key in keys}
        running = min(sum(client.nthreads().values()),
                      sum(1 for f in futures if not f.done() and f.key in processing))
        log("%s %s: %s  [done %d, running %d, waiting %d]" % (
            result["status"], trial["name"], _describe(result), done, running,
            len(futures) - done - running))
    order = {trial["name"]: i for i, trial in enumerate(all_trials)}
    records.sort(key=lambda r: order[r["name"]])
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
    if failed(result):
        return result["error"]
    errors = result["figures"]["test_error"]
    return "test error %s" % ", ".join("%.2f%% at %s" % (100 * e, p) for p, e in errors.items())

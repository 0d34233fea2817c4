"""The command ``gluon-bbb sweep SPEC --out DIR``: seeds x
settings of training runs on Dask, each trial pruned, tabulated as median and range over seeds
(``learning/trials.py`` holds the spec, the trials and the summary)."""
import contextlib
import logging
import os
import signal
import sys
import warnings

from .cli import MAX_THREADS, ArgumentParser, add_json_flag, print_json, run_main, say_for
from ..errors import ConfigError

PROG = "gluon-bbb sweep"
# how long to wait for a running scheduler to answer
CONNECT_SECONDS = 30
# the most local workers a sweep starts, per core: more only queue trials on the same cores
WORKERS_PER_CORE = 4
# a local cluster's workers log nothing: a trial's failure reaches the sweep's records, and a
# worker's heartbeat that finds the scheduler closed (Ctrl-C) is no news
WORKER_LOG_LEVEL = logging.CRITICAL


def build_parser(prog=PROG):
    parser = ArgumentParser(prog=prog, description="Run seeds x settings of the training "
                            "command on Dask, each trial pruned, and tabulate median and range "
                            "over seeds.")
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
    add_json_flag(parser)
    return parser


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    from .. import outputs
    from ..learning.trials import (SWEEP_FILES, SpecError, check_against_out, failed as trial_failed,
                         load_spec, plan, run_sweep, trial_count)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # each worker is a process that starts trials, each trial a process of its own threads
    for name, most in (("threads_per_trial", MAX_THREADS), ("workers", WORKERS_PER_CORE * cores)):
        value = getattr(args, name)
        if value is not None and not 1 <= value <= most:
            raise ConfigError(name, value, "an integer from 1 to %d%s" % (
                most, " (%d per core of the %d here)" % (WORKERS_PER_CORE, cores)
                if name == "workers" else ""))
    spec = load_spec(args.spec)
    # the sweep's directory is claimed before any work or word (outputs.py): never inside a run
    outputs.claim_directory(args.out, SWEEP_FILES, "out")
    from distributed import Client, LocalCluster
    with contextlib.ExitStack() as stack:
        # one sweep at a time writes into --out: a second stops at once, naming the lock
        stack.enter_context(outputs.locked_beside(os.path.normpath(args.out), "out"))
        say = say_for(args.json)
        say("sweep: %d trials in %s; checking each trial's flags" % (trial_count(spec),
                                                                     args.spec))
        planned = plan(spec, args.spec)
        workers = args.workers or max(1, cores // args.threads_per_trial)
        if os.path.isdir(args.out):
            check_against_out(planned, args.out)
        if args.scheduler:
            say("sweep: connecting to the Dask scheduler at %s (at most %d s)" % (
                args.scheduler, CONNECT_SECONDS))
            client = stack.enter_context(_connect(Client, args.scheduler, SpecError))
            where = "the cluster at %s" % args.scheduler
        else:
            cluster = stack.enter_context(_local_cluster(LocalCluster, workers,
                                                         WORKER_LOG_LEVEL))
            client = stack.enter_context(Client(cluster))
            where = "a local cluster of %d worker%s" % (workers, "" if workers == 1 else "s")
        # runs first as the stack closes: the client's and cluster's closing log no traceback
        # of a connection the other side closed first (CommClosedError)
        stack.callback(_dask_logs_quiet)
        outputs.make_directory(args.out, "out")
        say("sweep: %d trials on %s, %d thread%s each, into %s" % (
            len(planned[0]), where, args.threads_per_trial,
            "" if args.threads_per_trial == 1 else "s", args.out))
        records = run_sweep(spec, args.out, client, args.threads_per_trial, log=say,
                            all_trials=planned[0])
    failed = [r for r in records if trial_failed(r)]
    if args.json:
        import json
        with open(os.path.join(args.out, "sweep.json")) as f:
            print_json(json.load(f))
    say("wrote sweep.json, sweep.md%s to %s" % (", sweep.png" if len(failed) < len(records)
                                                else "", args.out))
    return 1 if failed else 0


def _connect(Client, address, SpecError):
    """A Dask ``Client`` of the scheduler at ``address``, or SpecError on one line: where
    nothing listens, where what answers is not a Dask scheduler, and where a peer takes the
    connection and never answers (Dask's own timeout does not bound its handshake), after
    ``CONNECT_SECONDS``."""
    import threading
    from distributed.comm.addressing import parse_address, parse_host_port
    try:
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls"):
            parse_host_port(location)
    except ValueError as exc:  # not an address
        raise SpecError("cannot use the Dask scheduler {scheduler} %s: %s", address, exc) from None
    outcome = []

    def connect():
        try:
            # Dask's retries of a refused connection end first, with their own reason
            outcome.append(Client(address, timeout="%ds" % (CONNECT_SECONDS - 5)))
        except BaseException as exc:  # whatever the peer's bytes made of Dask's parser
            outcome.append(exc)
    thread = threading.Thread(target=connect, name="dask connection", daemon=True)
    thread.start()
    thread.join(CONNECT_SECONDS)
    if not outcome:
        raise SpecError("cannot use the Dask scheduler {scheduler} %s: it took the connection "
                        "but did not answer as a Dask scheduler within %d s", address,
                        CONNECT_SECONDS)
    if isinstance(outcome[0], BaseException):
        exc = outcome[0]
        if isinstance(exc, (OSError, TimeoutError)) and "handshake" in str(exc):
            # Dask releases before 2024 bound their handshake themselves
            reason = ("it took the connection but did not answer as a Dask scheduler within "
                      "%d s" % (CONNECT_SECONDS - 5))
        elif isinstance(exc, (OSError, TimeoutError)):
            reason = str(exc)
        else:
            reason = "what answers there is not a Dask scheduler (%s: %s)" % (
                type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
        raise SpecError("cannot use the Dask scheduler {scheduler} %s: %s", address, reason)
    return outcome[0]


def _dask_logs_quiet():
    for name in ("distributed", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _local_cluster(LocalCluster, workers, log_level):
    """A local cluster of ``workers`` processes that ignore SIGINT, as the trials they start
    do: Ctrl-C in a terminal reaches the whole process group, and the sweep's own process,
    which closes the cluster (its workers end their trials with SIGTERM), is the one to say
    so."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the workers
    # the scheduler serves its health checks on port 8787, or another where that one is taken
    # (another sweep's), and says so: the sweep uses neither
    warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
    try:
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                            dashboard_address=None, silence_logs=log_level)
    finally:
        signal.signal(signal.SIGINT, previous)


def run(argv=None, prog=PROG):
    """The command as a program: its exit status. It needs no MXNet: MXNet runs in the
    trials' own processes."""
    return run_main(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())

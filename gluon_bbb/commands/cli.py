"""What the commands share: argument parsing that reports a bad flag on one line, ``load_mxnet``
(one line where MXNet cannot be loaded), and ``run_main``, which runs a command's ``main``
as a program: every error a user can cause turned into ``prog: error: message`` and exit
status 2, never a traceback."""
import argparse
import contextlib
import os
import re
import signal
import sys
import threading
import time
import traceback
import warnings

from ..errors import GluonBBBError, Interrupted

# fields whose flag is not the field's name with dashes
_FLAGS = {"out_dir": "--out", "import_modules": "--import"}


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag on one line (no usage block) and exits with status 2;
    with ``raise_errors`` it raises ``FlagError`` instead (to check another command's flags
    in-process, as the sweep does)."""

    def __init__(self, *args, raise_errors=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.raise_errors = raise_errors
        # a flag's value may be any negative number, -1e-3 and -inf included (argparse alone
        # takes only -1 and -0.5 for values, and -1e-3 for an unknown option)
        self._negative_number_matcher = re.compile(
            r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)

    def add_run_argument(self, help):
        """The run a command reads, as ``RUN`` or as ``--checkpoint RUN`` (the tutorial's
        ``prune.py`` form): either, not both; ``parse_args`` leaves it in ``run``."""
        self.add_argument("run", nargs="?", metavar="RUN", help=help)
        self.add_argument("--checkpoint", dest="run_flag", metavar="RUN", help="the same as RUN")
        self.add_argument("--data-dir", help="directory with the MNIST IDX files (default: the "
                          "one the run was trained on, else $GLUON_BBB_DATA, else "
                          "~/.mxnet/datasets/mnist)")

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        if hasattr(parsed, "run_flag"):
            if parsed.run is None and parsed.run_flag is None:
                self.error("the following arguments are required: RUN (or --checkpoint RUN)")
            if parsed.run is not None and parsed.run_flag is not None:
                self.error("RUN and --checkpoint both name the run; give one of them")
            if parsed.run is None:
                parsed.run = parsed.run_flag
            del parsed.run_flag
        return parsed

    def error(self, message):
        if self.raise_errors:
            raise FlagError(message)
        self.exit(2, "%s: error: %s\n" % (self.prog, message))


class FlagError(GluonBBBError):
    """A command line that its command's parser refuses."""

    def __init__(self, message):
        super().__init__("%s", message)


class _Switch(argparse.Action):
    """``--flag`` and ``--no-flag``: True and False (default None: not given); argparse's
    BooleanOptionalAction, which Python 3.8 lacks."""

    def __init__(self, option_strings, dest, help=None, **kwargs):
        flag = option_strings[0]
        super().__init__([flag, "--no-" + flag[2:]], dest, nargs=0, default=None, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no-"))


def add_switch(parser, flag, help):
    """``flag`` and its ``--no-`` form (``_Switch``)."""
    parser.add_argument(flag, action=_Switch, help=help)


def add_json_flag(parser):
    """``--json``: print the command's JSON (what it writes to its files) instead of its
    summary, for a pipeline."""
    parser.add_argument("--json", action="store_true", help="print the JSON the command "
                        "writes to its files instead of the summary a person reads")


def say_for(json_wanted):
    """Where a command's lines go: stdout, or stderr where ``--json`` keeps stdout for the
    JSON alone."""
    stream = sys.stderr if json_wanted else sys.stdout
    return lambda line: (stream.write(line + "\n"), stream.flush())


def add_import_flag(parser):
    """``--import MODULE`` (repeatable): a module of the user's own to import first, where a
    run was trained with a prior, estimator or parametrization class defined there."""
    parser.add_argument("--import", dest="import_modules", action="append", default=[],
                        metavar="MODULE", help="import this module first: the one that defines "
                        "a prior, estimator or parametrization class of your own the run was "
                        "trained with (repeatable)")


def import_modules(names):
    """Import the modules ``names`` (``--import``), from the working directory too; one line
    (ConfigError) for one that cannot be imported."""
    import importlib
    from ..errors import ConfigError
    if names and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except Interrupted:  # a signal, not the module
            raise
        except BaseException as exc:  # the user's module: whatever it raises, sys.exit too
            raise ConfigError("import_modules", name, "a module Python can import here (%s%s)"
                              % (type(exc).__name__, ": %s" % str(exc).splitlines()[0]
                                 if str(exc).strip() else "")) from None


def print_json(value):
    import json
    print(json.dumps(value, indent=2, allow_nan=False))


def table(header, rows, align=None):
    """A Markdown table of ``rows`` (lists of cells, shown with ``str``) under ``header``, its
    columns right-aligned but for those ``align`` marks ``"<"`` (default: the first)."""
    align = align or ["<"] + [">"] * (len(header) - 1)
    lines = ["| " + " | ".join(str(cell) for cell in row) + " |" for row in [header] + rows]
    lines.insert(1, "|" + "".join("---|" if a == "<" else "---:|" for a in align))
    return "\n".join(lines)


def flag_for(field):
    """The command-line flag that sets config field ``field``."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


class MXNetUnavailable(GluonBBBError):
    """MXNet cannot be loaded (a CUDA build without its libraries)."""


# environment variables that stop MXNet, OpenMP or matplotlib from inside their load where
# their value is not of its type: checked before either loads (``check_environment``)
MAX_THREADS = 1024
_INTEGER_VARIABLES = (
    "MXNET_CPU_WORKER_NTHREADS", "MXNET_CPU_PRIORITY_NTHREADS", "MXNET_CPU_NNPACK_NTHREADS",
    "MXNET_GPU_WORKER_NTHREADS", "MXNET_GPU_COPY_NTHREADS", "MXNET_MP_WORKER_NTHREADS",
    "MXNET_MP_OPENCV_NUM_THREADS", "MXNET_CUSTOM_OP_NUM_THREADS", "MXNET_EXEC_NUM_TEMP",
    "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN", "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD",
    "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD", "MXNET_GPU_MEM_POOL_RESERVE",
    "MXNET_GPU_MEM_POOL_PAGE_SIZE", "MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE",
    "MXNET_MKLDNN_CACHE_NUM", "MXNET_CUDNN_AUTOTUNE_DEFAULT", "MXNET_PROFILER_AUTOSTART",
    "MXNET_OPTIMIZER_AGGREGATION_SIZE", "MXNET_KVSTORE_REDUCTION_NTHREADS",
    "MXNET_KVSTORE_BIGARRAY_BOUND")
_BOOLEAN_VARIABLES = (
    "MXNET_EXEC_ENABLE_INPLACE", "MXNET_EXEC_BULK_EXEC_INFERENCE", "MXNET_EXEC_BULK_EXEC_TRAIN",
    "MXNET_MKLDNN_ENABLED", "MXNET_ENFORCE_DETERMINISM", "MXNET_SAFE_ACCUMULATION",
    "MXNET_USE_SIGNAL_HANDLER", "MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "MXNET_ENABLE_GPU_P2P",
    "MXNET_MKLDNN_DEBUG", "MXNET_UPDATE_ON_KVSTORE")
_ENGINES = ("NaiveEngine", "ThreadedEngine", "ThreadedEnginePerDevice")
# OpenMP's own variables, as libgomp reads them (it warns on the terminal and ignores another
# value): the pattern of what it takes, case aside, and the words for it
_BIND = "(true|false|master|primary|close|spread)"
_OPENMP_VARIABLES = {
    "OMP_DYNAMIC": (r"true|false", "true or false"),
    "OMP_NESTED": (r"true|false", "true or false"),
    "OMP_PROC_BIND": (_BIND + r"(\s*,\s*" + _BIND + ")*", "true, false, or a list of master, "
                      "primary, close and spread"),
    "OMP_WAIT_POLICY": (r"active|passive", "active or passive"),
    "OMP_SCHEDULE": (r"((non)?monotonic\s*:\s*)?(static|dynamic|guided|auto)(\s*,\s*\d+)?",
                     "static, dynamic, guided or auto, with a chunk size"),
    "OMP_STACKSIZE": (r"\d+\s*[bkmg]?", "a size such as 4M"),
    "OMP_THREAD_LIMIT": (r"0*[1-9]\d*", "a whole number >= 1"),
    "OMP_MAX_ACTIVE_LEVELS": (r"\d+", "a whole number"),
    "OMP_PLACES": (r"(threads|cores|sockets|ll_caches|numa_domains)(\s*\(\s*\d+\s*\))?"
                   r"|[{}\d\s,:!-]+", "threads, cores, sockets or a list of places"),
    "GOMP_SPINCOUNT": (r"\d+\s*[kmgt]?|infinite|infinity", "a count such as 300k, or infinite"),
}


class EnvironmentProblem(GluonBBBError):
    """An environment variable that MXNet or matplotlib would stop the process on."""


def check_environment(environ=os.environ):
    """``EnvironmentProblem`` on one line for the first variable of ``environ`` that MXNet,
    OpenMP or matplotlib would stop the process on as they load."""
    def refuse(name, requirement):
        raise EnvironmentProblem("the environment variable %s=%r must be %s (unset it or "
                                 "correct it)", name, environ[name], requirement)
    threads = environ.get("OMP_NUM_THREADS")
    if threads is not None and not (threads.strip().isdigit()
                                    and 1 <= int(threads) <= MAX_THREADS):
        refuse("OMP_NUM_THREADS", "a whole number of threads from 1 to %d" % MAX_THREADS)
    for name in _INTEGER_VARIABLES:
        value = environ.get(name)
        if value is not None and not value.strip().lstrip("+-").isdigit():
            refuse(name, "an integer")
    for name in _BOOLEAN_VARIABLES:
        value = environ.get(name)
        if value is not None and value.strip().lower() not in ("0", "1", "true", "false"):
            refuse(name, "0, 1, true or false")
    for name, (pattern, words) in _OPENMP_VARIABLES.items():
        value = environ.get(name)
        if value is not None and not re.fullmatch(pattern, value.strip(), re.IGNORECASE):
            refuse(name, words)
    engine = environ.get("MXNET_ENGINE_TYPE")
    if engine is not None and engine not in _ENGINES:
        refuse("MXNET_ENGINE_TYPE", "one of %s" % ", ".join(_ENGINES))
    backend = environ.get("MPLBACKEND")
    if backend is not None and not _matplotlib_takes(backend):
        refuse("MPLBACKEND", "a matplotlib backend such as agg (the commands draw their PNGs "
               "without one)")


def _matplotlib_takes(backend):
    """Whether matplotlib's import accepts ``backend`` in MPLBACKEND: asked of matplotlib
    itself, imported without the variable (which it reads only then)."""
    if backend.lower() in ("agg", "pdf", "ps", "svg", "cairo", "template") or backend.startswith(
            "module://"):
        return True
    saved = os.environ.pop("MPLBACKEND")
    try:
        from matplotlib import rcsetup
        rcsetup.validate_backend(backend)
    except (ValueError, ImportError):
        return False
    finally:
        os.environ["MPLBACKEND"] = saved
    return True


def standard_streams_open():
    """Give standard input, output and error /dev/null where a command was started with them
    closed (``>&-``, as some daemons and cron do): the command then runs as with its output
    thrown away, and no file it opens takes descriptor 1 or 2, where MXNet's and the
    interpreter's own writes would land in it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode))
        elif mode == "w" and hasattr(getattr(sys, name), "reconfigure"):
            # a path the terminal's encoding cannot show (PYTHONIOENCODING=ascii) is printed
            # with escapes, never stopped on
            getattr(sys, name).reconfigure(errors="backslashreplace")


def _libraries_quiet():
    """Ignore the deprecation warnings of the libraries a command loads (MXNet's NumPy names,
    matplotlib's pyparsing calls): a user's ``PYTHONWARNINGS=error`` would otherwise stop the
    command inside their imports, over nothing the user can change; and matplotlib's own
    warnings (a temporary cache directory where HOME cannot take one), no news to the user."""
    import logging
    for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category)
    logging.getLogger("matplotlib").setLevel(logging.ERROR)


def _no_engine_line_at_exit():
    """Where a signal stopped the command inside MXNet's import, before its engine started,
    MXNet starts it at exit and writes its engine line after the command's last one: without
    ``MXNET_ENGINE_TYPE`` (no engine matters then) it starts without a word."""
    import gluon_bbb
    if not gluon_bbb._engine_started:
        os.environ.pop("MXNET_ENGINE_TYPE", None)


def load_mxnet(ctx=None):
    """Load MXNet where a command first needs it (after its flags are checked: a bad flag is
    reported in a fraction of a second); ``MXNetUnavailable`` in one line where it cannot be
    loaded, before anything else imports it."""
    from .. import _ENGINE_CHOSEN_HERE, mxnet_load_error
    if ctx is not None and ctx.strip().lower().startswith("gpu") and _ENGINE_CHOSEN_HERE:
        os.environ["MXNET_ENGINE_TYPE"] = "ThreadedEnginePerDevice"
    problem = mxnet_load_error()
    if problem:
        raise MXNetUnavailable("%s", problem)


def load_run(args):
    """``(run, checkpoint_path, config)`` of a command that reads a trained run: MXNet loaded
    (for ``args.ctx`` where the command has it), the run ``args.run`` names (a run directory,
    or a parameter file in one: ``rundir.resolve_checkpoint``) and its classifier config."""
    load_mxnet(getattr(args, "ctx", None))
    from ..learning.rundir import resolve_checkpoint
    run, checkpoint_path = resolve_checkpoint(args.run)
    return run, checkpoint_path, run.read_classifier_config()


def report_directory(args, run, files):
    """The directory a report on ``run`` goes to, ``args.out`` (default the run's own), made
    with the report's ``files`` (``{name: outputs.FileKind}``) claimed before any work, as
    ``outputs.py`` rules: never inside a run other than ``run``."""
    from ..learning.rundir import RunDirectory
    return RunDirectory(run.path if args.out is None else args.out).create(
        "out", files, own_runs=[run.path])


# How long a signal that arrived where its exception would be lost waits to be sent again: the
# finalizer it interrupted has ended by then.
_SEND_AGAIN_SECONDS = 0.01
# How long the main thread may stay inside one native call (a wait on MXNet's engine, a
# oneDNN kernel) after a signal before the command is ended without it.
STUCK_SECONDS = 5.0
_WATCH_SECONDS = 0.25


@contextlib.contextmanager
def _ended_even_inside_native_code(prog):
    """A signal's Python handler runs only when the main thread comes back to Python code;
    inside one long native call it waits."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main interpreter
        os.close(read_end)
        os.close(write_end)
        yield
        return
    inside = threading.Event()
    inside.set()

    def watch():
        try:
            _watch_until_the_command_ends(read_end, inside, prog)
        finally:
            os.close(read_end)

    watcher = threading.Thread(target=watch, name="signal watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        # nothing here waits: the watcher ends on its own (the closed pipe wakes it) and closes
        # its end of the pipe
        inside.clear()
        signal.set_wakeup_fd(previous)
        os.close(write_end)


def _watch_until_the_command_ends(read_end, inside, prog):
    """The watcher's loop: for each SIGINT or SIGTERM the wakeup pipe ``read_end`` reports while
    the command runs (``inside`` set), end the process where the main thread stays on one place
    for ``STUCK_SECONDS`` (a native call that does not return to the handler)."""
    def where_the_main_thread_is():
        frame = sys._current_frames().get(threading.main_thread().ident)
        return None if frame is None else (id(frame), frame.f_lasti)

    while True:
        try:
            received = os.read(read_end, 64)
        except OSError:
            return
        if not inside.is_set() or not received:
            return
        signum = received[-1]
        if signum not in (signal.SIGINT, signal.SIGTERM):
            continue
        place, still = where_the_main_thread_is(), 0.0
        while still < STUCK_SECONDS:
            time.sleep(_WATCH_SECONDS)
            now = where_the_main_thread_is()
            still = still + _WATCH_SECONDS if now == place else 0.0
            place = now
            if not inside.is_set():
                return
        name = signal.Signals(signum).name
        os.write(2, ("\n%s: %s by %s; it was inside a native call that did not return for %g "
                     "s, so it ends there\n" % (
                         prog, "terminated" if name == "SIGTERM" else "interrupted", name,
                         STUCK_SECONDS)).encode())
        os._exit(128 + signum)


def _send_again(signum):
    """Send ``signum`` to the main thread again in ``_SEND_AGAIN_SECONDS`` (from another thread:
    sent from the handler, it would run where it ran)."""
    timer = threading.Timer(_SEND_AGAIN_SECONDS, signal.pthread_kill,
                            [threading.main_thread().ident, signum])
    timer.daemon = True
    timer.start()


@contextlib.contextmanager
def _interrupts_raised():
    """SIGINT and SIGTERM raise ``Interrupted`` naming the signal, in the main thread's own code."""
    def where_a_raise_is_lost(frame):
        while frame is not None:
            if frame.f_code.co_name == "__del__" or frame.f_code is unraisable.__code__:
                return True
            frame = frame.f_back
        return False

    def handler(signum, frame):
        if where_a_raise_is_lost(frame):
            _send_again(signum)
        else:
            raised.append(signal.Signals(signum).name)
            raise Interrupted(raised[-1])

    def unraisable(report):
        if isinstance(report.exc_value, KeyboardInterrupt):
            _send_again(getattr(signal, getattr(report.exc_value, "signal_name", "SIGINT")))
        elif not freeing_what_the_interrupt_cut_short:
            previous_hook(report)

    def excepthook(kind, value, tb):
        # PyErr_Print shows an error through this hook and the code that called it goes on: a C
        # extension whose import of NumPy fails (its import_array) shows why, then raises
        # ImportError. An interrupt is shown as the command's one line, once, at its end.
        if not isinstance(value, Interrupted):
            previous_excepthook(kind, value, tb)

    raised = []  # the signals whose Interrupted the handler raised
    freeing_what_the_interrupt_cut_short = False

    handled = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        handled.append(signal.SIGINT)
    previous = {signum: signal.signal(signum, handler) for signum in handled}
    previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    previous_excepthook, sys.excepthook = sys.excepthook, excepthook
    try:
        yield
    except BaseException as exc:
        if not raised:
            raise
        freeing_what_the_interrupt_cut_short = True
        ended = exc
        while ended is not None:
            traceback.clear_frames(ended.__traceback__)
            ended = ended.__context__
        freeing_what_the_interrupt_cut_short = False
        if isinstance(exc, KeyboardInterrupt):
            raise
        # a library turned the interrupt into its own error (NumPy's import, interrupted, raises
        # ImportError with a page of advice): the command still ends as interrupted
        raise Interrupted(raised[-1]) from None
    finally:
        sys.unraisablehook, sys.excepthook = previous_hook, previous_excepthook
        for signum, earlier in previous.items():
            signal.signal(signum, signal.SIG_DFL if earlier is None else earlier)


def run_main(main, argv=None, prog=None):
    """Run ``main(argv)`` and flush its output; turn input errors, files that cannot be
    written or read, and SIGINT or SIGTERM into one line on stderr and a non-zero status."""
    prog = prog or os.path.basename(sys.argv[0])
    standard_streams_open()
    _libraries_quiet()
    stdout = sys.stdout
    try:
        check_environment()
        sys.stdout = _Output(stdout)
        # the handlers are put back last, as the command's very last act
        with _interrupts_raised(), _ended_even_inside_native_code(prog):
            status = main(argv)
        # flushed here, where a vanished reader is caught, not at exit, where Python would
        # print "Exception ignored ... BrokenPipeError" and exit with status 120
        sys.stdout.flush()
        return status
    except GluonBBBError as exc:
        message = exc.describe(flag_for)
    except BrokenPipeError:  # output piped into head or similar: the reader has gone
        # quiet, as a process killed by SIGPIPE is; /dev/null takes Python's flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:  # a file that vanishes mid-run, a device error
        message = "%s%s" % (exc.strerror or exc, ": %s" % exc.filename if exc.filename else "")
    except Warning as exc:  # a warning the user's PYTHONWARNINGS=error made an exception
        message = "%s: %s (raised as an error by the Python warnings filter, PYTHONWARNINGS)" % (
            type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
    except KeyboardInterrupt as exc:
        _no_engine_line_at_exit()
        name = getattr(exc, "signal_name", "SIGINT")
        saved = getattr(exc, "saved", None)
        sys.stderr.write("\n%s: %s by %s%s%s\n" % (
            prog, "terminated" if name == "SIGTERM" else "interrupted", name,
            "; %s" % saved if saved else "",
            "; --resume continues the run" if getattr(exc, "resumable", False) else ""))
        return 128 + (signal.SIGTERM if name == "SIGTERM" else signal.SIGINT)
    finally:
        sys.stdout = stdout
    sys.stderr.write("%s: error: %s\n" % (prog, message))
    return 2


class OutputStreamError(GluonBBBError):
    """Standard output cannot be written (a full device behind it, ``> /dev/full``)."""


class _Output:
    """Standard output, whose write errors name it: a command's files have their own
    messages, and "No space left on device" alone would speak of the disk."""

    def __init__(self, stream):
        self._stream = stream

    def _named(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputStreamError("cannot write to standard output: %s",
                                    exc.strerror or exc) from None

    def write(self, text):
        return self._named(self._stream.write, text)

    def flush(self):
        return self._named(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)

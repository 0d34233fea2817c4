"""What the commands share: argument parsing that reports a bad flag on one line, ``load_mxnet``
(one line where MXNet cannot be loaded), and ``run_command``, which runs a command's ``main``
as a program: every error a user can cause turned into ``prog: error: message`` and exit
status 2, never a traceback.

Every command is a module of the package with ``main(argv)`` and ``run(argv, prog)``:
``python -m gluon_bbb.train_mnist``, ``.prune``, ``.evaluate``, ``.regression``, ``.sweep``,
``.compress``, ``.predict``; ``gluon-bbb COMMAND`` (``__main__.py``) runs the same, and the
two scripts at the top of a checkout are wrappers of the first two. A command module imports no
MXNet when it is imported: its ``main`` checks its flags first, then loads MXNet where it needs
it.

Library errors name config fields (``{learning_rate}``); only here does a field become the flag
that sets it (``--learning-rate``). SIGINT and SIGTERM (what ``kill``, a cluster scheduler or
Dask sends) end a command alike: one line saying what is kept, status 130 or 143 (128 plus the
signal's number, as a shell reports a process ended by it), even where the signal's handler
runs inside a finalizer or cuts a constructor short (``_interrupts_raised``), and within
seconds where the main thread is inside a native call that does not return
(``_ended_even_inside_native_code``).
"""
import argparse
import contextlib
import os
import signal
import sys
import threading
import time
import traceback

from .errors import GluonBBBError, Interrupted

# fields whose flag is not the field's name with dashes
_FLAGS = {"out_dir": "--out"}


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag on one line (no usage block) and exits with status 2;
    with ``raise_errors`` it raises ``FlagError`` instead (to check another command's flags
    in-process, as the sweep does)."""

    def __init__(self, *args, raise_errors=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.raise_errors = raise_errors

    def error(self, message):
        if self.raise_errors:
            raise FlagError(message)
        self.exit(2, "%s: error: %s\n" % (self.prog, message))


class FlagError(GluonBBBError):
    """A command line that its command's parser refuses."""

    def __init__(self, message):
        super().__init__("%s", message)


def flag_for(field):
    """The command-line flag that sets config field ``field``."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


class MXNetUnavailable(GluonBBBError):
    """MXNet cannot be loaded (a CUDA build without its libraries)."""


def load_mxnet():
    """Load MXNet where a command first needs it (after its flags are checked: a bad flag is
    reported in a fraction of a second); ``MXNetUnavailable`` in one line where it cannot be
    loaded, before anything else imports it."""
    from . import mxnet_load_error
    problem = mxnet_load_error()
    if problem:
        raise MXNetUnavailable("%s", problem)


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
    inside one long native call it waits. Python writes each signal's number to a wakeup file
    as the signal arrives, wherever the main thread is; a watcher thread reads it, and where
    the main thread then stays at the same point of the same frame for ``STUCK_SECONDS`` (one
    native call that has not returned), it writes the command's one line and ends the process
    with 128 plus the signal's number. Files are written atomically, so what is on disk stays
    whole; the work in progress is lost, as with a kill."""
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

    def where_the_main_thread_is():
        frame = sys._current_frames().get(threading.main_thread().ident)
        return None if frame is None else (id(frame), frame.f_lasti)

    def watch():
        try:
            watch_until_the_command_ends()
        finally:
            os.close(read_end)

    def watch_until_the_command_ends():
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
            os.write(2, ("\n%s: %s by %s; it was inside a native call that did not return "
                         "for %g s, so it ends there\n" % (
                             prog, "terminated" if name == "SIGTERM" else "interrupted", name,
                             STUCK_SECONDS)).encode())
            os._exit(128 + signum)

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


@contextlib.contextmanager
def _interrupts_raised():
    """SIGINT and SIGTERM raise ``Interrupted`` naming the signal, in the main thread's own code.

    Python ignores an exception raised in a finalizer (``__del__``): it prints "Exception
    ignored" and goes on. A signal whose handler runs while MXNet frees an NDArray
    (``NDArrayBase.__del__``) would be lost that way and training would go on. So a handler
    that finds itself in a finalizer raises nothing and has the signal sent to the main thread
    again a moment later, and an interrupt that a finalizer swallowed all the same (one with no
    ``__del__`` frame) reaches ``sys.unraisablehook``, which does the same. A SIGINT that was
    ignored when the command started (a job started with ``nohup`` or in the background) stays
    ignored. An interrupt that a library shows and turns into an exception of its own (a C
    extension whose import of NumPy is interrupted) ends the command as an interrupt all the
    same, on its one line.

    The interrupt may cut a constructor short (``NDArrayBase.__init__`` before it sets
    ``handle``); that object's finalizer fails when it is freed. The frames the interrupt ended
    hold such objects, so they are cleared here, under this hook, which keeps those failures
    quiet: the command's one line is what it says, not a traceback as the process exits."""
    def send_again(signum):
        # from another thread: sent here, the handler would run where it ran
        timer = threading.Timer(_SEND_AGAIN_SECONDS, signal.pthread_kill,
                                [threading.main_thread().ident, signum])
        timer.daemon = True
        timer.start()

    def where_a_raise_is_lost(frame):
        while frame is not None:
            if frame.f_code.co_name == "__del__" or frame.f_code is unraisable.__code__:
                return True
            frame = frame.f_back
        return False

    def handler(signum, frame):
        if where_a_raise_is_lost(frame):
            send_again(signum)
        else:
            raised.append(signal.Signals(signum).name)
            raise Interrupted(raised[-1])

    def unraisable(report):
        if isinstance(report.exc_value, KeyboardInterrupt):
            send_again(getattr(signal, getattr(report.exc_value, "signal_name", "SIGINT")))
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


def run_command(main, argv=None, prog=None):
    """Run a command's ``main(argv)`` as a program (``run_main``) and return its exit
    status."""
    return run_main(main, argv, prog or os.path.basename(sys.argv[0]))


def run_main(main, argv=None, prog=None):
    """Run ``main(argv)`` and flush its output; turn input errors, files that cannot be
    written or read, and SIGINT or SIGTERM into one line on stderr and a non-zero status."""
    prog = prog or os.path.basename(sys.argv[0])
    try:
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
    except KeyboardInterrupt as exc:
        name = getattr(exc, "signal_name", "SIGINT")
        saved = getattr(exc, "saved", None)
        sys.stderr.write("\n%s: %s by %s%s%s\n" % (
            prog, "terminated" if name == "SIGTERM" else "interrupted", name,
            "; %s" % saved if saved else "",
            "; --resume continues the run" if getattr(exc, "resumable", False) else ""))
        return 128 + (signal.SIGTERM if name == "SIGTERM" else signal.SIGINT)
    sys.stderr.write("%s: error: %s\n" % (prog, message))
    return 2

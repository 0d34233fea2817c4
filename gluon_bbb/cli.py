"""What the three commands (``train_mnist.py``, ``prune.py``, ``python -m gluon_bbb.evaluate``)
share: argument parsing that reports a bad flag on one line, and ``run_main``, which turns every
error a user can cause into ``prog: error: message`` and exit status 2, never a traceback.

Library errors name config fields (``{learning_rate}``); only here does a field become the flag
that sets it (``--learning-rate``). SIGINT and SIGTERM (what ``kill``, a cluster scheduler or
Dask sends) end a command alike: one line saying what is kept, status 130 or 143 (128 plus the
signal's number, as a shell reports a process ended by it).
"""
import argparse
import os
import signal
import sys

from .errors import GluonBBBError, Interrupted

# fields whose flag is not the field's name with dashes
_FLAGS = {"out_dir": "--out"}


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag on one line (no usage block) and exits with status 2."""

    def error(self, message):
        self.exit(2, "%s: error: %s\n" % (self.prog, message))


def flag_for(field):
    """The command-line flag that sets config field ``field``."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def _terminate(signum, frame):
    raise Interrupted("SIGTERM")


def run_main(main, argv=None, prog=None):
    """Run ``main(argv)`` and flush its output; turn input errors, files that cannot be
    written or read, and SIGINT or SIGTERM into one line on stderr and a non-zero status."""
    prog = prog or os.path.basename(sys.argv[0])
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
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
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stderr.write("%s: error: %s\n" % (prog, message))
    return 2

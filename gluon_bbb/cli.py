"""Shared pieces of the command-line tools: one-line errors and a non-zero exit, never a traceback."""
import argparse
import os
import signal
import sys

from .errors import ConfigError, GluonBBBError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports a bad flag on one line (no usage block) and exits with status 2."""

    def error(self, message):
        self.exit(2, "%s: error: %s\n" % (self.prog, message))


def flag_for(field):
    return "--" + field.replace("_", "-")


def run_main(main, argv=None, prog=None):
    """Run ``main(argv)``; turn input errors, and files that cannot be written or read, into
    ``prog: error: message`` and exit status 2."""
    prog = prog or os.path.basename(sys.argv[0])
    try:
        return main(argv)
    except ConfigError as exc:
        message = "%s must be %s, got %r" % (flag_for(exc.field), exc.requirement, exc.value)
    except GluonBBBError as exc:
        message = str(exc)
    except BrokenPipeError:  # output piped into head or similar: the reader has gone
        # quiet, as a process killed by SIGPIPE is; /dev/null takes Python's flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:  # a disk that fills up or a file that vanishes mid-run
        message = "%s%s" % (exc.strerror or exc, ": %s" % exc.filename if exc.filename else "")
    except KeyboardInterrupt:
        sys.stderr.write("\n%s: interrupted; completed epochs are in the checkpoint\n" % prog)
        return 130
    sys.stderr.write("%s: error: %s\n" % (prog, message))
    return 2

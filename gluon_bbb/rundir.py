"""The run directory: the checks before anything is written into one, and the lock that keeps
two processes from writing into the same one.

A training run, a resume, a prune or an evaluation holds an exclusive ``flock`` on the
directory's ``.lock`` file while it works; a second process on the same directory stops at once
with ``RunDirectoryBusy``, naming the holder's process id. The operating system releases the
lock when its process ends, however it ends, so a killed run leaves no stale lock.
"""
import contextlib
import errno
import fcntl
import os
import tempfile

from .errors import OutputError, RunDirectoryBusy

LOCK_FILE = ".lock"
_held = {}  # real path of a directory this process has locked -> [file, depth]


def check_output_dir(path, flag="--out"):
    """Make ``path`` (and its parents) if needed and check that files can be written in it;
    raise OutputError on one line otherwise. Returns ``path``."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError("%s %s is not a directory" % (flag, path))
    try:
        os.makedirs(path, exist_ok=True)
        # write permission bits say nothing for root or on read-only mounts: try it
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise OutputError("%s %s cannot be written: %s" % (
            flag, path, exc.strerror or exc)) from None
    return path


@contextlib.contextmanager
def locked(path):
    """Hold the exclusive lock on the run directory ``path`` (which must exist) for the
    ``with`` block. Re-entrant within one process."""
    key = os.path.realpath(path)
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    lock_file = open(os.path.join(path, LOCK_FILE), "a+")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        lock_file.seek(0)
        holder = lock_file.read().strip() or "unknown"
        lock_file.close()
        raise RunDirectoryBusy("%s is in use by another process (pid %s); wait for it to end "
                               "or choose another directory" % (path, holder)) from None
    lock_file.seek(0)
    lock_file.truncate()
    lock_file.write("%d\n" % os.getpid())
    lock_file.flush()
    _held[key] = [lock_file, 1]
    try:
        yield
    finally:
        del _held[key]
        lock_file.close()  # releases the lock

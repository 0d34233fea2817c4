"""Atomic, durable writes: every file a command writes (parameters, JSON, PNG) goes through here.

A file is written under a temporary name beside its final one, flushed to disk, renamed onto the
final name and its directory flushed: a reader sees the old file or the new one, never half of
one, even after a power cut. If the write fails (a full disk, an interrupt) the temporary file is
removed, so a failed write leaves the disk as it found it, and a full disk or another operating
system error becomes a one-line ``OutputError`` naming the file. ``signals_deferred`` holds SIGINT
and SIGTERM while files that belong together are written. Imports no MXNet (the sweep's own
process writes its files here too).
"""
import contextlib
import errno
import json
import os
import signal
import threading

from .errors import OutputError

TEMPORARY_SUFFIX = ".tmp"
# Below this many free bytes a failed write whose error carries no errno (MXNet's nd.save says
# only "FileStream.Write incomplete") is put down to the full disk.
_NEARLY_FULL = 1 << 20


def write_atomically(path, write):
    """Call ``write(tmp_path)``, then make its file ``path`` atomically and durably."""
    tmp_path = path + TEMPORARY_SUFFIX
    try:
        write(tmp_path)
        fsync(tmp_path)
        os.replace(tmp_path, path)
        fsync(os.path.dirname(os.path.abspath(path)))
    except BaseException as exc:
        reason = _failure_reason(exc, path)
        _remove(tmp_path)
        if reason is None:
            raise
        raise OutputError("cannot write %s: %s", path, reason) from None


def check_not_an_input(path, inputs, field="out"):
    """OutputError where the file ``path`` is one of ``inputs``, the files a command reads (the
    same file however it is named: links and relative paths included). No command writes over
    a run it reads or its own inputs; each passes what it reads here before it writes."""
    if not os.path.exists(path):
        return path
    for source in inputs:
        if os.path.exists(source) and os.path.samefile(path, source):
            raise OutputError("{%s} %%s is %%s, which this command reads; it is never written "
                              "over: choose another path" % field, path, source)
    return path


def write_json(path, value):
    """Write ``value`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(value, indent=2) + "\n")


def write_text(path, text):
    """Write the string ``text`` to ``path`` atomically."""
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    write_atomically(path, write)


def save_figure(fig, path, dpi=100):
    """Write a matplotlib figure as PNG to ``path`` atomically."""
    write_atomically(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))


def fsync(path):
    """Flush a file or a directory to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _failure_reason(exc, path):
    """What a failed write's message should say, or None to let ``exc`` through (an interrupt
    or a bug). Called before the temporary file is removed, while the disk is still full."""
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "no space left on device"
        return (exc.strerror or str(exc)).lower()
    if not isinstance(exc, Exception):
        return None
    try:
        stats = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < _NEARLY_FULL:
        return "no space left on device"
    return None


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT and SIGTERM until the block ends, then deliver the first that came to the
    handler that was in place (signal handlers belong to the main thread: elsewhere the block
    runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = {signum: signal.signal(signum, lambda signum, frame: received.append(signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            # None: a handler installed outside Python, which cannot be put back
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        if received:
            signal.raise_signal(received[0])

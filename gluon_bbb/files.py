"""Atomic, durable writes: every file a command writes (parameters, JSON, PNG) goes through here.

A file is written under a temporary name beside its final one, flushed to disk, renamed onto the
final name and its directory flushed: a reader sees the old file or the new one, never half of
one, even after a power cut. If the write fails (a full disk, an interrupt) the temporary file is
removed, so a failed write leaves the disk as it found it, and a full disk or another operating
system error becomes a one-line ``OutputError`` naming the file. Imports no MXNet (the sweep's own
process writes its files here too).
"""
import errno
import json
import os

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

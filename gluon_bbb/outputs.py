"""Where a command may write, and how: the one owner of every file the commands write."""
import contextlib
import errno
import json
import os
import signal
import stat
import threading

from .errors import OutputError

TEMPORARY_SUFFIX = ".tmp"
LOCK_SUFFIX = ".lock"
# the file the package writes into every run directory it makes, beside the run's config.json:
# a directory that holds a config.json of another's, by that name, is never taken for a run
RUN_MARKER = ".gluon-bbb-run"
_MARKER_TEXT = b"a run directory of gluon-bbb\n"
# a run written before the marker: a config.json that names a network and its epochs beside a
# checkpoint.params
_LEGACY_FILES, _RUN_FIELDS = ("config.json", "checkpoint.params"), ("network", "epochs")
# Below this many free bytes a failed write whose error carries no errno (MXNet's nd.save says
# only "FileStream.Write incomplete") is put down to the full disk.
_NEARLY_FULL = 1 << 20
# how much of an existing file is read to tell its kind (a JSON report is small)
_KIND_READ_LIMIT = 1 << 24


# What a path is.

def _kind_of_node(mode):
    for test, words in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a file")):
        if test(mode):
            return words
    return "a special file"


def path_problem(path, want="file"):
    """None where ``path`` is a regular file (``want="file"``) or a directory (``"directory"``),
    possibly through links, or does not exist; else what it is, in words (``"a FIFO"``, ``"a
    link to a character device"``): a reader never opens a FIFO (it would wait for a writer)
    or a device as a file."""
    try:
        target = os.stat(path).st_mode
    except OSError:
        return None
    wanted = stat.S_ISREG if want == "file" else stat.S_ISDIR
    if wanted(target):
        return None
    linked = os.path.islink(path)
    return ("a link to " if linked else "") + _kind_of_node(target)


def _lstat(path):
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # nothing there, or no directory above
        return None


class FileKind:
    """What a file a command writes holds, told by its first bytes (``magic``) or its text
    (``check``): an existing file is replaced only by a file of its own kind."""

    def __init__(self, words, magic=None, check=None):
        self.words, self.magic, self.check = words, magic, check

    def holds(self, path):
        """Whether the regular file ``path`` is of this kind."""
        try:
            with open(path, "rb") as f:
                if self.magic is not None:
                    return f.read(len(self.magic)) == self.magic
                data = f.read(_KIND_READ_LIMIT + 1)
        except OSError:
            return False
        if len(data) > _KIND_READ_LIMIT:
            return False
        return self.check(data)

    def __repr__(self):
        return "<FileKind %s>" % self.words


def _json_value(data):
    """The JSON value of ``data`` as the package reads every JSON file (bounded, strict), or
    ``_NOT_JSON``."""
    from .jsonfile import parse
    try:
        return parse(data, "a file", _NotJSON)
    except _NotJSON:
        return _NOT_JSON


class _NotJSON(Exception):
    def __init__(self, template, *values):
        super().__init__(template % values)


_NOT_JSON = object()


def _is_text(data):
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in data


# nd.save's files begin with MXNet's NDArray-list magic, 0x112, as a little-endian uint64
PARAMETERS = FileKind("a parameter file", magic=b"\x12\x01\0\0\0\0\0\0")
PNG = FileKind("a PNG image", magic=b"\x89PNG\r\n\x1a\n")
COMPRESSED = FileKind("a compressed model", magic=b"GLUONBBB")
JSON = FileKind("JSON", check=lambda data: _json_value(data) is not _NOT_JSON)
TEXT = FileKind("text", check=_is_text)
REPORT = FileKind("a report of gluon-bbb", check=lambda data: _report_record(data) is not None)
MARKER = FileKind("gluon-bbb's run marker", magic=_MARKER_TEXT)


class _RunFile(FileKind):
    """A file of a run directory's own (its config.json, its history.json): one in a directory
    the package marks as a run's, or in a run written before the marker; a JSON file of
    another's by that name is kept."""

    def holds(self, path):
        return is_run_directory(os.path.dirname(os.path.abspath(path)))


RUN_CONFIG = _RunFile("a run's config.json")
HISTORY = _RunFile("a run's history.json")


def _is_run_config(value):
    return isinstance(value, dict) and all(field in value for field in _RUN_FIELDS)


def _report_record(data):
    value = _json_value(data)
    return value if isinstance(value, dict) and report_sources(value) is not None else None


def report_sources(record):
    """The runs or files a report (a dict as its JSON holds it) is about, as a frozenset of
    absolute paths: the run directory of its ``checkpoint`` (prune, evaluate), else its
    ``models`` (shift); None for a dict that is not such a report."""
    checkpoint = record.get("checkpoint")
    if isinstance(checkpoint, str):
        return frozenset([_run_of_parameter_file(checkpoint)])
    models = record.get("models")
    if isinstance(models, list) and models and all(isinstance(m, str) for m in models):
        return frozenset(_real(m) for m in models)
    return None


def _run_of_parameter_file(path):
    return _real(path if os.path.isdir(path) else os.path.dirname(path) or ".")


def _real(path):
    return os.path.realpath(os.path.abspath(path))


# Rule 3: runs.

def is_run_directory(path):
    """Whether the directory ``path`` holds a run: the marker the package writes (``mark_run``),
    or, for a run written before it, a config.json naming a network and its epochs beside a
    checkpoint.params."""
    marker = os.path.join(path, RUN_MARKER)
    if _is_regular(marker):
        return MARKER.holds(marker)
    config, checkpoint = (os.path.join(path, name) for name in _LEGACY_FILES)
    if not (_is_regular(config) and _is_regular(checkpoint)):
        return False
    try:
        with open(config, "rb") as f:
            value = _json_value(f.read(_KIND_READ_LIMIT))
    except OSError:
        return False
    return _is_run_config(value)


def _is_regular(path):
    found = _lstat(path)
    return found is not None and stat.S_ISREG(found.st_mode)


def mark_run(directory):
    """Write the marker of a run directory into ``directory`` (a run's, claimed and locked)."""
    path = os.path.join(directory, RUN_MARKER)
    if not _is_regular(path):
        write_text(path, _MARKER_TEXT.decode(), MARKER)


def enclosing_run(path):
    """The nearest directory at or above ``path`` (resolved) that holds a run, or None."""
    here = _real(path)
    while True:
        if os.path.isdir(here) and is_run_directory(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def check_outside_other_runs(path, own_runs=(), field="out", words="is"):
    """OutputError where ``path`` is, or lies inside, a run directory other than those of
    ``own_runs`` (paths of the runs the command works or reports on)."""
    run = enclosing_run(path)
    if run is None or any(run == _real(own) for own in own_runs):
        return
    where = "holds the run" if run == _real(path) else "lies inside the run directory"
    # the runs the command reads, where they are not the output itself (a run it trains)
    read = [own for own in own_runs if _real(own) != _real(path)]
    about = (" (this command works on %s)" % ", ".join(read)) if read else ""
    raise OutputError("{%s} %%s %s %%s%s: no command writes into another run's directory; "
                      "choose another path" % (field, where, _literal(about)), path, run)


def _literal(text):
    return text.replace("%", "%%").replace("{", "{{").replace("}", "}}")


# Rules 1 and 2: each file.

def check_replaceable(path, kind, field=None, sources=None):
    """OutputError unless ``path`` may be written as a file of ``kind``: it does not exist, or
    it is a regular file (not a link) of that kind, and, for a report, one on ``sources`` (the
    frozenset ``report_sources`` gives)."""
    named = ("{%s} %%s" % field) if field else "%s"
    found = _lstat(path)
    if found is None:
        return path
    if stat.S_ISLNK(found.st_mode):
        raise OutputError(named + " is a link: a command never writes through or over a link; "
                          "name the file itself or another path", path)
    if not stat.S_ISREG(found.st_mode):
        raise OutputError(named + " is %s, not a file a command may replace; choose another "
                          "path", path, _kind_of_node(found.st_mode))
    if not kind.holds(path):
        raise OutputError(named + " holds something other than %s; it is never replaced: "
                          "choose another path or remove it", path, kind.words)
    # a run's own directory holds its reports, wherever the run was copied or moved to (their
    # record names where it was trained); rule 3 keeps every other run's command out of it
    if kind is REPORT and sources is not None and not is_run_directory(
            os.path.dirname(os.path.abspath(path))):
        with open(path, "rb") as f:
            before = report_sources(_report_record(f.read(_KIND_READ_LIMIT)))
        if before != sources:
            raise OutputError(named + " is a report on %s, not on %s: it is never replaced by "
                              "a report on another run; choose another path or remove it",
                              path, ", ".join(sorted(before)), ", ".join(sorted(sources)))
    return path


def check_not_an_input(path, inputs, field="out"):
    """OutputError where the file ``path`` is one of ``inputs``, the files a command reads (the
    same file however it is named: links and relative paths included)."""
    if not os.path.exists(path):
        return path
    for source in inputs:
        if os.path.exists(source) and os.path.samefile(path, source):
            raise OutputError("{%s} %%s is %%s, which this command reads; it is never written "
                              "over: choose another path" % field, path, source)
    return path


# Directories.

def make_directory(path, field="out_dir"):
    """Make the directory ``path`` and its parents where needed and check that files can be
    made in it; returns the directories made (the deepest last), for ``remove_made``.
    OutputError on one line where it is something else or cannot be written."""
    if not isinstance(path, str) or not path.strip():
        from .errors import ConfigError
        raise ConfigError(field, path, "a directory path")
    problem = path_problem(path, "directory")
    if problem:
        raise OutputError("{%s} %%s is %%s, not a directory" % field, path, problem)
    made, here = [], os.path.abspath(path)
    while not os.path.lexists(here):
        made.append(here)
        here = os.path.dirname(here)
    made.reverse()
    try:
        for directory in made:
            os.mkdir(directory)
        # write permission bits say nothing for root or on read-only mounts: try it
        fd = os.open(os.path.join(path, ".%d.probe%s" % (os.getpid(), TEMPORARY_SUFFIX)),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        os.remove(os.path.join(path, ".%d.probe%s" % (os.getpid(), TEMPORARY_SUFFIX)))
    except OSError as exc:
        remove_made(made)
        raise OutputError("{%s} %%s cannot be written: %%s" % field, path,
                          _reason(exc)) from None
    return made


def remove_made(made):
    """Remove the directories ``make_directory`` made, deepest first, where they are empty."""
    for directory in reversed(made):
        try:
            os.rmdir(directory)
        except OSError:
            return


def claim_directory(path, files, field="out", own_runs=(), sources=None):
    """Check that the command may write ``files`` (``{name: FileKind}``) into the directory
    ``path``: a directory or nothing yet, not inside another run's directory than ``own_runs``
    (rule 3), each name replaceable (rules 1 and 2; reports only over reports on ``sources``).
    Makes nothing."""
    problem = path_problem(path, "directory")
    if problem:
        raise OutputError("{%s} %%s is %%s, not a directory" % field, path, problem)
    check_outside_other_runs(path, own_runs, field)
    for name, kind in files.items():
        check_replaceable(os.path.join(path, name), kind, None, sources)


# Rule 5: locks.

def open_lock_file(path):
    """The lock file ``path`` opened for reading and writing, made if absent, never through a
    link or onto a special file (OutputError)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError("%s is a link: a command never writes through or over a link; "
                              "remove it", path) from None
        raise OutputError("cannot write %s: %s", path, _reason(exc)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        kind = _kind_of_node(os.fstat(fd).st_mode)
        os.close(fd)
        raise OutputError("%s is %s, not a lock file; remove it", path, kind)
    return os.fdopen(fd, "r+b", buffering=0)


def write_holder(lock, path):
    """Write this process's id into the lock file ``lock`` (opened by ``open_lock_file`` at
    ``path``), for a second process to name it; OutputError naming the file where it cannot be
    written (a full disk)."""
    try:
        os.ftruncate(lock.fileno(), 0)
        os.pwrite(lock.fileno(), b"%d\n" % os.getpid(), 0)
    except OSError as exc:
        raise OutputError("cannot write %s: %s", path, _reason(exc)) from None


def lock_holder(lock):
    """The process id a lock file holds, as text ("unknown" where it holds none)."""
    try:
        return os.pread(lock.fileno(), 64, 0).decode("ascii", "replace").strip() or "unknown"
    except OSError:
        return "unknown"


@contextlib.contextmanager
def claim_file(path, kind, field="out", inputs=(), own_runs=()):
    """Claim the single file ``path`` that a command writes as ``kind`` for the ``with``
    block: checked by rules 1 to 4 and locked (``.NAME.lock`` beside it, removed at the end),
    so that a second command writing the same file stops at once, naming the first."""
    from .errors import ConfigError
    if not path.strip():
        raise ConfigError(field, path, "a file's path")
    if os.path.isdir(path):
        raise ConfigError(field, path, "a file's path, not a directory")
    check_not_an_input(path, inputs, field)
    check_outside_other_runs(path, own_runs, field)
    check_replaceable(path, kind, field)
    with locked_beside(path, field):
        yield path


@contextlib.contextmanager
def locked_beside(path, field="out"):
    """Hold ``.NAME.lock`` beside ``path`` (its directory made where it is missing) for the
    ``with`` block, so that a second command writing ``path`` stops at once, naming the
    first; the lock is removed at the end."""
    from .errors import RunDirectoryBusy
    directory = os.path.dirname(os.path.abspath(path))
    made = make_directory(directory, field)
    try:
        lock_path = os.path.join(directory, "." + os.path.basename(os.path.abspath(path))
                                 + LOCK_SUFFIX)
        lock = _locked_file(lock_path)
        if lock is None:
            raise RunDirectoryBusy("%s is being written by another process (its lock %s is "
                                   "held); wait for it to end or choose another path", path,
                                   lock_path)
    except BaseException:
        remove_made(made)
        raise
    try:
        yield
    finally:
        # unlinked while held: a process that opens the old name finds it gone and retries
        with contextlib.suppress(OSError):
            os.remove(lock_path)
        lock.close()


def _locked_file(path):
    """The lock file ``path`` opened and locked, or None where another process holds it; a lock
    file removed by its holder between our open and our lock is opened again."""
    import fcntl
    while True:
        lock = open_lock_file(path)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock.close()
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return None
            raise
        found = _lstat(path)
        if found is not None and found.st_ino == os.fstat(lock.fileno()).st_ino:
            try:
                write_holder(lock, path)
            except OutputError:
                _remove(path)
                lock.close()
                raise
            return lock
        lock.close()


# Rule 6: writing.

def append_line(path, line):
    """Append ``line`` to the text file ``path`` (made if absent), never through a link or into
    a special file (OutputError)."""
    check_replaceable(path, TEXT)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "a") as f:
            f.write(line + "\n")
    except OSError as exc:
        raise OutputError("cannot write %s: %s", path, _reason(exc)) from None


def write_atomically(path, write, kind, sources=None):
    """Call ``write(tmp_path)``, then make its file ``path`` atomically and durably, where
    ``path`` may be replaced by a file of ``kind`` (``check_replaceable``)."""
    check_replaceable(path, kind, None, sources)
    directory = os.path.dirname(os.path.abspath(path))
    tmp_path = None
    try:
        tmp_path = _new_temporary(path)
        write(tmp_path)
        fsync(tmp_path)
        check_replaceable(path, kind, None, sources)  # nothing else took the name meanwhile
        os.replace(tmp_path, path)
        tmp_path = None
        fsync(directory)
    except BaseException as exc:
        reason = _failure_reason(exc, path, tmp_path)
        if tmp_path is not None:
            _remove(tmp_path)
        if reason is None:
            raise
        raise OutputError("cannot write %s: %s", path, reason) from None


def _new_temporary(path):
    """A new empty regular file beside ``path``, named ``path`` + ``.tmp``: whatever held that
    name (a stale temporary, a link, a FIFO) is unlinked first, never opened."""
    tmp_path = path + TEMPORARY_SUFFIX
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp_path)
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    os.close(fd)
    return tmp_path


def write_json(path, value, kind=JSON):
    """Write ``value`` as indented JSON to ``path`` atomically (a ``REPORT`` replaces only a
    report on its own ``report_sources``); OutputError where it holds NaN or infinity, which
    strict JSON readers refuse (nothing is written)."""
    try:
        text = json.dumps(value, indent=2, allow_nan=False) + "\n"
    except ValueError:
        raise OutputError("cannot write %s: a figure in it is NaN or infinite; nothing is "
                          "written", path) from None
    write_text(path, text, kind, report_sources(value) if kind is REPORT else None)


def write_text(path, text, kind=TEXT, sources=None):
    """Write the string ``text`` to ``path`` atomically."""
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    write_atomically(path, write, kind, sources)


def save_figure(fig, path, dpi=100):
    """Write a matplotlib figure as PNG to ``path`` atomically."""
    write_atomically(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"), PNG)


def fsync(path):
    """Flush a file or a directory to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _reason(exc):
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on device"
    if exc.errno == errno.EFBIG:
        return _FILE_SIZE_LIMIT % _file_size_limit()
    return (exc.strerror or str(exc)).lower()


_FILE_SIZE_LIMIT = ("file too large: the process may write files of %s bytes at most (its "
                    "file-size limit, ulimit -f)")


def _file_size_limit():
    """The process's file-size limit in bytes (``RLIMIT_FSIZE``), or None where it has none."""
    import resource
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _failure_reason(exc, path, tmp_path=None):
    """What a failed write's message should say, or None to let ``exc`` through (an interrupt,
    a refusal, a bug). An error without an errno (MXNet's nd.save says only "FileStream.Write
    incomplete") is put down to the file-size limit where the file it wrote reached it, and to
    a full disk where there is no room left."""
    if isinstance(exc, OutputError):
        return None
    if isinstance(exc, OSError):
        return _reason(exc)
    if not isinstance(exc, Exception):
        return None
    limit = _file_size_limit()
    try:
        if limit is not None and tmp_path and os.path.getsize(tmp_path) >= limit - _NEARLY_FULL:
            return _FILE_SIZE_LIMIT % limit
        stats = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return None
    if stats.f_bavail * stats.f_frsize < _NEARLY_FULL:
        return "no space left on device"
    return None


def _remove(path):
    with contextlib.suppress(OSError):
        os.remove(path)


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

"""The two ways the tests run the package's commands.

``run(CMD, *args)`` calls the command's ``run(argv, prog)`` in this process, as its program
does (``cli.run_main``: its one-line errors, its exit status), and returns what a process would
(``returncode``, ``stdout``, ``stderr``): a command's refusals and files are shown so in a
fraction of the time a process takes. ``run_process`` and ``start`` run it as a user does, in a
subprocess with a user's plain environment and signals, for the tests where the process is what
is tested (signals, closed streams, the interpreter's variables, an installed wheel).

This machine's shell (and pytest's own process, once gluon_bbb is imported) sets variables a
user's shell does not have: PYTHONUNBUFFERED changes when a closed pipe is noticed, and the
package's own OMP_NUM_THREADS, MXNET_USE_OPERATOR_TUNING and MXNET_ENGINE_TYPE defaults must be
found by the command itself. ``user_env`` drops them; the data directory ($GLUON_BBB_DATA)
stays. A test run started in the background (``pytest &``, a CI runner) has SIGINT ignored,
which its children would inherit; a command starts here with SIGINT's default, as from a
terminal (in this process too: conftest.py).
"""
import contextlib
import importlib
import io
import os
import signal
import struct
import subprocess
import sys
import threading
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


class Command(list):
    """A command's argv as a process runs it (a list, to extend with its flags), and the module
    and name it runs under in this process."""

    def __init__(self, argv, module, prog):
        super().__init__(argv)
        self.module, self.prog = module, prog


def _module(name, prog=None):
    return Command([PYTHON, "-m", "gluon_bbb.commands." + name], name,
                   prog or "gluon-bbb " + name)


# the wrappers at the top of a checkout, as README runs them, and the package's modules
TRAIN = Command([PYTHON, os.path.join(ROOT, "train_mnist.py")], "train", "train_mnist.py")
PRUNE = Command([PYTHON, os.path.join(ROOT, "prune.py")], "prune", "prune.py")
EVALUATE, COMPRESS, PREDICT, SHIFT, REGRESSION, SWEEP = (
    _module(name) for name in ("evaluate", "compress", "predict", "shift", "regression",
                               "sweep"))
BENCH = [PYTHON, os.path.join(ROOT, "bench", "bench_train.py")]
_NOT_IN_A_USERS_SHELL = ("OMP_NUM_THREADS", "MXNET_USE_OPERATOR_TUNING", "MXNET_ENGINE_TYPE",
                         "MXNET_MKLDNN_CACHE_NUM")
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # the worker's share of the cores (conftest.py), not the package's default of all of them
    _NOT_IN_A_USERS_SHELL = _NOT_IN_A_USERS_SHELL[1:]


def user_env(**extra):
    """os.environ without Python's behaviour variables and the package's defaults, plus
    ``extra`` (a value of None removes the variable)."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("PYTHON") and name not in _NOT_IN_A_USERS_SHELL}
    env.update(extra)
    return {name: value for name, value in env.items() if value is not None}


@contextlib.contextmanager
def _environment(changes, cwd):
    """os.environ with ``changes`` (None removes) and the working directory ``cwd`` for the
    block; both as they were after it, whatever the command set."""
    saved, here = dict(os.environ), os.getcwd()
    for name, value in (changes or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)
    if cwd is not None:
        os.chdir(str(cwd))
    try:
        yield
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)


def _shown(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def run(cmd, *args, env=None, cwd=None, timeout=None):
    """``cmd`` (a ``Command``) with ``args`` run to its end in this process, in ROOT (or
    ``cwd``) with ``env``'s changes, as ``captured`` runs it. Any other argv runs as a process
    (``run_process``)."""
    if not isinstance(cmd, Command):
        return run_process(cmd, *args, env=env, cwd=cwd, timeout=timeout or 300)
    argv = [str(a) for a in args]
    module = importlib.import_module("gluon_bbb.commands." + cmd.module)
    with _environment(env, ROOT if cwd is None else cwd):
        status, out, err = captured(lambda: module.run(argv, prog=cmd.prog))
    return subprocess.CompletedProcess(list(cmd) + argv, status, out, err)


def captured(call):
    """``(status, stdout, stderr)`` of ``call()``, a command's ``run`` or ``cli.run_main``: what
    it wrote to sys.stdout and sys.stderr, Python's warnings shown there as a process shows
    them, argparse's exit taken as the status; a signal the command sent itself again after it
    ended (``cli``'s re-sent interrupt, on a timer) dropped, as the ended process would."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        warnings.simplefilter("default")
        warnings.showwarning = _shown
        try:
            status = call()
        except SystemExit as exc:  # argparse's refusal and --help, as the process exits
            status = exc.code if isinstance(exc.code, int) else 1
        finally:
            handlers = {signum: signal.signal(signum, signal.SIG_IGN)
                        for signum in (signal.SIGINT, signal.SIGTERM)}
            for thread in threading.enumerate():
                if isinstance(thread, threading.Timer):
                    thread.join()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    return status, out.getvalue(), err.getvalue()


def _as_from_a_terminal():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(cmd, *args, env=None, **kwargs):
    """``cmd`` with ``args`` started as a process in ROOT (a ``Popen``), its output piped as
    text."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("cwd", ROOT)
    return subprocess.Popen(list(cmd) + [str(a) for a in args], text=True,
                            env=user_env(**(env or {})), preexec_fn=_as_from_a_terminal,
                            **kwargs)


def run_process(cmd, *args, env=None, timeout=300, **kwargs):
    """``cmd`` with ``args`` run as a process to its end in ROOT, its output captured as
    text."""
    kwargs.setdefault("cwd", ROOT)
    kwargs["cwd"] = kwargs["cwd"] or ROOT
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("preexec_fn", _as_from_a_terminal)
    return subprocess.run(list(cmd) + [str(a) for a in args], text=True, timeout=timeout,
                          env=user_env(**(env or {})), **kwargs)


def stopped_by(prog, name):
    """The start of the line a command ends on when signal ``name`` stops it."""
    return "%s: %s by %s" % (prog, "terminated" if name == "SIGTERM" else "interrupted", name)


def assert_one_line_error(proc, expected, status=2):
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert expected in lines[0], lines[0]


def mnist_copy(directory, changed_pixel=False):
    """``directory`` (made) holding $GLUON_BBB_DATA's four MNIST files: links to them, or, with
    ``changed_pixel``, the first test image's first pixel changed (written uncompressed): files
    of MNIST's shapes and other contents, as Fashion-MNIST's are."""
    from gluon_bbb.data import IDX_FILES, find_idx_file, read_idx
    os.makedirs(directory)
    for stem in IDX_FILES.values():
        path = find_idx_file(os.environ["GLUON_BBB_DATA"], stem)
        if changed_pixel and stem.startswith("t10k-images"):
            images = read_idx(path, ndim=3).copy()
            images[0, 0, 0] ^= 1
            header = struct.pack(">4I", 0x803, *images.shape)
            with open(os.path.join(directory, stem), "wb") as f:
                f.write(header + images.tobytes())
        else:
            os.symlink(os.path.abspath(path), os.path.join(directory, os.path.basename(path)))
    return directory

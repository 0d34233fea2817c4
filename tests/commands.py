"""The one way the tests run the package's commands: as a user does, in a subprocess, with a
user's plain environment and signals.

This machine's shell (and pytest's own process, once gluon_bbb is imported) sets variables a
user's shell does not have: PYTHONUNBUFFERED changes when a closed pipe is noticed, and the
package's own OMP_NUM_THREADS, MXNET_USE_OPERATOR_TUNING and MXNET_ENGINE_TYPE defaults must be
found by the command itself. ``user_env`` drops them; the data directory ($GLUON_BBB_DATA)
stays. A test run started in the background (``pytest &``, a CI runner) has SIGINT ignored,
which its children would inherit; a command starts here with SIGINT's default, as from a
terminal.
"""
import os
import signal
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
# the wrappers at the top of a checkout, as README runs them, and the package's modules
TRAIN = [PYTHON, os.path.join(ROOT, "train_mnist.py")]
PRUNE = [PYTHON, os.path.join(ROOT, "prune.py")]
EVALUATE = [PYTHON, "-m", "gluon_bbb.commands.evaluate"]
COMPRESS = [PYTHON, "-m", "gluon_bbb.commands.compress"]
PREDICT = [PYTHON, "-m", "gluon_bbb.commands.predict"]
SHIFT = [PYTHON, "-m", "gluon_bbb.commands.shift"]
REGRESSION = [PYTHON, "-m", "gluon_bbb.commands.regression"]
SWEEP = [PYTHON, "-m", "gluon_bbb.commands.sweep"]
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


def _as_from_a_terminal():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(cmd, *args, env=None, **kwargs):
    """``cmd`` with ``args`` started in ROOT (a ``Popen``), its output piped as text."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("cwd", ROOT)
    return subprocess.Popen(list(cmd) + [str(a) for a in args], text=True,
                            env=user_env(**(env or {})), preexec_fn=_as_from_a_terminal,
                            **kwargs)


def run(cmd, *args, env=None, timeout=300, **kwargs):
    """``cmd`` with ``args`` run to its end in ROOT, its output captured as text."""
    kwargs.setdefault("cwd", ROOT)
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(list(cmd) + [str(a) for a in args], text=True, timeout=timeout,
                          env=user_env(**(env or {})), preexec_fn=_as_from_a_terminal, **kwargs)


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
    for stem, _ in IDX_FILES.values():
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

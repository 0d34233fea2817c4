"""Running the three commands as a user does: in a subprocess, with a user's plain environment.

This machine's shell (and pytest's own process, once gluon_bbb is imported) sets variables a
user's shell does not have: PYTHONUNBUFFERED changes when a closed pipe is noticed, and the
package's own OMP_NUM_THREADS and MXNET_USE_OPERATOR_TUNING defaults must be found by the command
itself. ``user_env`` drops them; the data directory ($GLUON_BBB_DATA) stays.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = [sys.executable, os.path.join(ROOT, "train_mnist.py")]
PRUNE = [sys.executable, os.path.join(ROOT, "prune.py")]
EVALUATE = [sys.executable, "-m", "gluon_bbb.evaluate"]
_NOT_IN_A_USERS_SHELL = ("OMP_NUM_THREADS", "MXNET_USE_OPERATOR_TUNING")


def user_env(**extra):
    """os.environ without Python's behaviour variables and the package's defaults, plus
    ``extra``."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("PYTHON") and name not in _NOT_IN_A_USERS_SHELL}
    env.update(extra)
    return env


def run(cmd, *args, env=None, timeout=300, **kwargs):
    """``cmd`` with ``args`` in ROOT, its output captured as text."""
    return subprocess.run(list(cmd) + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=user_env(**(env or {})), **kwargs)


def assert_one_line_error(proc, expected, status=2):
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert expected in lines[0], lines[0]

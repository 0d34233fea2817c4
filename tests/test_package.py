"""The package as a user installs it: what importing it loads, MXNet with today's NumPy and its
engine, the console entry point, no import cycle, and a wheel installed (not editable) in a fresh
virtual environment running every command from a directory outside the checkout."""
import json
import os
import shutil
import sys
import sysconfig

import pytest

from commands import PYTHON, ROOT, TRAIN, run, run_process
from conftest import SMALL


# The MXNet tutorial's first cell, as it is written, then the library beside it.
TUTORIAL_CELL = """from __future__ import print_function
import collections
import mxnet as mx
import numpy as np
from mxnet import nd, autograd
from matplotlib import pyplot as plt
"""
BESIDE_IT = """
from gluon_bbb import (init_variational_params, layer_param_shapes, sample_epsilons,
                       transform_gaussian_samples, transform_rhos)
shapes = layer_param_shapes(4, 3, 1, 2)
mus, rhos = init_variational_params(shapes, mx.cpu(), seed=0)
weights = transform_gaussian_samples(mus, transform_rhos(rhos), sample_epsilons(shapes, mx.cpu()))
print(len(weights), np.__version__)
"""


# A Gluon trainer of IVON, and the engine MXNet started with
IVON_AND_THE_ENGINE = """
from mxnet import gluon
dense = gluon.nn.Dense(3, in_units=4)
dense.initialize()
import os
print(type(gluon.Trainer(dense.collect_params(), "ivon", {"learning_rate": 0.1, "ess": 100})
           ._optimizer).__name__, os.environ["MXNET_ENGINE_TYPE"])
"""
GLUON_BBB_FIRST = ("import gluon_bbb\nimport sys\nassert 'mxnet' not in sys.modules\n"
                   "import mxnet as mx\nimport numpy as np\n")


@pytest.mark.parametrize("first, env, engine", [
    (TUTORIAL_CELL, {}, "NaiveEngine"), (GLUON_BBB_FIRST, {}, "NaiveEngine"),
    # with the user's warnings as errors, MXNet loaded by the package (its own import warns)
    (GLUON_BBB_FIRST.replace("import mxnet", "from gluon_bbb import Config, net\nimport mxnet"),
     {"PYTHONWARNINGS": "error"}, "NaiveEngine"),
    # a user's engine is kept
    (GLUON_BBB_FIRST, {"MXNET_ENGINE_TYPE": "ThreadedEngine"}, "ThreadedEngine")])
def test_any_import_order_works_in_a_fresh_process(first, env, engine):
    """The library beside the tutorial's cell or before MXNet, IVON among MXNet's optimizers
    either way, the package's engine (or the user's), and MXNet's line about it not written."""
    proc = run([PYTHON, "-c", first + BESIDE_IT + IVON_AND_THE_ENGINE], env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    count, version, name, started = proc.stdout.split()
    # MXNet 1.9.1 imports only under a NumPy before 1.24, which setup.cfg requires
    assert count == "4" and tuple(map(int, version.split(".")[:2])) < (1, 24)
    assert (name, started) == ("IVON", engine)


@pytest.mark.parametrize("users, ctx, engine", [
    (None, "cpu", "NaiveEngine"), (None, " GPU:1", "ThreadedEnginePerDevice"),
    ("NaiveEngine", "gpu", "NaiveEngine"), ("ThreadedEngine", "cpu", "ThreadedEngine")])
def test_a_command_on_a_gpu_keeps_mxnets_threaded_engine(monkeypatch, users, ctx, engine):
    import gluon_bbb
    from gluon_bbb.commands.cli import load_mxnet
    monkeypatch.setattr(gluon_bbb, "_ENGINE_CHOSEN_HERE", users is None)
    monkeypatch.setenv("MXNET_ENGINE_TYPE", users or "NaiveEngine")
    load_mxnet(ctx)
    assert os.environ["MXNET_ENGINE_TYPE"] == engine


def test_only_the_engines_line_is_dropped_from_what_mxnet_writes_as_it_starts():
    code = ("import os, gluon_bbb\nwith gluon_bbb._engine_line_dropped():\n"
            "    os.write(2, b'[07:00:00] engine.cc:54: MXNet start using engine: NaiveEngine\\n"
            "a warning\\n')\nos.write(2, b'after\\n')\n")
    proc = run([PYTHON, "-c", code])
    assert (proc.returncode, proc.stderr) == (0, "a warning\nafter\n")
    # with descriptor 2 closed there is nothing to hold, and MXNet still loads
    closed = run(["/bin/sh", "-c", '"$0" -c "import gluon_bbb, os; '
                  'print(gluon_bbb.mxnet_load_error(), os.environ[\'MXNET_ENGINE_TYPE\'])" 2>&-',
                  PYTHON])
    assert (closed.returncode, closed.stdout) == (0, "None NaiveEngine\n")


@pytest.mark.slow
def test_training_gives_the_same_bits_on_either_engine(tmp_path):
    # the package's NaiveEngine runs MXNet's operators in the main thread, with the same
    # OpenMP threads as the threaded engine gives each: the same arithmetic in the same order,
    # MXNet's own draws (dropout's masks) included
    flags = ["--network", "conv:8:5,relu,pool:2,dense:10", "--model", "mcdropout",
             "--optimizer", "adam"]
    runs = {}
    for engine in ("NaiveEngine", "ThreadedEnginePerDevice"):
        out = tmp_path / engine
        proc = run_process(TRAIN, "--epochs", "1", "--out", out, "--seed", "5", "--test-samples",
                           "0", *SMALL[:4], *flags,
                           env={"MXNET_ENGINE_TYPE": engine})
        assert proc.returncode == 0, proc.stderr
        runs[engine] = (out / "checkpoint.params").read_bytes()
    assert runs["NaiveEngine"] == runs["ThreadedEnginePerDevice"]


COMMAND_MODULES = tuple("commands." + name for name in (
    "train", "prune", "evaluate", "regression", "sweep", "compress", "predict", "shift")) + (
    "__main__",)


def test_importing_a_command_loads_neither_mxnet_nor_matplotlib():
    # a command checks its flags and has its SIGINT/SIGTERM handler in place a fraction of a
    # second after it starts; the heavy libraries load after that, where they are needed
    code = ("import importlib, sys; importlib.import_module(sys.argv[1]); "
            "print(*[name for name in ('mxnet', 'matplotlib') if name in sys.modules])")
    for name in COMMAND_MODULES:
        proc = run([PYTHON, "-c", code, "gluon_bbb." + name])
        assert (proc.returncode, proc.stdout.strip()) == (0, ""), (name, proc.stdout, proc.stderr)


def test_the_console_entry_point_lists_the_commands():
    proc = run([PYTHON, "-m", "gluon_bbb", "--help"])
    assert proc.returncode == 0
    for name in ("train", "prune", "evaluate", "regression", "sweep", "compress", "predict",
                 "shift"):
        assert "\n  %s " % name in proc.stdout


SHIPPED = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "gluon_bbb")


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_environment_runs_every_command(tmp_path, mnist):
    # the wheel, built from the files a release ships
    source = tmp_path / "source"
    source.mkdir()
    for name in SHIPPED:
        copy = shutil.copytree if os.path.isdir(os.path.join(ROOT, name)) else shutil.copy
        copy(os.path.join(ROOT, name), source / name,
             **({"ignore": shutil.ignore_patterns("__pycache__", "*.so")}
                if name == "gluon_bbb" else {}))
    # its native libraries the checkout's own (built from the same sources by the install;
    # the library checks it matches them as it loads): compiling them again takes 10 s
    built = source / "build" / ("lib.%s-%s" % (sysconfig.get_platform(),
                                               sys.implementation.cache_tag))
    native = built / "gluon_bbb" / "native"
    native.mkdir(parents=True)
    for name in os.listdir(os.path.join(ROOT, "gluon_bbb", "native")):
        if name.endswith(".so"):
            shutil.copy(os.path.join(ROOT, "gluon_bbb", "native", name), native / name)
    proc = run([PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                tmp_path / "dist", source], timeout=600)
    assert proc.returncode == 0, proc.stderr
    wheel, = (tmp_path / "dist").iterdir()
    # a fresh environment: the wheel installed into it, its dependencies (MXNet, NumPy,
    # matplotlib, distributed) lent by this one's site-packages without its gluon_bbb
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", venv]).returncode == 0
    python = str(venv / "bin" / "python")
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    site = site.stdout.strip()
    with open(os.path.join(site, "lent-dependencies.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    assert run([PYTHON, "-m", "pip", "--python", python, "install", "--no-deps", "-q",
                wheel], timeout=300).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "%s:%s" % (venv / "bin", os.environ["PATH"])}

    def command(*args):
        proc = run(list(args), cwd=elsewhere, env=env, timeout=300)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc

    where = command(python, "-c", "import gluon_bbb, gluon_bbb.native.library as n; "
                    "print(gluon_bbb.__file__, n.available())").stdout.split()
    assert where[0].startswith(str(venv)) and where[1] == "True"  # the wheel's, kernels built
    small = ["--train-size", "256", "--num-hidden-units", "8", "--epochs", "1", "--seed", "0",
             "--validation", "1000"]
    command("gluon-bbb", "train", "--out", "run", "--test-samples", "2", *small)
    command(python, "-m", "gluon_bbb.commands.prune", "--checkpoint", "run", "--proportions",
            "0", "0.5")
    command("gluon-bbb", "evaluate", "--checkpoint", "run", "--test-samples", "2")
    command("gluon-bbb", "compress", "run", "--proportion", "0.5", "--out", "model.gbbb")
    idx = os.path.join(os.environ["GLUON_BBB_DATA"], "t10k-images-idx3-ubyte")
    predictions = json.loads(command("gluon-bbb", "predict", "model.gbbb", idx,
                                     "--json").stdout)["predictions"]
    assert len(predictions) == 1000
    command("gluon-bbb", "regression", "--data", "quartic", "--epochs", "50",
            "--test-samples", "5", "--out", "quartic")
    command("gluon-bbb", "shift", "run", "--out", "shift", "--test-size", "50",
            "--test-samples", "2")
    assert "--threads-per-trial" in command("gluon-bbb", "sweep", "--help").stdout
    for name in ("run/checkpoint.params", "run/pruning.json", "run/uncertainty.json",
                 "quartic/metrics.json", "shift/shift-rotation.json"):
        assert (elsewhere / name).exists(), name


def package_imports():
    """{module: the modules of gluon_bbb it imports}, dotted below the package
    (``learning.config``), function-level imports included, read from the source."""
    import ast
    package = os.path.join(ROOT, "gluon_bbb")
    modules = {}
    for directory, _, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                parts = os.path.relpath(os.path.join(directory, name), package)[:-3].split(os.sep)
                modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = (
                    os.path.join(directory, name), parts[-1] == "__init__")
    edges = {}
    for module, (path, is_package) in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read())
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = [] if base == [""] else base
        found = set()
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.level:
                anchor = base[:len(base) - node.level + 1]
                stem = anchor + (node.module.split(".") if node.module else [])
                targets = [".".join(stem)] + [".".join(stem + [a.name]) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gluon_bbb."):
                stem = node.module.split(".")[1:]
                targets = [".".join(stem)] + [".".join(stem + [a.name]) for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name[len("gluon_bbb."):] for a in node.names
                           if a.name.startswith("gluon_bbb.")]
            found.update(t for t in targets if t in modules and t != module and t)
        edges[module] = found
    return edges


def test_no_module_of_the_package_imports_another_in_a_circle():
    edges = package_imports()
    # it reads them
    assert "family.priors" in edges["learning.config"]
    assert "family.elementwise" in edges["family.priors"]
    reach = {module: set(deps) for module, deps in edges.items()}
    changed = True
    while changed:  # the transitive closure
        changed = False
        for module, reached in reach.items():
            more = set().union(*(reach[d] for d in reached)) - reached
            if more:
                reached |= more
                changed = True
    circles = sorted(module for module, reached in reach.items() if module in reached)
    assert circles == []
    # the leaf modules the formulas and the C kernels' table live in import nothing of it but
    # its errors, which import nothing of it
    assert edges["errors"] == set() and edges["native.table"] == set()
    assert edges["family.elementwise"] <= {"errors"}


@pytest.mark.parametrize("cgroup, files, expected", [
    ("0::/box\n", {"sys/fs/cgroup/box/cpu.max": "100000 100000\n"}, 1),
    ("0::/box\n", {"sys/fs/cgroup/box/cpu.max": "150000 100000\n"}, 2),
    ("0::/box\n", {"sys/fs/cgroup/box/cpu.max": "max 100000\n"}, None),
    ("4:cpu,cpuacct:/job\n", {"sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "50000\n",
                             "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"}, 1),
    ("4:cpu,cpuacct:/job\n", {"sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us": "-1\n",
                             "sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us": "100000\n"},
     None),
    ("0::/box\n", {}, None)])
def test_the_default_thread_count_follows_a_cgroups_cpu_quota(tmp_path, cgroup, files, expected):
    import gluon_bbb
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text(cgroup)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    cores = len(os.sched_getaffinity(0))
    assert gluon_bbb.cpus_granted(str(tmp_path)) == (cores if expected is None
                                                     else min(cores, expected))

"""Words that name what exists: every module, class, function and file of the package that a
docstring, comment, message or document names is one the package has (cross-cutting, beside the
documents' tests in test_readme.py).

A name is read where it is written as code: ``module.name``, ``gluon_bbb.a.b``, ``Class.attr``
and ``path/file.py``, in the package's docstrings, comments and string literals, the C and C++
comments, README and docs/. ``module`` is a module of the package by its file's name (``layers``,
``priors``) or a module it once had (git's history of ``gluon_bbb/``, where the checkout has one,
and the names below besides): a former module named with one of the package's module-level
names, or with a name the package does not define anywhere, is a stale name. Variables that
share a module's name (``network.param_shapes()``, ``config.epochs``) read as variables where
what follows is an attribute of one of the package's classes.
"""
import ast
import io
import os
import re
import subprocess
import tokenize

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "gluon_bbb")
# modules of earlier layouts (git's history adds any other)
FORMER_MODULES = {"compressed", "compression", "dataset_shift", "evaluation", "files", "kernels",
                  "likelihood", "model", "modes", "network", "pruning", "regression_problems",
                  "training"}
# the first words of names that are not the package's
EXTERNAL = {"np", "numpy", "nd", "mx", "mxnet", "gluon", "nn", "sym", "autograd", "torch", "os",
            "sys", "json", "math", "time", "re", "dataclasses", "argparse", "typing", "lzma",
            "zlib", "struct", "signal", "threading", "ctypes", "contextlib", "functools",
            "itertools", "subprocess", "tempfile", "shutil", "logging", "warnings", "io",
            "hypothesis", "st", "pytest", "dask", "distributed", "plt", "matplotlib", "PIL",
            "Image", "tfp", "scipy", "self", "cls", "args", "importlib", "fcntl", "errno",
            "random", "ivon", "optimizer", "trainer", "nbformat", "nbclient", "tornado",
            "asyncio", "collections", "socket", "stat", "pathlib", "ops", "lib_api", "torchvision",
            "laplace", "nanoGPT", "setuptools", "pip", "python", "python3", "github", "www"}
# what follows a dot in a file's name, not an attribute
EXTENSIONS = {"json", "md", "png", "params", "gbbb", "npy", "gz", "txt", "lock", "tmp", "so",
              "cc", "c", "h", "py", "ipynb", "csv", "yml", "cfg", "toml", "html", "pdf", "idx",
              "sh", "log", "whl", "tar", "xz", "npz", "pyc", "ini", "jpg", "svg"}
# files named in prose that are other projects' (MXNet's extension API, IVON's reference)
OTHER_PROJECTS_FILES = {"lib_api.cc", "lib_api.h", "_ivon.py", "dense_variational_v2.py",
                        "model.py", "train.py", "configurator.py", "adam.py", "setup.py",
                        "conftest.py", "kernel.json"}

# words that stand for a name in a usage line (gluon_bbb.commands.COMMAND)
PLACEHOLDERS = {"NAME", "COMMAND", "MODULE", "CLASS"}
DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)")
PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.(?:py|c|cc|h))\b")


def _modules():
    """``{dotted module name: path}`` of the package."""
    found = {}
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                relative = os.path.relpath(os.path.join(directory, name), ROOT)[:-3]
                dotted = relative.replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = (
                    os.path.join(directory, name))
    return found


MODULES = _modules()
BY_BASENAME = {}
for _dotted in MODULES:
    BY_BASENAME.setdefault(_dotted.rsplit(".", 1)[-1], []).append(_dotted)


def _names_of(path):
    """(module-level names, {class: its attributes}, attribute names set on instances)."""
    tree = ast.parse(open(path).read())
    top, classes, instance = set(), {}, set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            top.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        top.add(leaf.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            top.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            for leaf in ast.walk(node):
                if isinstance(leaf, (ast.FunctionDef, ast.ClassDef)):
                    top.add(leaf.name)
                elif isinstance(leaf, ast.Name) and isinstance(leaf.ctx, ast.Store):
                    top.add(leaf.id)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            attributes = classes.setdefault(node.name, set())
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    attributes.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    for target in item.targets if isinstance(item, ast.Assign) else [item.target]:
                        if isinstance(target, ast.Name):
                            attributes.add(target.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            instance.add(node.attr)
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "namedtuple"
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
            instance.update(node.args[1].value.replace(",", " ").split())  # its fields
    return top, classes, instance


TOP, CLASSES, INSTANCE = {}, {}, set()
for _dotted, _path in MODULES.items():
    TOP[_dotted], _classes, _instance = _names_of(_path)
    for _name, _attributes in _classes.items():
        CLASSES.setdefault(_name, set()).update(_attributes)
    INSTANCE |= _instance
TOP["gluon_bbb"] |= set(__import__("gluon_bbb").__all__)  # the names it imports when used
for _extension in ("_fused", "_operators"):  # the C and C++ libraries setup.py builds
    MODULES["gluon_bbb.native." + _extension], TOP["gluon_bbb.native." + _extension] = None, set()
ANY_TOP = set().union(*TOP.values())
ANY_ATTRIBUTE = set().union(*CLASSES.values()) | INSTANCE


def _former_modules():
    names = set(FORMER_MODULES)
    try:
        listed = subprocess.run(["git", "log", "--all", "--name-only", "--format=", "--",
                                 "gluon_bbb"], cwd=ROOT, capture_output=True, text=True,
                                timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    names |= {os.path.basename(line)[:-3] for line in listed.split() if line.endswith(".py")}
    return names - set(BY_BASENAME) - {"__init__", "__main__", "train_mnist", "prune"}


FORMER = _former_modules()


def _prose(path):
    """The docstrings, comments and string literals of a Python file; a C file's comments; a
    document's text."""
    text = open(path, encoding="utf-8").read()
    if path.endswith(".py"):
        parts = []
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                parts.append(token.string)
            elif token.type == tokenize.STRING:
                parts.append(token.string)
        return "\n".join(parts)
    if path.endswith((".c", ".cc", ".h")):
        return "\n".join(re.findall(r"/\*.*?\*/|//[^\n]*", text, re.S))
    return text


def _sources():
    paths = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "train_mnist.py"),
             os.path.join(ROOT, "prune.py"), os.path.join(ROOT, "setup.py")]
    for top in ("gluon_bbb", "docs", "bench", "examples"):
        for directory, _, files in os.walk(os.path.join(ROOT, top)):
            paths += [os.path.join(directory, name) for name in files
                      if name.endswith((".py", ".md", ".c", ".cc", ".h"))]
    return sorted(paths)


def _file_exists(reference):
    if reference in OTHER_PROJECTS_FILES or os.path.exists(os.path.join(ROOT, reference)):
        return True
    if os.path.exists(os.path.join(PACKAGE, reference)):
        return True
    name = os.path.basename(reference)
    for top in ("gluon_bbb", "bench", "tests", "examples", ".ci"):
        for directory, _, files in os.walk(os.path.join(ROOT, top)):
            if name in files and (reference == name
                                  or os.path.join(directory, name).endswith(reference)):
                return True
    return False


def _resolve(parts):
    """Whether the dotted name ``parts`` is the package's, where it names the package."""
    first, rest = parts[0], parts[1:]
    if first == "gluon_bbb":
        module, i = "gluon_bbb", 1
        while i < len(parts) and module + "." + parts[i] in MODULES:
            module, i = module + "." + parts[i], i + 1
        if i == len(parts):
            return True
        return parts[i] in TOP[module] and (i + 1 == len(parts) or parts[i + 1] in ANY_ATTRIBUTE
                                            or parts[i + 1] in ANY_TOP)
    if first in BY_BASENAME or any(m.endswith("." + first) or m == "gluon_bbb." + first
                                   for m in MODULES):
        candidates = [m for m in MODULES if m.rsplit(".", 1)[-1] == first]
        name = rest[0]
        if any(name in TOP[m] or m + "." + name in MODULES for m in candidates):
            return True
        return name in ANY_ATTRIBUTE  # a variable of the module's name
    if first in FORMER:
        return name_is_a_variables(rest[0])
    if first in CLASSES and first[0].isupper():
        return rest[0] in ANY_ATTRIBUTE or rest[0] in ANY_TOP
    return True  # not the package's name


def name_is_a_variables(name):
    return name in ANY_ATTRIBUTE


def stale_names():
    found = []
    for path in _sources():
        where = os.path.relpath(path, ROOT)
        for line_number, line in enumerate(_prose(path).splitlines(), 1):
            for match in DOTTED.finditer(line):
                parts = [p for p in match.group(1).split(".") if p not in PLACEHOLDERS]
                if len(parts) < 2 or parts[-1] in EXTENSIONS or parts[0] in EXTERNAL or len(parts[0]) < 2:
                    continue
                if any(p in EXTENSIONS for p in parts[1:]):
                    continue
                if not _resolve(parts):
                    found.append("%s: %s" % (where, match.group(1)))
            for match in PATH.finditer(line):
                if not _file_exists(match.group(1)):
                    found.append("%s: %s" % (where, match.group(1)))
    return sorted(set(found))


def test_every_name_in_prose_is_one_the_package_has():
    assert stale_names() == []


@pytest.mark.parametrize("text, stale", [
    ("see ``network.Topology``", True), ("``compression.best_gated_units``", True),
    ("listed in kernels.SERVED", True), ("gluon_bbb/native.py", True),
    ("``gluon_bbb.commands.regression.predict_regression``", True),
    ("``networks.network.Network``", False), ("``network.param_shapes()``", False),
    ("``priors.GatedPrior``", False), ("``priors.NoSuchPrior``", True),
    ("``gluon_bbb.toy_problems.predict_regression``", False), ("networks/layers.py", False)])
def test_the_check_tells_a_stale_name(tmp_path, monkeypatch, text, stale):
    document = tmp_path / "doc.md"
    document.write_text(text + "\n")
    monkeypatch.setattr(__import__(__name__), "_sources", lambda: [str(document)])
    assert bool(stale_names()) == stale, stale_names()


def commands_named_as_modules(paths):
    """The package's messages and help (string literals that hold a space, not docstrings) that
    name a command by its module, ``gluon_bbb.commands.NAME``, where a user types ``gluon-bbb
    NAME``; a string that is the module alone (``python -m``'s target) is code."""
    found = []
    for path in paths:
        tree = ast.parse(open(path).read())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and " " in node.value
                    and re.search(r"gluon_bbb\.commands\.\w", node.value)):
                found.append("%s:%d: %s" % (os.path.relpath(path, ROOT), node.lineno, node.value))
    return found


def test_messages_name_a_command_as_a_user_types_it(tmp_path):
    # predict's help and refusals said "a file written by gluon_bbb.commands.compress"
    assert commands_named_as_modules(
        path for path in _sources() if path.endswith(".py")) == []
    sample = tmp_path / "sample.py"
    sample.write_text('"""Docstring: gluon_bbb.commands.train."""\nMODULE = "gluon_bbb.commands.'
                      'train"\nHELP = "a file written by gluon_bbb.commands.compress"\n')
    assert [line.split(": ", 1)[1] for line in commands_named_as_modules([str(sample)])] == [
        "a file written by gluon_bbb.commands.compress"]

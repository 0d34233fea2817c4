"""The one owner of outputs (``outputs.py``): its rule over randomized paths (relative, through
links, with ``..``, into another run, into the same run, onto special files), checked against
an oracle that knows the tree it built; atomic writes that never open what held their
temporary name; and the commands, each refusing on one line with status 2 what the rule
refuses, with every other file left as it was.

Special files are made in the test's own directory (``mkfifo``, ``mknod``): no test writes near
a real system path, even as root."""
import hashlib
import json
import os
import socket
import stat
import subprocess
import tempfile
import time

import pytest
from hypothesis import example, given, strategies as st

from commands import (COMPRESS, EVALUATE, PRUNE, SHIFT, SWEEP, TRAIN, assert_one_line_error,
                      run, start)
from gluon_bbb import OutputError, outputs

RUN_CONFIG = json.dumps({"network": "mlp", "epochs": 1, "seed": 0})
PNG_BYTES = b"\x89PNG\r\n\x1a\n" + b"\0" * 24
PARAMS_BYTES = b"\x12\x01\0\0\0\0\0\0" + b"\0" * 24
GBBB_BYTES = b"GLUONBBB" + b"\0" * 24


def report_on(run_dir):
    return json.dumps({"checkpoint": os.path.join(run_dir, "checkpoint.params"), "rows": []})


# What each name in a directory of the tree holds: a regular file's kind, or what else it is.
REGULAR = {"model.gbbb": ("compressed", GBBB_BYTES), "x.png": ("png", PNG_BYTES),
           "data.npy": ("other", b"\x93NUMPY" + b"\0" * 20), "notes.json": ("json", b"{}"),
           "checkpoint.params": ("params", PARAMS_BYTES)}
NAMES = sorted(REGULAR) + ["new.gbbb", "pruning.json", "fifo", "device", "socket",
                           "link_file", "link_device", "dangling", "config.json", "history.json"]
KINDS = {"compressed": outputs.COMPRESSED, "png": outputs.PNG, "report": outputs.REPORT,
         "json": outputs.JSON, "params": outputs.PARAMETERS}
# the directories of the tree: (relative path, the run it lies in)
PLACES = {"top": ("", None), "reports": ("reports", None), "a": ("runs/a", "a"),
          "a_sub": ("runs/a/sub", "a"), "b": ("runs/b", "b"), "new": ("fresh/deeper", None),
          "a_new": ("runs/a/fresh", "a")}
RUN_DIRECTORIES = ("a", "b")  # the places that hold a run's config.json


def build_tree(root):
    """The tree the oracle knows: runs a and b (each with a config.json and a history), a
    report directory with a report on a, and in every directory each kind of entry NAMES
    lists (the sockets bound, the devices made with mknod, here)."""
    made_socket = []
    for place, (relative, _) in PLACES.items():
        if place in ("new", "a_new"):
            continue
        directory = os.path.join(root, relative)
        os.makedirs(directory, exist_ok=True)
        for name, (_, content) in REGULAR.items():
            with open(os.path.join(directory, name), "wb") as f:
                f.write(content)
        if place in RUN_DIRECTORIES:
            with open(os.path.join(directory, "config.json"), "w") as f:
                f.write(RUN_CONFIG)
            with open(os.path.join(directory, "history.json"), "w") as f:
                f.write("[]")
        with open(os.path.join(directory, "pruning.json"), "w") as f:
            f.write(report_on(os.path.join(root, "runs", "a")))
        os.mkfifo(os.path.join(directory, "fifo"))
        os.mknod(os.path.join(directory, "device"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        server = socket.socket(socket.AF_UNIX)
        server.bind(os.path.join(directory, "socket"))
        made_socket.append(server)
        os.symlink("x.png", os.path.join(directory, "link_file"))
        os.symlink("device", os.path.join(directory, "link_device"))
        os.symlink("nowhere", os.path.join(directory, "dangling"))
    os.symlink(os.path.join(root, "runs", "a"), os.path.join(root, "linked_a"))
    return made_socket


def snapshot(root):
    """Every entry under ``root``: its type and, for a regular file, its content's hash; for
    a link, its target."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                with open(path, "rb") as f:
                    found[path] = ("file", hashlib.sha256(f.read()).hexdigest())
            elif stat.S_ISLNK(mode):
                found[path] = ("link", os.readlink(path))
            else:
                found[path] = (stat.S_IFMT(mode), None)
    return found


def spelt(root, relative, how):
    """``relative`` (a path under root) spelt as a user might: absolute, relative to root
    (the working directory), with a detour through ``..``, through the link to run a."""
    if how == "absolute":
        return os.path.join(root, relative)
    if how == "detour":
        return os.path.join("reports", "..", relative)
    if how == "linked" and relative.startswith("runs/a"):
        return "linked_a" + relative[len("runs/a"):]
    return relative or "."


def expected_refusal(root, place, name, kind_name, own):
    """What the rule says of writing ``name`` as ``kind_name`` in ``place`` for a command on
    the runs ``own``, from what the tree holds there: None (allowed), or the words of the
    refusal's reason."""
    relative, run = PLACES[place]
    if run is not None and run not in own:
        return "another run's directory"
    path = os.path.join(root, relative, name)
    if not os.path.lexists(path):
        return None
    if name in ("link_file", "link_device", "dangling"):
        return "a link"
    if name in ("fifo", "device", "socket"):
        return "not a file a command may replace"
    held = ("report" if name == "pruning.json" else "json"
            if name in ("config.json", "history.json") else REGULAR[name][0])
    if held == "report" and kind_name == "json":
        held = "json"  # a report is JSON too
    if held != kind_name:
        return "holds something other than"
    # every report in the tree is on run a; a run's own directory takes its own reports whatever
    # run an older one there names (it may have been moved); elsewhere only a report on a
    if held == "report" and own != {"a"} and place not in RUN_DIRECTORIES:
        return "a report on"
    return None


@given(place=st.sampled_from(sorted(PLACES)), name=st.sampled_from(NAMES),
       kind_name=st.sampled_from(sorted(KINDS)),
       own=st.sets(st.sampled_from(["a", "b"])),
       how=st.sampled_from(["absolute", "relative", "detour", "linked"]))
# a run's report written over one in its own directory that names another run (found by CI)
@example(place="b", name="pruning.json", kind_name="report", own={"b"}, how="absolute")
def test_the_owner_writes_where_its_rule_allows_and_nowhere_else(place, name, kind_name, own,
                                                                 how):
    with tempfile.TemporaryDirectory() as root:
        sockets = build_tree(root)
        cwd = os.getcwd()
        os.chdir(root)
        try:
            before = snapshot(root)
            path = os.path.join(spelt(root, PLACES[place][0], how), name)
            own_runs = [os.path.join("runs", run) for run in sorted(own)]
            sources = frozenset(os.path.realpath(run) for run in own_runs)
            kind = KINDS[kind_name]
            expected = expected_refusal(root, place, name, kind_name, own)
            content = {"checkpoint": os.path.join(own_runs[0], "checkpoint.params")} if (
                own_runs) else {"checkpoint": "elsewhere/checkpoint.params"}
            try:
                with outputs.claim_file(path, kind, "out", own_runs=own_runs):
                    if kind is outputs.REPORT:
                        if not own_runs or outputs.report_sources(content) != sources:
                            return  # the commands write reports only on their own runs
                        outputs.write_json(path, content, kind)
                    else:
                        outputs.write_text(path, {"png": PNG_BYTES, "params": PARAMS_BYTES,
                                                  "compressed": GBBB_BYTES}.get(
                            kind_name, b"{}").decode("latin-1"), kind)
            except OutputError as exc:
                assert expected is not None, "refused %s: %s" % (path, exc)
                assert expected in str(exc), (expected, str(exc))
                after = snapshot(root)
                assert after == before  # nothing made, nothing changed
                return
            assert expected is None, "wrote %s, which the rule refuses (%s)" % (path, expected)
            after = snapshot(root)
            target = os.path.realpath(path)
            changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
            # the file itself, and the directories made for it where it is new
            assert {os.path.realpath(p) for p in changed} <= {target} | {
                os.path.join(root, d) for d in ("fresh", "fresh/deeper", "runs/a/fresh")}
            assert after[target][0] == "file"
            assert not [p for p in after if p.endswith((".tmp", ".lock"))]
        finally:
            os.chdir(cwd)
            for server in sockets:
                server.close()


def test_a_temporary_name_held_by_a_link_or_a_hard_link_is_never_written_through(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (tmp_path / "out.png.tmp").symlink_to(precious)
    outputs.write_atomically(str(tmp_path / "out.png"), lambda tmp: open(tmp, "wb").write(
        PNG_BYTES), outputs.PNG)
    os.link(precious, tmp_path / "other.png.tmp")
    outputs.write_atomically(str(tmp_path / "other.png"), lambda tmp: open(tmp, "wb").write(
        PNG_BYTES), outputs.PNG)
    os.mkfifo(tmp_path / "third.png.tmp")
    outputs.write_atomically(str(tmp_path / "third.png"), lambda tmp: open(tmp, "wb").write(
        PNG_BYTES), outputs.PNG)
    assert precious.read_text() == "keep me"
    for name in ("out.png", "other.png", "third.png"):
        assert (tmp_path / name).read_bytes() == PNG_BYTES
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.png", "out.png", "precious.txt", "third.png"]


def test_no_json_file_holds_nan_or_infinity(tmp_path):
    for value in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(OutputError, match="NaN or infinite; nothing is written"):
            outputs.write_json(str(tmp_path / "figures.json"), {"sd": [1.0, value]})
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_that_is_a_link_or_a_fifo_is_refused_not_written_through(tmp_path):
    from gluon_bbb.learning.rundir import RunDirectory
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").symlink_to(precious)
    with pytest.raises(OutputError, match="is a link"):
        with RunDirectory(str(tmp_path / "run")).locked():
            pass
    (tmp_path / "run" / ".lock").unlink()
    os.mkfifo(tmp_path / "run" / ".lock")
    with pytest.raises(OutputError, match="is a FIFO, not a lock file"):
        with RunDirectory(str(tmp_path / "run")).locked():
            pass
    assert precious.read_text() == "keep me"


# The commands.

@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two small finished runs (a with validation images, b without), in one runs folder."""
    root = tmp_path_factory.mktemp("owner")
    for name, extra in (("a", ["--validation", "5000"]), ("b", [])):
        proc = run(TRAIN, "--out", root / "runs" / name, "--epochs", "1", "--train-size", "1000",
                   "--num-hidden-units", "20", "--test-samples", "2", "--seed", "0", *extra)
        assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.slow
def test_every_command_refuses_what_the_rule_refuses_and_changes_nothing(two_runs, tmp_path):
    runs = two_runs / "runs"
    a, b = str(runs / "a"), str(runs / "b")
    os.mkfifo(tmp_path / "fifo")
    os.mknod(tmp_path / "device", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    (tmp_path / "link.gbbb").symlink_to(tmp_path / "device")
    (tmp_path / "input.npy").write_bytes(b"\x93NUMPY" + b"\0" * 30)
    (tmp_path / "reports").mkdir()
    (tmp_path / "spec.json").write_text(json.dumps({"base": {"epochs": 1}, "grid": {"seed": [0]}}))
    # a project's own config.json and history.json by the names a run writes
    for name, text in (("config", '{"name": "my project"}'), ("history", '[1, 2]')):
        (tmp_path / ("project-" + name)).mkdir()
        (tmp_path / ("project-" + name) / (name + ".json")).write_text(text)
    cases = [
        (TRAIN, ["--out", tmp_path / "project-config", "--epochs", "1"],
         "config.json holds something other than a run's config.json; it is never replaced"),
        (TRAIN, ["--out", tmp_path / "project-history", "--epochs", "1"],
         "history.json holds something other than a run's history.json"),
        (EVALUATE, [a, "--out", ""], "--out must be a directory path, got ''"),
        (COMPRESS, [a, "--out", " "], "--out must be a file's path, got ' '"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", tmp_path / "fifo"], "is a FIFO"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", tmp_path / "device"],
         "is a character device"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", tmp_path / "link.gbbb"], "is a link"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", tmp_path / "input.npy"],
         "holds something other than a compressed model"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", runs / "b" / "history.json"],
         "lies inside the run directory"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", runs / "b" / "model.gbbb"],
         "lies inside the run directory"),
        (EVALUATE, ["--checkpoint", a, "--out", b], "holds the run"),
        (PRUNE, ["--checkpoint", a, "--out", b, "--proportions", "0"], "holds the run"),
        (PRUNE, ["--checkpoint", a, "--out", runs / "b" / "sub", "--proportions", "0"],
         "lies inside the run directory"),
        (SHIFT, [a, "--out", runs / "b" / "shift", "--test-size", "100"],
         "lies inside the run directory"),
        (TRAIN, ["--out", runs / "a" / "nested", "--epochs", "1"],
         "lies inside the run directory"),
        (SWEEP, [tmp_path / "spec.json", "--out", runs / "b" / "sweep"],
         "lies inside the run directory"),
        (SWEEP, [tmp_path / "spec.json", "--out", tmp_path / "fifo"], "is a FIFO"),
    ]
    before = snapshot(str(two_runs)), snapshot(str(tmp_path))
    for cmd, args, words in cases:
        proc = run(cmd, *args)
        assert_one_line_error(proc, words)
        # nor says it trains or writes where it is refused
        assert proc.stdout == "", (args, proc.stdout)
    assert (snapshot(str(two_runs)), snapshot(str(tmp_path))) == before
    # a report directory takes reports on one run; another run's report is never replaced
    proc = run(PRUNE, "--checkpoint", a, "--out", tmp_path / "reports", "--proportions", "0")
    assert proc.returncode == 0, proc.stderr
    kept = (tmp_path / "reports" / "pruning.json").read_bytes()
    assert_one_line_error(run(PRUNE, "--checkpoint", b, "--out", tmp_path / "reports",
                              "--proportions", "0"), "is a report on %s" % os.path.realpath(a))
    assert (tmp_path / "reports" / "pruning.json").read_bytes() == kept
    # its own run's directory, and a compressed file over one of its kind, are written
    for args in ([a, "--proportion", "0.5", "--out", runs / "a" / "model.gbbb"],
                 [a, "--proportion", "0.5", "--out", runs / "a" / "model.gbbb"]):
        proc = run(COMPRESS, *args)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_a_second_compress_to_the_same_file_is_refused_while_the_first_runs(two_runs,
                                                                             tmp_path):
    out = tmp_path / "model.gbbb"
    # choosing the proportion on 5,000 validation images takes seconds
    first = start(COMPRESS, two_runs / "runs" / "a", "--sigma-bits", "4", "--samples", "50",
                  "--out", out)
    try:
        deadline = time.time() + 60
        while not (tmp_path / ".model.gbbb.lock").exists() and time.time() < deadline:
            time.sleep(0.05)
        assert first.poll() is None
        second = run(COMPRESS, two_runs / "runs" / "b", "--proportion", "0.5", "--out", out)
        assert_one_line_error(second, "is being written by another process")
        _, stderr = first.communicate(timeout=300)
        assert first.returncode == 0, stderr
    finally:
        first.kill()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gbbb"]


def closed_stdout():
    os.close(1)


@pytest.mark.slow
def test_commands_with_standard_output_closed_finish_quietly(two_runs, tmp_path):
    digit = tmp_path / "digit.npy"
    import numpy as np
    np.save(digit, np.zeros((28, 28)))
    model = tmp_path / "m.gbbb"
    for cmd, args in ((TRAIN, ["--out", tmp_path / "run", "--epochs", "1", "--train-size",
                               "500", "--num-hidden-units", "10", "--test-samples", "2"]),
                      (PRUNE, ["--checkpoint", two_runs / "runs" / "b", "--out",
                               tmp_path / "pruned", "--proportions", "0", "0.5"]),
                      (COMPRESS, [two_runs / "runs" / "b", "--proportion", "0.5", "--out",
                                  model]),
                      (__import__("commands").PREDICT, [model, digit])):
        proc = subprocess.run([str(c) for c in cmd + args], stdout=None, stderr=subprocess.PIPE,
                              text=True, preexec_fn=closed_stdout,
                              env=__import__("commands").user_env(),
                              cwd=__import__("commands").ROOT, timeout=300)
        assert proc.returncode == 0 and proc.stderr == "", (cmd, proc.stderr)
    assert (tmp_path / "run" / "checkpoint.params").exists() and model.exists()
    assert (tmp_path / "pruned" / "pruning.json").exists()

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
import tempfile

import pytest
from hypothesis import example, given, strategies as st

from commands import (COMPRESS, EVALUATE, PRUNE, ROOT, SHIFT, SWEEP, TRAIN,
                      assert_one_line_error, run, run_process)
from conftest import SMALL
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

@pytest.fixture
def two_runs(runs, tmp_path):
    """Two small finished runs (a with validation images, b without), in one runs folder."""
    root = tmp_path / "owner"
    (root / "runs").mkdir(parents=True)
    runs.copy("mlp", root / "runs", "a")
    runs.copy("small", root / "runs", "b")
    return root


def test_every_command_refuses_what_the_rule_refuses_and_changes_nothing(two_runs, tmp_path):
    runs = two_runs / "runs"
    a, b = str(runs / "a"), str(runs / "b")
    work = tmp_path / "work"
    work.mkdir()
    os.mkfifo(work / "fifo")
    os.mknod(work / "device", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    (work / "link.gbbb").symlink_to(work / "device")
    (work / "input.npy").write_bytes(b"\x93NUMPY" + b"\0" * 30)
    (work / "reports").mkdir()
    (work / "a-file").write_text("not a directory")
    (work / "spec.json").write_text(json.dumps({"base": {"epochs": 1}, "grid": {"seed": [0]}}))
    # a project's own config.json and history.json by the names a run writes, one as a run's
    # reads (the package marks its runs' directories: outputs.RUN_MARKER)
    for name, text in (("config", '{"name": "my project"}'), ("history", '[1, 2]'),
                       ("config-like", '{"network": "mlp", "epochs": 3}')):
        (work / ("project-" + name)).mkdir()
        (work / ("project-" + name) / (name.split("-")[0] + ".json")).write_text(text)
    cases = [
        (TRAIN, ["--out", work / "project-config", "--epochs", "1"],
         "config.json holds something other than a run's config.json; it is never replaced"),
        (TRAIN, ["--out", work / "project-history", "--epochs", "1"],
         "history.json holds something other than a run's history.json"),
        (TRAIN, ["--out", work / "project-config-like", "--epochs", "1"],
         "config.json holds something other than a run's config.json"),
        (EVALUATE, [a, "--out", ""], "--out must be a directory path, got ''"),
        (COMPRESS, [a, "--out", " "], "--out must be a file's path, got ' '"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", work / "fifo"], "is a FIFO"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", work / "device"],
         "is a character device"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", work / "link.gbbb"], "is a link"),
        (COMPRESS, [a, "--proportion", "0.5", "--out", work / "input.npy"],
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
        (SWEEP, [work / "spec.json", "--out", runs / "b" / "sweep"],
         "lies inside the run directory"),
        (SWEEP, [work / "spec.json", "--out", work / "fifo"], "is a FIFO"),
    ]
    # an output that is a file, or lies under one, is refused before any work
    for cmd, args in ((TRAIN, ["--epochs", "1", "--train-size", "256"]),
                      (PRUNE, ["--checkpoint", b]), (EVALUATE, ["--checkpoint", b])):
        cases.append((cmd, args + ["--out", work / "a-file"],
                      "--out %s is a file, not a directory" % (work / "a-file")))
        cases.append((cmd, args + ["--out", work / "a-file" / "out"],
                      "--out %s cannot be written" % (work / "a-file" / "out")))
    before = snapshot(str(two_runs)), snapshot(str(work))
    for cmd, args, words in cases:
        proc = run(cmd, *args)
        assert_one_line_error(proc, words)
        # nor says it trains or writes where it is refused
        assert proc.stdout == "", (args, proc.stdout)
    assert (snapshot(str(two_runs)), snapshot(str(work))) == before
    # a report directory takes reports on one run; another run's report is never replaced
    proc = run(PRUNE, "--checkpoint", a, "--out", work / "reports", "--proportions", "0")
    assert proc.returncode == 0, proc.stderr
    kept = (work / "reports" / "pruning.json").read_bytes()
    assert_one_line_error(run(PRUNE, "--checkpoint", b, "--out", work / "reports",
                              "--proportions", "0"), "is a report on %s" % os.path.realpath(a))
    assert (work / "reports" / "pruning.json").read_bytes() == kept
    # a run's directory is marked as the package's; a run written before the marker (its
    # config.json beside a checkpoint) is one too
    assert (runs / "a" / outputs.RUN_MARKER).is_file()
    assert outputs.is_run_directory(str(runs / "a"))
    (runs / "b" / outputs.RUN_MARKER).unlink()
    assert outputs.is_run_directory(str(runs / "b"))
    assert not outputs.is_run_directory(str(work / "project-config-like"))
    # its own run's directory, and a compressed file over one of its kind, are written
    for _ in range(2):
        proc = run(COMPRESS, a, "--proportion", "0.5", "--out", runs / "a" / "model.gbbb")
        assert proc.returncode == 0, proc.stderr
    # a file being written by another command is refused at once
    with outputs.locked_beside(str(work / "model.gbbb")):
        assert_one_line_error(run(COMPRESS, b, "--proportion", "0.5", "--out",
                                  work / "model.gbbb"), "is being written by another process")
    assert not (work / "model.gbbb").exists()


# A full disk and a read-only one: real filesystems, small tmpfs mounted in a private mount
# namespace, where the commands run as processes.

def on_small_disks(tmp_path, steps):
    """Run ``steps`` (shell lines, $DISK a tmpfs of 1 MiB, $RO a read-only one) in a mount
    namespace of their own; copy $DISK's files to tmp_path/disk afterwards. Returns
    {step index: CompletedProcess-like (returncode, stdout, stderr)}. Skips where this machine
    lets no test mount a filesystem (it needs root or user namespaces)."""
    import shutil
    import subprocess
    if shutil.which("unshare") is None:
        pytest.skip("no unshare command to make a small filesystem with")
    disk, read_only, results = tmp_path / "mnt", tmp_path / "ro", tmp_path / "results"
    for directory in (disk, read_only, results):
        directory.mkdir()
    script = ["set -u", "mount -t tmpfs -o size=1024k tmpfs %s || exit 97" % disk,
              "mount -t tmpfs -o ro,size=64k tmpfs %s || exit 97" % read_only,
              "export DISK=%s RO=%s" % (disk, read_only), "cd %s" % ROOT]
    for i, step in enumerate(steps):
        script.append("(%s) >%s/%d.out 2>%s/%d.err; echo $? >%s/%d.rc"
                      % (step, results, i, results, i, results, i))
    script.append("rm -f $DISK/filler; cp -a $DISK %s/disk" % tmp_path)
    proc = run_process(["unshare", "-m", "bash", "-c", "\n".join(script)], timeout=600)
    if proc.returncode == 97 or "unshare failed" in proc.stderr:
        pytest.skip("cannot mount a small filesystem here: %s" % proc.stderr.strip()[:200])
    assert proc.returncode == 0, proc.stderr
    return {i: subprocess.CompletedProcess(
        steps[i], int((results / ("%d.rc" % i)).read_text()),
        (results / ("%d.out" % i)).read_text(), (results / ("%d.err" % i)).read_text())
        for i in range(len(steps))}


def fill_leaving(kb):
    """Shell: fill $DISK, then give back ``kb`` KiB."""
    return ("head -c 100000000 /dev/zero >$DISK/filler 2>/dev/null; "
            "truncate -s -%dK $DISK/filler" % kb)


def command(cmd, *args):
    return " ".join(cmd + [str(a) for a in args])


@pytest.mark.slow
def test_a_full_or_read_only_disk_is_one_line_naming_the_file_and_loses_nothing(tmp_path):
    # an 8-unit network's checkpoint is about 55 kB: the second epoch's cannot be written;
    # with no room left the lock file is the first file a command cannot write
    out = "$DISK/run"
    results = on_small_disks(tmp_path, [
        command(TRAIN, "--out", out, "--epochs", "1", *SMALL),
        fill_leaving(24),
        command(TRAIN, "--out", out, "--resume", "--epochs", "2"),
        command(PRUNE, "--checkpoint", out, "--out", "$DISK/pruned", "--save-pruned", "0.5"),
        fill_leaving(0),
        command(COMPRESS, out, "--proportion", "0.5", "--out", "$DISK/sub/m.gbbb"),
        command(PRUNE, "--checkpoint", out, "--out", "$RO/pruned"),
        "rm $DISK/filler",
        command(TRAIN, "--out", out, "--resume", "--epochs", "2"),
        # the process's own file-size limit (a batch scheduler's): said as a full disk is
        "ulimit -f 40; " + command(TRAIN, "--out", "$DISK/limited", "--epochs", "1", *SMALL),
    ])
    assert results[0].returncode == 0, results[0].stderr
    assert_one_line_error(results[2], "train_mnist.py: error: cannot write %s/mnt/run/"
                          "checkpoint.params: no space left on device" % tmp_path)
    assert_one_line_error(results[3], "prune.py: error: cannot write %s/mnt/pruned/pruning.png: "
                          "no space left on device" % tmp_path)
    assert_one_line_error(results[5], "cannot write %s/mnt/sub/.m.gbbb.lock: no space left on "
                          "device" % tmp_path)
    assert_one_line_error(results[6], "--out %s/ro/pruned cannot be written" % tmp_path)
    # once there is room again, the run resumes from its intact first epoch
    assert results[8].returncode == 0, results[8].stderr
    assert_one_line_error(results[9], "cannot write %s/mnt/limited/checkpoint.params: file too "
                          "large: the process may write files of 40960 bytes at most (its "
                          "file-size limit, ulimit -f)" % tmp_path)
    disk = tmp_path / "disk"
    # what prune wrote before the disk was full is kept; the refused commands left nothing
    assert sorted(os.listdir(disk)) == ["pruned", "run"]
    assert sorted(os.listdir(disk / "pruned")) == [".lock", "pruning.json"]
    with open(disk / "pruned" / "pruning.json") as f:
        assert json.load(f)["rows"][0]["proportion"] == 0.0
    assert not [name for name in os.listdir(disk / "run") if name.endswith(".tmp")]
    with open(disk / "run" / "history.json") as f:
        assert [r["epoch"] for r in json.load(f)] == [1, 2]

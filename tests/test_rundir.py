"""The faults a user meets around a run directory, driven through the three commands in a user's
plain environment: a full disk, resuming with another command line, tampered run files, SIGTERM,
no data and no network, checks before any work, the advice on a non-finite loss, pipes, and what
the commands print and record."""
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from commands import (COMPRESS, EVALUATE, PREDICT, PRUNE, ROOT, SHIFT, TRAIN,
                      assert_one_line_error, mnist_copy, run, start, stopped_by)

SMALL = ["--train-size", "512", "--num-hidden-units", "20", "--test-samples", "2", "--seed", "1"]


def files_of(directory):
    return sorted(os.listdir(directory))


def temporaries(directory):
    return [name for name in files_of(directory) if name.endswith(".tmp")]


def read_json(path):
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory):
    """A finished 1-epoch run (copy it before changing it)."""
    out = tmp_path_factory.mktemp("runs") / "one"
    proc = run(TRAIN, "--out", out, "--epochs", "1", *SMALL)
    assert proc.returncode == 0, proc.stderr
    return out


def copy_of(run_dir, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(run_dir, target)
    return target


# 1. A full disk: a real one, a small tmpfs mounted in a private mount namespace.

def on_small_disk(tmp_path, size_kb, steps):
    """Run ``steps`` (shell lines, with $DISK the mounted tmpfs of ``size_kb`` KiB) in a mount
    namespace of their own; copy the disk's files to tmp_path/disk afterwards. Returns
    {step index: CompletedProcess-like (returncode, stdout, stderr)}. Skips where this machine
    lets no test mount a filesystem (it needs root or user namespaces)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare command to make a small filesystem with")
    disk, results = tmp_path / "mnt", tmp_path / "results"
    disk.mkdir()
    results.mkdir()
    script = ["set -u", "mount -t tmpfs -o size=%dk tmpfs %s || exit 97" % (size_kb, disk),
              "export DISK=%s" % disk, "cd %s" % ROOT]
    for i, step in enumerate(steps):
        script.append("(%s) >%s/%d.out 2>%s/%d.err; echo $? >%s/%d.rc"
                      % (step, results, i, results, i, results, i))
    script.append("rm -f $DISK/filler; cp -a $DISK %s/disk" % tmp_path)
    proc = run(["unshare", "-m", "bash", "-c", "\n".join(script)], timeout=600)
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
def test_a_full_disk_during_training_is_one_line_and_leaves_no_temporary(tmp_path):
    # a 20-unit network's checkpoint is 127 kB: the second epoch's cannot be written
    out = "$DISK/run"
    results = on_small_disk(tmp_path, 1024, [
        command(TRAIN, "--out", out, "--epochs", "1", *SMALL),
        fill_leaving(24),
        command(TRAIN, "--out", out, "--resume", "--epochs", "2"),
        "rm $DISK/filler",
        command(TRAIN, "--out", out, "--resume", "--epochs", "2"),
    ])
    assert results[0].returncode == 0, results[0].stderr
    assert_one_line_error(results[2], "train_mnist.py: error: cannot write %s/mnt/run/"
                          "checkpoint.params: no space left on device" % tmp_path)
    # once there is room again, the run resumes from its intact first epoch
    assert results[4].returncode == 0, results[4].stderr
    run_dir = tmp_path / "disk" / "run"
    assert temporaries(run_dir) == []
    assert [r["epoch"] for r in read_json(run_dir / "history.json")] == [1, 2]


@pytest.mark.slow
def test_a_full_disk_while_pruning_is_one_line_and_keeps_earlier_files(tmp_path, one_epoch):
    # pruning.json (about 1 kB) fits, pruning.png (about 25 kB) does not
    out = "$DISK/pruned"
    results = on_small_disk(tmp_path, 1024, [
        "cp -a %s $DISK/run" % one_epoch,
        fill_leaving(16),
        command(PRUNE, "--checkpoint", "$DISK/run", "--out", out, "--save-pruned", "0.5"),
        command(PRUNE, "--checkpoint", "$DISK/run", "--save-pruned", "0.5"),
    ])
    assert_one_line_error(results[2], "prune.py: error: cannot write %s/mnt/pruned/pruning.png: "
                          "no space left on device" % tmp_path)
    pruned = tmp_path / "disk" / "pruned"
    assert files_of(pruned) == [".lock", "pruning.json"]
    assert read_json(pruned / "pruning.json")["rows"][0]["proportion"] == 0.0
    assert_one_line_error(results[3], "no space left on device")
    run_dir = tmp_path / "disk" / "run"
    assert temporaries(run_dir) == [] and "pruned-0.5.params" not in files_of(run_dir)
    for name in ("config.json", "history.json", "checkpoint.params"):
        assert (run_dir / name).read_bytes() == (one_epoch / name).read_bytes()


@pytest.mark.slow
def test_a_disk_with_no_room_left_is_one_line_naming_the_file_and_leaves_nothing(tmp_path,
                                                                                  one_epoch):
    results = on_small_disk(tmp_path, 256, [
        fill_leaving(0),
        command(TRAIN, "--out", "$DISK/run", "--epochs", "1", *SMALL),
        command(PRUNE, "--checkpoint", one_epoch, "--out", "$DISK/pruned"),
        command(COMPRESS, one_epoch, "--proportion", "0.5", "--out", "$DISK/sub/m.gbbb"),
    ])
    for i, name in ((1, "run/.lock"), (2, "pruned/.lock"), (3, "sub/.m.gbbb.lock")):
        assert_one_line_error(results[i], "cannot write %s/mnt/%s: no space left on device"
                              % (tmp_path, name))
    assert files_of(tmp_path / "disk") == []


# 2. Resuming with a shorter or another command line.

@pytest.mark.slow
def test_resume_without_eval_train_draws_the_plots_and_the_report(tmp_path):
    out = tmp_path / "run"
    assert run(TRAIN, "--out", out, "--epochs", "1", "--eval-train", *SMALL).returncode == 0
    proc = run(TRAIN, "--out", out, "--resume", "--epochs", "2")
    assert proc.returncode == 0, proc.stderr
    history = read_json(out / "history.json")
    assert "train_accuracy" in history[0] and "train_accuracy" not in history[1]
    assert (out / "accuracy.png").stat().st_mtime >= (out / "checkpoint.params").stat().st_mtime
    assert read_json(out / "uncertainty.json")["epoch"] == 2


def test_resume_with_a_preset_is_checked_like_its_flags(tmp_path, one_epoch):
    run_dir = copy_of(one_epoch, tmp_path)
    before = (run_dir / "checkpoint.params").read_bytes()
    proc = run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2", "--preset", "paper-2x400")
    assert_one_line_error(proc, "cannot resume %s: it was trained with --num-hidden-units 20, "
                                "not 400" % run_dir)
    assert (run_dir / "checkpoint.params").read_bytes() == before
    # the command that started a preset run continues it with --resume added
    preset_run = ["--preset", "paper-2x400", "--num-hidden-units", "20", "--train-size", "512",
                  "--validation", "1000", "--test-samples", "0", "--seed", "1"]
    out = tmp_path / "preset"
    assert run(TRAIN, "--out", out, "--epochs", "1", *preset_run).returncode == 0
    proc = run(TRAIN, "--out", out, "--epochs", "2", "--resume", *preset_run)
    assert proc.returncode == 0, proc.stderr
    assert read_json(out / "config.json")["optimizer"] == "adam"


def test_a_run_whose_config_holds_its_settings_flat_resumes(tmp_path, one_epoch):
    """config.json as it was before the prior's and IVON's settings were grouped: each a field
    of its own, every prior's scales and IVON's settings written for every run."""
    run_dir = copy_of(one_epoch, tmp_path)
    record = read_json(run_dir / "config.json")
    flat = dict(record, **record.pop("prior_settings"), pi=0.25, sigma_p1=0.75, sigma_p2=0.1,
                ivon_ess=None, ivon_hess_init=0.1, ivon_beta1=0.9, ivon_beta2=0.99999,
                ivon_weight_decay=1e-4, ivon_clip_radius=None, ivon_late_beta2=None,
                ivon_late_epochs=0, ivon_prior_at_draws=False)
    (run_dir / "config.json").write_text(json.dumps(flat))
    proc = run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2", "--sigma-p", "0.7")
    assert_one_line_error(proc, "cannot resume %s: it was trained with --sigma-p 1.0, not 0.7"
                          % run_dir)
    proc = run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2", "--sigma-p", "1")
    assert proc.returncode == 0, proc.stderr
    resumed = read_json(run_dir / "config.json")
    assert resumed["prior_settings"] == {"sigma_p": 1.0} and "pi" not in resumed
    assert "ivon" not in resumed and len(read_json(run_dir / "history.json")) == 2


def test_resume_without_the_history_is_refused(tmp_path, one_epoch):
    run_dir = copy_of(one_epoch, tmp_path)
    (run_dir / "history.json").unlink()
    proc = run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2")
    assert_one_line_error(proc, "%s does not exist, but the checkpoint has 1 epochs: the run's "
                                "history is lost" % (run_dir / "history.json"))
    assert not (run_dir / "history.json").exists()


# 3. Tampered run files.

@pytest.mark.parametrize("content, expected", [
    ("null", "config.json is not a JSON object of a run's settings (it holds NoneType)"),
    ("[]", "config.json is not a JSON object of a run's settings (it holds list)"),
    ('{"num_hidden_units": -5}', "config.json: field num_hidden_units must be an integer >= 1, "
                                 "got -5"),
    ('{"colour": "blue"}', "config.json: unknown field(s) colour"),
    ("{", "cannot read"),
])
def test_a_tampered_config_is_named_with_its_file_and_field(tmp_path, one_epoch, content,
                                                            expected):
    run_dir = copy_of(one_epoch, tmp_path)
    (run_dir / "config.json").write_text(content)
    for cmd, args in ((TRAIN, ["--out", run_dir, "--resume", "--epochs", "2"]),
                      (PRUNE, ["--checkpoint", run_dir]),
                      (EVALUATE, ["--checkpoint", run_dir])):
        proc = run(cmd, *args)
        assert_one_line_error(proc, expected)
        assert "--num-hidden-units" not in proc.stderr and "--config" not in proc.stderr


@pytest.mark.parametrize("content, expected", [
    ('[{"epoch": 1, "loss"', "cannot read"),
    ('{"epoch": 1}', "is not a list of epoch records 1, 2, ..."),
    ("[]", "holds 0 epochs, the checkpoint 1: the run's history is incomplete"),
])
def test_a_tampered_history_is_refused_on_resume(tmp_path, one_epoch, content, expected):
    run_dir = copy_of(one_epoch, tmp_path)
    (run_dir / "history.json").write_text(content)
    assert_one_line_error(run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2"), expected)


def test_a_checkpoint_that_is_a_directory_is_named_once(tmp_path, one_epoch):
    run_dir = copy_of(one_epoch, tmp_path)
    (run_dir / "checkpoint.params").unlink()
    (run_dir / "checkpoint.params").mkdir()
    expected = "%s is a directory, not a checkpoint file" % (run_dir / "checkpoint.params")
    for cmd, args in ((PRUNE, ["--checkpoint", run_dir]),
                      (PRUNE, ["--checkpoint", run_dir / "checkpoint.params"]),
                      (EVALUATE, ["--checkpoint", run_dir]),
                      (TRAIN, ["--out", run_dir, "--resume", "--epochs", "2"])):
        assert_one_line_error(run(cmd, *args), expected)



def test_a_parameter_file_outside_a_run_directory_is_named_as_such(tmp_path, one_epoch):
    # every command that reads a run takes its parameter file too, and reads the run beside it
    # (but --init-from, which reads the means alone): a file with no run beside it was "<its
    # directory> holds no run", naming no file the user gave
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.copy(str(one_epoch / "checkpoint.params"), str(outside / "checkpoint.params"))
    params = outside / "checkpoint.params"
    expected = ("%s is a file outside a run directory (%s holds no config.json): name a run "
                "directory, or its checkpoint.params or best.params" % (params, outside))
    for cmd, args in ((EVALUATE, [params]), (PRUNE, ["--checkpoint", params]),
                      (COMPRESS, [params, "--out", tmp_path / "model.gbbb"]),
                      (SHIFT, [params, "--out", tmp_path / "shift"]),
                      (PREDICT, [params, params])):
        assert_one_line_error(run(cmd, *args), expected)
    assert files_of(tmp_path) == ["elsewhere"] and files_of(outside) == ["checkpoint.params"]
    # a run's start takes the means alone; the same file in its run is read
    assert run(TRAIN, "--out", tmp_path / "started", "--init-from", params, "--epochs", "1",
               *SMALL).returncode == 0
    assert run(EVALUATE, one_epoch / "checkpoint.params", "--test-samples", "2",
               "--out", tmp_path / "report").returncode == 0


# 4. SIGTERM and SIGINT.

def start_training(out, *args):
    return start(TRAIN, "--out", out, *args)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_after_an_epoch_keeps_it_and_resume_goes_on(tmp_path, signum):
    out = tmp_path / "run"
    proc = start_training(out, "--epochs", "100000", *SMALL)
    try:
        deadline = time.time() + 120
        while not (out / "checkpoint.params").exists() and time.time() < deadline:
            time.sleep(0.1)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT"
    assert proc.returncode == 128 + signum, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        stopped_by("train_mnist.py", name) + "; "), stderr
    saved = len(read_json(out / "history.json"))
    assert lines[0].endswith("%d completed epoch%s saved in %s; --resume continues the run" % (
        saved, " is" if saved == 1 else "s are", out)), lines[0]
    assert temporaries(out) == []
    proc = run(TRAIN, "--out", out, "--resume", "--epochs", saved + 1)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_first_epoch_claims_nothing_saved(tmp_path, signum):
    out = tmp_path / "run"
    # 50 weight samples a step: the first epoch takes seconds
    proc = start_training(out, "--epochs", "1", "--train-size", "5000", "--num-samples", "50",
                          "--num-hidden-units", "400", "--seed", "1")
    try:
        assert proc.stdout.readline().startswith("training on")
        assert proc.stdout.readline().startswith("backend:")
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, stderr
    assert stderr.strip().endswith("no epoch was completed, so nothing is saved"), stderr
    assert "--resume" not in stderr and not (out / "checkpoint.params").exists()


# 5. No data and no network.

def offline_env(home):
    """A user with no MNIST anywhere and a download host whose name never resolves."""
    return {"HOME": str(home), "MXNET_GLUON_REPO": "https://mnist-host.invalid/",
            "GLUON_BBB_DATA": None}


def test_no_data_and_no_network_is_one_line_and_makes_no_run_directory(tmp_path):
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, env=offline_env(tmp_path))
    assert_one_line_error(proc, "train_mnist.py: error: MNIST not found in ")
    assert "(the download failed: no network); name a directory of its four IDX files " \
           "(train-images-idx3-ubyte[.gz] and the others) with --data-dir or $GLUON_BBB_DATA" \
        in proc.stderr
    # one line of about 200 characters besides the directory searched
    assert len(proc.stderr.strip()) - len(str(tmp_path / ".mxnet/datasets/mnist")) < 210
    assert proc.stderr.strip().endswith("with --data-dir or $GLUON_BBB_DATA")
    assert "HTTPSConnection" not in proc.stderr and len(proc.stderr) < 600
    assert not out.exists() and proc.stdout == ""


@pytest.mark.slow
def test_prune_and_evaluate_read_the_data_directory_the_run_was_trained_on(tmp_path):
    out = tmp_path / "run"
    env = offline_env(tmp_path)
    data_dir = os.environ["GLUON_BBB_DATA"]
    proc = run(TRAIN, "--out", out, "--data-dir", data_dir, "--epochs", "1", *SMALL, env=env)
    assert proc.returncode == 0, proc.stderr
    assert read_json(out / "config.json")["data_dir"] == os.path.abspath(data_dir)
    for cmd in (PRUNE, EVALUATE):
        proc = run(cmd, "--checkpoint", out, env=env)
        assert proc.returncode == 0, proc.stderr
    assert read_json(out / "pruning.json")["data_dir"] == os.path.abspath(data_dir)


def test_commands_refuse_other_mnist_files_than_the_runs_and_take_its_own_anywhere(tmp_path,
                                                                                   one_epoch):
    # Fashion-MNIST's files have MNIST's names and shapes: without the run's record of its
    # files, resuming would train on them and compress would choose and score on them
    run_dir = copy_of(one_epoch, tmp_path)
    other = mnist_copy(tmp_path / "other", changed_pixel=True)
    before = {name: (run_dir / name).read_bytes() for name in files_of(run_dir)}
    for cmd, args in ((TRAIN, ["--resume", "--out", run_dir, "--epochs", "2"]),
                      (EVALUATE, ["--checkpoint", run_dir]),
                      (PRUNE, ["--checkpoint", run_dir]),
                      (COMPRESS, [run_dir, "--out", tmp_path / "model.gbbb"]),
                      (SHIFT, [run_dir, "--out", tmp_path / "shift"])):
        proc = run(cmd, *args, "--data-dir", other)
        assert_one_line_error(proc, "%s holds other MNIST files than %s was trained on" % (
            os.path.abspath(other), run_dir))
        assert "--data-dir" in proc.stderr
    assert {name: (run_dir / name).read_bytes() for name in files_of(run_dir)} == before
    assert not (tmp_path / "model.gbbb").exists()
    # predict, which takes no --data-dir, reads the recorded directory, else $GLUON_BBB_DATA
    moved = copy_of(one_epoch, tmp_path, "moved")
    record = read_json(moved / "config.json")
    (moved / "config.json").write_text(json.dumps(dict(record, data_dir=str(tmp_path / "gone"))))
    np.save(tmp_path / "digit.npy", np.zeros(784, dtype=np.uint8))
    proc = run(PREDICT, moved, tmp_path / "digit.npy", env={"GLUON_BBB_DATA": str(other)})
    assert_one_line_error(proc, "was trained on")
    assert "set $GLUON_BBB_DATA to the directory it was trained on" in proc.stderr
    same = mnist_copy(tmp_path / "same")
    proc = run(TRAIN, "--resume", "--out", run_dir, "--epochs", "2", "--data-dir", same)
    assert proc.returncode == 0, proc.stderr
    record = read_json(run_dir / "config.json")
    assert record["data_dir"] == os.path.abspath(same)
    assert record["data_fingerprint"] == read_json(one_epoch / "config.json")["data_fingerprint"]


# 6. Checks before any work.

@pytest.mark.parametrize("args, expected", [
    (["--num-hidden-units", "200000"], "train_mnist.py: error: a network of 40,159,200,010 "
                                       "parameters (--num-hidden-layers 2, --num-hidden-units "
                                       "200000) needs about "),
    (["--num-samples", "1000000"], "--num-samples must be an integer in [1, 1000], got 1000000"),
    (["--validation", "60000"], "--validation must be less than the 60000 training images, "
                                "got 60000"),
    (["--batch-size", "1000", "--train-size", "500"],
     "--batch-size must be at most the 500 training images (after --train-size and "
     "--validation), got 1000"),
    (["--test-samples", "5000"], "--test-samples must be an integer in [0, 1000], got 5000"),
])
def test_checks_come_before_the_run_directory_is_made(tmp_path, args, expected):
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, *args)
    assert_one_line_error(proc, expected)
    assert proc.stdout == "" and not out.exists()


def test_an_empty_out_is_refused(tmp_path, one_epoch):
    assert_one_line_error(run(TRAIN, "--out", ""), "--out must be a directory path, got ''")
    assert_one_line_error(run(PRUNE, "--checkpoint", one_epoch, "--out", " "),
                          "--out must be a directory path, got ' '")


# 7. What a non-finite loss is put down to.

@pytest.mark.parametrize("args", [["--sigma-p", "1e-30"], ["--mu-scale", "1e30"],
                                  ["--num-hidden-layers", "50", "--mu-scale", "1"],
                                  ["--kl-scale", "1e+20"]])
def test_a_loss_non_finite_from_the_start_is_not_blamed_on_the_rate(tmp_path, args):
    proc = run(TRAIN, "--out", tmp_path / "run", "--epochs", "1", "--learning-rate", "1e-9",
               "--train-size", "512", "--num-hidden-units", "20", "--seed", "1", *args)
    assert_one_line_error(proc, "loss became non-finite (")
    assert "at epoch 1, batch " in proc.stderr
    assert "so the cause is the starting point, not the learning rate" in proc.stderr
    assert "--mu-scale" in proc.stderr and "smaller --learning-rate" not in proc.stderr
    # the flag given is named first, with its value
    assert "%s %g" % (args[-2], float(args[-1])) in proc.stderr.split("(this run's")[0]
    # a run that saved no epoch leaves nothing behind
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_loss_that_diverges_after_updates_names_the_setting_given(tmp_path):
    # IVON's step scales with its Hessian's start: the flag given is named, not the rate alone
    proc = run(TRAIN, "--out", tmp_path / "run", "--epochs", "1", "--model", "ivon",
               "--ivon-hess-init", "1e20", "--train-size", "512", "--num-hidden-units", "20",
               "--seed", "1", "--test-samples", "0")
    assert_one_line_error(proc, "loss became non-finite (")
    assert "at --learning-rate 0.5 with --ivon-hess-init 1e+20: the steps these give are too " \
           "large" in proc.stderr
    assert "--mu-scale" not in proc.stderr  # IVON's own default, not a setting given


@pytest.mark.slow
def test_a_loss_that_diverges_later_names_the_rate(tmp_path):
    proc = run(TRAIN, "--out", tmp_path / "run", "--epochs", "1", "--learning-rate", "100",
               "--train-size", "1000", "--seed", "1")
    assert_one_line_error(proc, "loss became non-finite")
    assert "updates at --learning-rate 100: the steps are too large" in proc.stderr


# 8. Pipes.

@pytest.mark.slow
def test_prune_into_head_0_is_quiet_in_a_users_shell(one_epoch, tmp_path):
    out = tmp_path / "piped"
    proc = run(["/bin/bash", "-c", "%s | head -0; echo ${PIPESTATUS[0]}" % command(
        PRUNE, "--checkpoint", one_epoch, "--out", out)])
    assert proc.stderr == "" and proc.stdout.strip() == str(128 + signal.SIGPIPE)
    assert files_of(out) == [".lock", "pruning.json", "pruning.png", "snr.png"]


# 9. What the commands print and record.

@pytest.mark.parametrize("name", ["train", "prune", "evaluate", "regression", "sweep", "compress",
                                  "predict", "shift"])
def test_every_flag_has_a_description(name):
    parser = importlib.import_module("gluon_bbb.commands." + name).build_parser()
    flags = [action for action in parser._actions if action.option_strings != ["-h", "--help"]]
    assert len(flags) >= 5
    for action in flags:
        words = re.sub(r"\(?default:[^)]*\)?", "", action.help or "").split()
        assert len(words) >= 2, (action.option_strings, action.help)
        # each default said once
        defaults = re.findall(r"\(default[: ]([^)]*)\)", action.help or "")
        assert len(defaults) == len(set(defaults)), (action.option_strings, action.help)
        assert (action.help or "").count("(default") <= 2, (action.option_strings, action.help)


@pytest.mark.slow
def test_pruning_a_deterministic_run_says_magnitude(tmp_path):
    out = tmp_path / "mlp"
    assert run(TRAIN, "--out", out, "--epochs", "1", "--model", "mlp", "--test-samples", "0",
               *SMALL[:4]).returncode == 0
    proc = run(PRUNE, "--checkpoint", out, "--proportions", "0", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert "| removed by magnitude |" in proc.stdout
    report = read_json(out / "pruning.json")
    # the old name of the model kind reads, and config.json and the report give its name
    assert report["criterion"] == "magnitude" and report["model"] == "deterministic"
    assert read_json(out / "config.json")["model"] == "deterministic"


@pytest.mark.slow
def test_training_labels_its_two_test_accuracies(one_epoch, tmp_path):
    proc = run(TRAIN, "--out", tmp_path / "run", "--epochs", "1", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "test accuracy (mean weights)" in proc.stdout
    assert "uncertainty (2 weight samples): test accuracy" in proc.stdout
    assert "final test accuracy (mean weights)" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("field, value", [("model", "deterministic"), ("optimizer", "adam")])
def test_a_config_json_changed_after_its_checkpoint_is_not_believed(one_epoch, tmp_path, field,
                                                                     value):
    changed = copy_of(one_epoch, tmp_path)
    config = read_json(changed / "config.json")
    config[field] = value
    (changed / "config.json").write_text(json.dumps(config))
    def files():  # the lock holds the pid of the last command that took it
        return {name: (changed / name).read_bytes() for name in files_of(changed)
                if name != ".lock"}
    before = files()
    for cmd in ([TRAIN, "--out", changed, "--epochs", "2", "--resume"],
                [EVALUATE, changed], [PRUNE, changed]):
        assert_one_line_error(run(*cmd), "checkpoint.params was trained as bbb sgd (model, "
                                         "optimizer), its run's config.json says")
    assert files() == before

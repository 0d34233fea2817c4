"""learning/rundir.py: the run directory as the commands meet it. Resume trains the run an
uninterrupted one trains, bit for bit, and refuses what would change it; tampered, moved or
missing files are named on one line; a run is locked against a second writer; a crash or a
signal while an epoch is written loses nothing; the checks that come before a run directory is
made. The commands run in this process (``commands.run``) on the shared small runs."""
import json
import os
import shutil
import signal

import numpy as np
import pytest
from mxnet import nd

from commands import (COMPRESS, EVALUATE, PREDICT, PRUNE, SHIFT, TRAIN, assert_one_line_error,
                      mnist_copy, run, stopped_by)
from conftest import SMALL
from gluon_bbb import CheckpointError, Config, load_checkpoint, train
from gluon_bbb.learning.rundir import RunDirectory, best_validation_epoch

QUIET = dict(log=lambda line: None, progress=False)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def files_of(directory, lock=True):
    """{name: bytes} of a directory's files (the lock file, the last holder's pid, only with
    ``lock``)."""
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))
            if (directory / name).is_file() and (lock or name != ".lock")}


def same_parameters(a, b):
    for x, y in zip(a.mus + a.rhos, b.mus + b.rhos):
        np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())


# 1. Resume: the run trained at once, bit for bit, whatever the run's kind.

RESUMED = {
    "sgd": dict(num_hidden_units=20),
    "adam": dict(num_hidden_units=20, optimizer="adam"),
    # the linear schedule: the run's length sets every epoch's rate
    "linear": dict(num_hidden_units=20, optimizer="adam", lr_schedule="linear"),
    # the cosine schedule: the run's length sets every epoch's rate
    "ivon": dict(num_hidden_units=20, model="ivon", parametrization="log_variance", prior="none",
                 learning_rate=0.5, lr_schedule="cosine"),
    "lenet": dict(network="conv:4:5,relu,pool:2,dense:10", optimizer="adam"),
    # what the prior switches off removed as it trains (sparse variational dropout)
    "removal": dict(network="dense:30,relu,dense:10", prior="log_uniform", kl="analytic",
                    parametrization="log_variance", estimator="lrt", remove_switched_off=True,
                    optimizer="adam", rho_offset=-10.0, kl_warmup_epochs=1),
}


@pytest.mark.parametrize("kind", sorted(RESUMED))
def test_a_resumed_run_is_the_run_trained_at_once(tmp_path, mnist, ctx, kind):
    config = Config.from_dict(dict(RESUMED[kind], train_size=300, validation=500, epochs=3,
                                   seed=5))
    whole = train(config, mnist, ctx, out_dir=str(tmp_path / "whole"), **QUIET)
    split = str(tmp_path / "split")

    def stop_after_the_second_epoch(text):
        # as a signal would: its checkpoint is on disk by now (its row comes under the header)
        if any(line.startswith("epoch 2/") for line in text.splitlines()):
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        train(config, mnist, ctx, out_dir=split, log=stop_after_the_second_epoch, progress=False)
    resumed = train(config, mnist, ctx, out_dir=split, resume=True, **QUIET)
    same_parameters(whole, resumed)
    assert [r["epoch"] for r in read_json(os.path.join(split, "history.json"))] == [1, 2, 3]
    for name in ("best.params", "checkpoint.params"):
        whole_file, split_file = (nd.load(os.path.join(d, name))
                                  for d in (str(tmp_path / "whole"), split))
        assert sorted(whole_file) == sorted(split_file)
        for key in whole_file:
            np.testing.assert_array_equal(whole_file[key].asnumpy(), split_file[key].asnumpy())
    saved = nd.load(os.path.join(split, "checkpoint.params"))
    assert any(key.startswith("opt:") for key in saved) == (kind not in ("sgd",))


def test_a_resume_may_add_a_decay_after_the_trained_epochs_only(tmp_path, mnist, ctx):
    decayed = Config(train_size=300, epochs=3, seed=2, optimizer="adam", num_hidden_units=20,
                     lr_decay_every=2, lr_decay_factor=0.1)
    whole = train(decayed, mnist, ctx, **QUIET)
    split = str(tmp_path / "split")
    train(Config(**dict(decayed.to_dict(), epochs=2, lr_decay_every=0)), mnist, ctx,
          out_dir=split, **QUIET)
    with pytest.raises(CheckpointError, match="changes the rate of epochs already trained "
                                              r"\(epoch 2\)"):
        train(Config(**dict(decayed.to_dict(), lr_decay_every=1)), mnist, ctx, out_dir=split,
              resume=True, **QUIET)
    linear = Config(**dict(decayed.to_dict(), lr_schedule="linear", lr_decay_every=0))
    with pytest.raises(CheckpointError, match=r"\(epoch 2\)"):  # 5e-4 would become 6.7e-4
        train(linear, mnist, ctx, out_dir=split, resume=True, **QUIET)
    resumed = train(decayed, mnist, ctx, out_dir=split, resume=True, **QUIET)
    same_parameters(whole, resumed)
    assert [r["learning_rate"] for r in resumed.history] == pytest.approx([1e-3, 1e-3, 1e-4])
    assert read_json(os.path.join(split, "config.json"))["lr_decay_every"] == 2


def test_a_crash_between_history_and_checkpoint_loses_no_history_row(tmp_path, mnist, ctx,
                                                                     monkeypatch):
    # as a power cut as the checkpoint of epoch 2 is about to be written: history.json and
    # best.params of that epoch are written by then
    config = Config(train_size=300, epochs=3, validation=500, seed=1, num_hidden_units=20)
    write = RunDirectory.save_parameters

    class PowerCut(BaseException):
        pass

    def save_parameters(self, step, epoch, best=False):
        if epoch == 2 and not best:
            raise PowerCut
        return write(self, step, epoch, best)
    out = str(tmp_path / "crash")
    monkeypatch.setattr(RunDirectory, "save_parameters", save_parameters)
    with pytest.raises(PowerCut):
        train(config, mnist, ctx, out_dir=out, **QUIET)
    monkeypatch.undo()
    assert [r["epoch"] for r in read_json(os.path.join(out, "history.json"))] == [1, 2]
    assert load_checkpoint(out)["epoch"] == 1
    resumed = train(config, mnist, ctx, out_dir=out, resume=True, **QUIET)
    assert [r["epoch"] for r in read_json(os.path.join(out, "history.json"))] == [1, 2, 3]
    whole = str(tmp_path / "whole")
    same_parameters(train(config, mnist, ctx, out_dir=whole, **QUIET), resumed)
    best = [load_checkpoint(os.path.join(d, "best.params")) for d in (out, whole)]
    assert best[0]["epoch"] == best[1]["epoch"]
    for a, b in zip(best[0]["mus"], best[1]["mus"]):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_while_an_epoch_is_written_waits_for_its_checkpoint(tmp_path, monkeypatch,
                                                                     name):
    write = RunDirectory.save_parameters

    def save_parameters(self, step, epoch, best=False):
        if epoch == 2 and not best:
            os.kill(os.getpid(), getattr(signal, name))
        return write(self, step, epoch, best)
    monkeypatch.setattr(RunDirectory, "save_parameters", save_parameters)
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, "--epochs", "3", *SMALL)
    assert proc.returncode == 128 + getattr(signal, name), proc.stderr
    assert proc.stderr.strip() == stopped_by("train_mnist.py", name) + (
        "; 2 completed epochs are saved in %s; --resume continues the run" % out)
    assert [r["epoch"] for r in read_json(out / "history.json")] == [1, 2]
    assert load_checkpoint(str(out))["epoch"] == 2


def test_a_run_that_trained_all_its_epochs_resumes_to_its_reports(tmp_path, runs):
    # a run stopped after its last checkpoint but before its reports (a signal, a sweep ended
    # between the two) is finished by --resume: nothing is trained, the reports are drawn
    run_dir = runs.copy("small", tmp_path)
    for name in ("uncertainty.json", "uncertainty.png", "accuracy.png"):
        os.remove(run_dir / name)
    before = files_of(run_dir, lock=False)
    for args in ([], ["--epochs", "1"]):
        proc = run(TRAIN, "--out", run_dir, "--resume", *args)
        assert proc.returncode == 0, proc.stderr
        assert "%s has trained all its 1 epochs: nothing to train" % run_dir in proc.stdout
        assert "epoch 1/1" not in proc.stdout
        after = files_of(run_dir, lock=False)
        assert {name: after[name] for name in before} == before
        assert {"uncertainty.json", "uncertainty.png", "accuracy.png"} <= set(after)
    assert_one_line_error(run(TRAIN, "--out", run_dir, "--resume", "--epochs", "0"),
                          "%s has trained 1 epochs already; --epochs must be at least 1 (more "
                          "trains on; as many trains nothing and draws the run's reports again)"
                          % run_dir)


# 2. Resuming with another command line.

def test_resume_takes_the_runs_settings_and_refuses_others(tmp_path, runs):
    run_dir = runs.copy("small", tmp_path)
    before = (run_dir / "checkpoint.params").read_bytes()
    for args, words in (
            (["--num-hidden-units", "30"], "it was trained with --num-hidden-units 8, not 30"),
            (["--preset", "paper-2x400", "--validation", "1000"],
             "it was trained with --num-hidden-units 8, not 400")):
        proc = run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2", *args)
        assert_one_line_error(proc, "cannot resume %s: %s" % (run_dir, words))
        assert proc.stdout == ""  # a refused run never says it trains or writes there
    assert (run_dir / "checkpoint.params").read_bytes() == before
    # the command that started a preset run continues it with --resume added; a run trained
    # with --eval-train resumed without it draws its plots and report after the new epoch
    preset_run = ["--preset", "paper-2x400", "--eval-train", "--validation", "1000"] + SMALL
    out = tmp_path / "preset"
    assert run(TRAIN, "--out", out, "--epochs", "1", *preset_run).returncode == 0
    proc = run(TRAIN, "--out", out, "--epochs", "2", "--resume", *preset_run[:2],
               *preset_run[3:])
    assert proc.returncode == 0, proc.stderr
    assert "epoch 2/2" in proc.stdout and "epoch 1/2" not in proc.stdout
    assert read_json(out / "config.json")["optimizer"] == "adam"
    history = read_json(out / "history.json")
    assert "train_accuracy" in history[0] and "train_accuracy" not in history[1]
    assert (out / "accuracy.png").stat().st_mtime >= (out / "checkpoint.params").stat().st_mtime
    assert read_json(out / "uncertainty.json")["epoch"] == 2


def test_a_run_whose_config_holds_its_settings_flat_resumes(tmp_path, runs):
    """config.json as it was before the prior's and IVON's settings were grouped: each a field
    of its own, every prior's scales and IVON's settings written for every run."""
    run_dir = runs.copy("small", tmp_path)
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


# 3. Tampered, missing and moved run files.

@pytest.mark.parametrize("content, expected", [
    ("null", "config.json is not a JSON object of a run's settings (it holds NoneType)"),
    ('{"num_hidden_units": -5}', "config.json: field num_hidden_units must be an integer >= 1, "
                                 "got -5"),
    ('{"colour": "blue"}', "config.json: unknown field(s) colour"),
    ("{", "cannot read"),
])
def test_a_tampered_config_is_named_with_its_file_and_field(tmp_path, runs, content, expected):
    run_dir = runs.copy("small", tmp_path)
    (run_dir / "config.json").write_text(content)
    for cmd, args in ((TRAIN, ["--out", run_dir, "--resume", "--epochs", "2"]),
                      (PRUNE, ["--checkpoint", run_dir]),
                      (EVALUATE, ["--checkpoint", run_dir])):
        proc = run(cmd, *args)
        assert_one_line_error(proc, expected)
        assert "--num-hidden-units" not in proc.stderr and "--config" not in proc.stderr


@pytest.mark.parametrize("content, expected", [
    (None, "does not exist, but the checkpoint has 1 epochs: the run's history is lost"),
    ('[{"epoch": 1, "loss"', "cannot read"),
    ('{"epoch": 1}', "is not a list of epoch records 1, 2, ..."),
    ("[]", "holds 0 epochs, the checkpoint 1: the run's history is incomplete"),
])
def test_a_tampered_history_is_refused_on_resume(tmp_path, runs, content, expected):
    run_dir = runs.copy("small", tmp_path)
    if content is None:
        (run_dir / "history.json").unlink()
    else:
        (run_dir / "history.json").write_text(content)
    assert_one_line_error(run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2"),
                          "%s %s" % (run_dir / "history.json", expected)
                          if content is None else expected)
    assert (content is None) != (run_dir / "history.json").exists()


@pytest.mark.parametrize("field, value", [("model", "deterministic"), ("optimizer", "adam")])
def test_a_config_json_changed_after_its_checkpoint_is_not_believed(tmp_path, runs, field,
                                                                     value):
    changed = runs.copy("small", tmp_path)
    (changed / "config.json").write_text(json.dumps(
        dict(read_json(changed / "config.json"), **{field: value})))
    before = files_of(changed, lock=False)
    for cmd in ([TRAIN, "--out", changed, "--epochs", "2", "--resume"], [EVALUATE, changed],
                [PRUNE, changed]):
        assert_one_line_error(run(*cmd), "checkpoint.params was trained as bbb sgd (model, "
                                         "optimizer), its run's config.json says")
    assert files_of(changed, lock=False) == before


def test_a_run_with_non_finite_parameters_is_refused_by_every_command(tmp_path, runs):
    broken = runs.copy("small", tmp_path)
    arrays = nd.load(str(broken / "checkpoint.params"))
    arrays["mu:1"][3] = np.nan
    del arrays["checksum"]  # written so, by hand or by another program
    nd.save(str(broken / "checkpoint.params"), arrays)
    digit = tmp_path / "digit.npy"
    np.save(digit, np.zeros((28, 28)))
    # each command that reads one run takes it as RUN or as --checkpoint RUN
    for cmd, args in ((PRUNE, ["--checkpoint", broken]), (EVALUATE, [broken]),
                      (COMPRESS, ["--checkpoint", broken, "--proportion", "0.5", "--out",
                                  tmp_path / "m.gbbb"]),
                      (PREDICT, [broken, digit]), (SHIFT, [broken, "--out", tmp_path / "s"]),
                      (TRAIN, ["--resume", "--out", broken, "--epochs", "3"])):
        assert_one_line_error(run(cmd, *args), "holds non-finite parameters: 1 of the 8 entries "
                                               "of mu:1 are NaN or infinite")
    assert sorted(os.listdir(tmp_path)) == ["digit.npy", "small"]


def test_a_checkpoint_that_is_a_directory_or_outside_a_run_is_named_as_such(tmp_path, runs):
    run_dir = runs.copy("small", tmp_path)
    (run_dir / "checkpoint.params").rename(tmp_path / "moved.params")
    (run_dir / "checkpoint.params").mkdir()
    expected = "%s is a directory, not a checkpoint file" % (run_dir / "checkpoint.params")
    for cmd, args in ((PRUNE, ["--checkpoint", run_dir / "checkpoint.params"]),
                      (EVALUATE, [run_dir]), (TRAIN, ["--out", run_dir, "--resume"])):
        assert_one_line_error(run(cmd, *args), expected)
    # every command that reads a run takes its parameter file too, and reads the run beside
    # it (but --init-from, which reads the means alone)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    params = outside / "checkpoint.params"
    shutil.copy(str(runs["small"] / "checkpoint.params"), str(params))
    expected = ("%s is a file outside a run directory (%s holds no config.json): name a run "
                "directory, or its checkpoint.params or best.params" % (params, outside))
    for cmd, args in ((EVALUATE, [params]), (PRUNE, ["--checkpoint", params]),
                      (COMPRESS, [params, "--out", tmp_path / "model.gbbb"]),
                      (SHIFT, [params, "--out", tmp_path / "shift"]), (PREDICT, [params, params])):
        assert_one_line_error(run(cmd, *args), expected)
    assert sorted(os.listdir(outside)) == ["checkpoint.params"]
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "moved.params", "small"]
    assert run(TRAIN, "--out", tmp_path / "started", "--init-from", params, "--epochs", "1",
               *SMALL).returncode == 0
    with pytest.raises(CheckpointError, match="checkpoint .*nowhere does not exist"):
        load_checkpoint(str(tmp_path / "nowhere"))


# 4. The data a run was trained on.

def offline_env(home):
    """A user with no MNIST anywhere and a download host whose name never resolves."""
    return {"HOME": str(home), "MXNET_GLUON_REPO": "https://mnist-host.invalid/",
            "GLUON_BBB_DATA": None}


def test_no_data_and_no_network_is_one_line_and_makes_no_run_directory(tmp_path):
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, env=offline_env(tmp_path))
    assert_one_line_error(proc, "train_mnist.py: error: MNIST not found in %s (the download "
                                "failed: no network); name a directory of its four IDX files "
                                "(train-images-idx3-ubyte[.gz] and the others) with --data-dir "
                                "or $GLUON_BBB_DATA" % (tmp_path / ".mxnet/datasets/mnist"))
    assert not out.exists() and proc.stdout == ""


def test_a_runs_readers_take_its_own_mnist_anywhere_and_no_other(tmp_path, runs):
    # Fashion-MNIST's files have MNIST's names and shapes: without the run's record of its
    # files, resuming would train on them and compress would choose and score on them
    run_dir = runs.copy("small", tmp_path)
    other = mnist_copy(tmp_path / "other", changed_pixel=True)
    before = files_of(run_dir)
    for cmd, args in ((TRAIN, ["--resume", "--out", run_dir, "--epochs", "2"]),
                      (EVALUATE, ["--checkpoint", run_dir]), (PRUNE, ["--checkpoint", run_dir]),
                      (COMPRESS, [run_dir, "--out", tmp_path / "model.gbbb"]),
                      (SHIFT, [run_dir, "--out", tmp_path / "shift"])):
        proc = run(cmd, *args, "--data-dir", other)
        assert_one_line_error(proc, "%s holds other MNIST files than %s was trained on" % (
            os.path.abspath(other), run_dir))
        assert "--data-dir" in proc.stderr
    assert files_of(run_dir) == before and not (tmp_path / "model.gbbb").exists()
    # predict, which takes no --data-dir, reads the recorded directory, else $GLUON_BBB_DATA
    moved = runs.copy("small", tmp_path, "moved")
    record = read_json(moved / "config.json")
    (moved / "config.json").write_text(json.dumps(dict(record, data_dir=str(tmp_path / "gone"))))
    np.save(tmp_path / "digit.npy", np.zeros(784, dtype=np.uint8))
    proc = run(PREDICT, moved, tmp_path / "digit.npy", env={"GLUON_BBB_DATA": str(other)})
    assert_one_line_error(proc, "was trained on")
    assert "set $GLUON_BBB_DATA to the directory it was trained on" in proc.stderr
    # with no MNIST anywhere else, prune and evaluate read the directory the run recorded
    env = offline_env(tmp_path)
    for cmd in (PRUNE, EVALUATE):
        proc = run(cmd, "--checkpoint", run_dir, "--proportions" if cmd is PRUNE else
                   "--test-samples", "1", env=env)
        assert proc.returncode == 0, proc.stderr
    assert read_json(run_dir / "pruning.json")["data_dir"] == record["data_dir"]
    same = mnist_copy(tmp_path / "same")
    proc = run(TRAIN, "--resume", "--out", run_dir, "--epochs", "2", "--data-dir", same)
    assert proc.returncode == 0, proc.stderr
    resumed = read_json(run_dir / "config.json")
    assert resumed["data_dir"] == os.path.abspath(same)
    assert resumed["data_fingerprint"] == record["data_fingerprint"]


def test_a_link_to_a_directory_is_an_out_and_a_run_like_the_directory(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    proc = run(TRAIN, "--out", tmp_path / "link", "--epochs", "1", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert {"checkpoint.params", "uncertainty.json", "accuracy.png"} <= set(
        os.listdir(tmp_path / "real"))
    for cmd, args in ((TRAIN, ["--out", tmp_path / "link", "--resume", "--epochs", "2"]),
                      (PRUNE, [tmp_path / "link", "--proportions", "0"])):
        proc = run(cmd, *args)
        assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "real" / "pruning.json").exists()


# 5. The lock.

def test_a_run_directory_in_use_is_refused_naming_its_holder(tmp_path, runs):
    run_dir = runs.copy("small", tmp_path)
    with RunDirectory(str(run_dir)).locked():  # as another process holds it
        before = files_of(run_dir)
        for cmd, args in ((TRAIN, ["--out", run_dir, "--epochs", "1"] + SMALL),
                          (TRAIN, ["--out", run_dir, "--resume", "--epochs", "2"]),
                          (PRUNE, ["--checkpoint", run_dir]), (EVALUATE, [run_dir])):
            assert_one_line_error(run(cmd, *args), "%s is in use by another process (pid %d)"
                                  % (run_dir, os.getpid()))
        assert files_of(run_dir) == before
    # the lock goes with its holder
    assert run(TRAIN, "--out", run_dir, "--resume", "--epochs", "2").returncode == 0


# 6. Checks before any work: nothing is made where a run is refused.

@pytest.mark.parametrize("args, expected", [
    (["--num-hidden-units", "200000"], "train_mnist.py: error: a network of 40,159,200,010 "
                                       "parameters (--num-hidden-layers 2, --num-hidden-units "
                                       "200000) needs about "),
    (["--num-samples", "1000000"], "--num-samples must be an integer in [1, 1000], got 1000000"),
    (["--validation", "6000"], "--validation must be less than the 6000 training images, "
                               "got 6000"),
    (["--batch-size", "1000", "--train-size", "500"],
     "--batch-size must be at most the 500 training images (after --train-size and "
     "--validation), got 1000"),
    (["--test-samples", "5000"], "--test-samples must be an integer in [0, 1000], got 5000"),
    # a value beyond the data is refused, not clamped
    (["--train-size", "5001", "--validation", "1000"], "--train-size must be at most the 5000 "
                                                       "training images (after --validation), "
                                                       "got 5001"),
    (["--epochs", "0"], "--epochs must be at least 1 for a new run (nothing to train)"),
    (["--resume"], "--resume needs --out naming the run to continue"),
])
def test_checks_come_before_the_run_directory_is_made(tmp_path, args, expected):
    out = tmp_path / "run"
    proc = run(TRAIN, *([] if args == ["--resume"] else ["--out", out]), *args)
    assert_one_line_error(proc, expected)
    assert proc.stdout == "" and not out.exists()


def test_an_empty_out_or_one_that_holds_no_run_or_another_is_refused(tmp_path, runs):
    assert_one_line_error(run(TRAIN, "--out", ""), "--out must be a directory path, got ''")
    assert_one_line_error(run(PRUNE, "--checkpoint", runs["small"], "--out", " "),
                          "--out must be a directory path, got ' '")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(run(TRAIN, "--out", empty, "--resume"), "%s holds no run" % empty)
    run_dir = runs.copy("small", tmp_path)
    before = files_of(run_dir, lock=False)
    proc = run(TRAIN, "--out", run_dir, "--epochs", "1")
    assert_one_line_error(proc, "already holds a run")
    assert proc.stdout == "" and files_of(run_dir, lock=False) == before


# 7. What a non-finite loss is put down to.

@pytest.mark.parametrize("args", [["--sigma-p", "1e-30"], ["--mu-scale", "1e30"],
                                  ["--num-hidden-layers", "50", "--mu-scale", "1"],
                                  ["--kl-scale", "1e+20"]])
def test_a_loss_non_finite_from_the_start_is_not_blamed_on_the_rate(tmp_path, args):
    proc = run(TRAIN, "--out", tmp_path / "run", "--epochs", "1", "--learning-rate", "1e-9",
               *SMALL, *args)
    assert_one_line_error(proc, "loss became non-finite (")
    assert "at epoch 1, batch " in proc.stderr
    assert "so the cause is the starting point, not the learning rate" in proc.stderr
    assert "--mu-scale" in proc.stderr and "smaller --learning-rate" not in proc.stderr
    # the flag given is named first, with its value
    assert "%s %g" % (args[-2], float(args[-1])) in proc.stderr.split("(this run's")[0]
    # a run that saved no epoch leaves nothing behind
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, words", [
    # a setting of the start given is named beside the rate
    (["--learning-rate", "100", "--mu-scale", "0.2", "--train-size", "1000"],
     "at --learning-rate 100 with --mu-scale 0.2: the steps these give are too large"),
    (["--learning-rate", "100", "--train-size", "1000"], "updates at --learning-rate 100: the "
                                                         "steps are too large")])
def test_a_loss_that_diverges_after_updates_names_the_setting_given(tmp_path, args, words):
    proc = run(TRAIN, "--out", tmp_path / "run", "--epochs", "1", *SMALL, *args)
    assert_one_line_error(proc, "loss became non-finite (")
    assert words in proc.stderr and "at epoch 1, batch" in proc.stderr


def test_a_non_finite_loss_stops_the_run_and_keeps_its_last_checkpoint(tmp_path, mnist, ctx):
    from gluon_bbb import TrainingDiverged
    config = Config(train_size=300, epochs=1, seed=1, num_hidden_units=20)
    train(config, mnist, ctx, out_dir=str(tmp_path), **QUIET)
    before = {name: (tmp_path / name).read_bytes() for name in ("checkpoint.params",
                                                                "history.json")}
    # images so bright that the second layer's pre-activations overflow float32 (NaN images
    # are refused before training, with the data)
    poisoned = mnist._replace(train_images=np.full((300, 784), 1e37, np.float32),
                              train_labels=mnist.train_labels[:300])
    with pytest.raises(TrainingDiverged) as info:
        train(Config(**dict(config.to_dict(), epochs=3)), poisoned, ctx, out_dir=str(tmp_path),
              resume=True, **QUIET)
    assert (info.value.epoch, info.value.batch) == (2, 1)
    assert "epoch 2, batch 1" in str(info.value)
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


def test_best_validation_epoch_is_the_earliest_of_equals_or_the_lowest_objective(runs, mnist,
                                                                                 ctx):
    history = [{"epoch": 1, "validation_accuracy": 0.5}, {"epoch": 2, "validation_accuracy": 0.7},
               {"epoch": 3, "validation_accuracy": 0.7}, {"epoch": 4, "validation_accuracy": 0.6}]
    assert best_validation_epoch(history)["epoch"] == 2
    assert best_validation_epoch([{"epoch": 1, "test_accuracy": 0.9}]) is None
    # a run that records the objective (a prior that prunes as it trains) is ranked by it
    objectives = [dict(record, validation_objective=objective)
                  for record, objective in zip(history, (9e5, 2e4, 2e4, 3e4))]
    assert best_validation_epoch(objectives[::-1])["epoch"] == 3
    # best.params holds that epoch's means: the accuracies its history says
    run_dir = runs["overshooting"]
    history = read_json(run_dir / "history.json")
    best = best_validation_epoch(history)
    assert best["epoch"] < len(history)  # else this shows nothing
    state = load_checkpoint(str(run_dir / "best.params"), ctx)
    assert state["epoch"] == best["epoch"] and state["optimizer_states"] == []
    assert all(m.context == ctx for m in state["mus"] + state["rhos"])
    from gluon_bbb.tutorial import evaluate_accuracy
    assert evaluate_accuracy(mnist.train_images[-1000:], mnist.train_labels[-1000:],
                             state["mus"]) == pytest.approx(best["validation_accuracy"], abs=1e-6)
    assert evaluate_accuracy(mnist.test_images, mnist.test_labels, state["mus"]) == \
        pytest.approx(best["test_accuracy"], abs=1e-6) != history[-1]["test_accuracy"]


def test_checkpoints_with_weights_as_inputs_outputs_still_load(tmp_path, runs, mnist, ctx):
    # checkpoints without a layout key hold weights (inputs, outputs) and flat optimizer
    # state in that order: they load turned around, and resume to the same run
    config = Config(train_size=300, epochs=2, seed=4, optimizer="adam", num_hidden_units=30)
    whole = train(config, mnist, ctx, **QUIET)
    old = str(tmp_path / "old")
    train(Config(**dict(config.to_dict(), epochs=1)), mnist, ctx, out_dir=old, **QUIET)
    arrays = nd.load(os.path.join(old, "checkpoint.params"))
    shapes = [arrays["mu:%d" % i].shape for i in range(6)]
    for key in [k for k in arrays if k.startswith(("mu:", "rho:"))]:
        if arrays[key].ndim == 2:
            arrays[key] = arrays[key].T.copy()
    for key in [k for k in arrays if k.startswith("opt:")]:
        flat, blocks, offset = arrays[key].asnumpy(), [], 0
        for shape in shapes:
            size = int(np.prod(shape))
            block = flat[offset:offset + size].reshape(shape)
            blocks.append((block.T if len(shape) == 2 else block).ravel())
            offset += size
        arrays[key] = nd.array(np.concatenate(blocks))
    for key in ("layout", "checksum", "trained_as"):  # keys later than that layout
        del arrays[key]
    nd.save(os.path.join(old, "checkpoint.params"), arrays)
    assert nd.load(os.path.join(old, "checkpoint.params"))["mu:0"].shape == (784, 30)
    assert [m.shape for m in load_checkpoint(old)["mus"]] == shapes
    same_parameters(whole, train(config, mnist, ctx, out_dir=old, resume=True, **QUIET))

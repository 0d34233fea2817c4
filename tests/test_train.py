"""Training on real MNIST (a few thousand images), resume, the KL weighting and the CLI."""
import json
import math
import os

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import (CheckpointError, Config, ConfigError, TrainingDiverged, TrainingStep,
                       load_checkpoint, train)
from gluon_bbb.tutorial import evaluate_accuracy
from gluon_bbb.learning.rundir import best_validation_epoch
from conftest import OVERSHOOTING
from commands import EVALUATE, PRUNE, TRAIN, run


def run_script(*args):
    return run(TRAIN, *args)


def params_of(path):
    return nd.load(os.path.join(path, "checkpoint.params"))


@pytest.mark.parametrize("backend", ["native", "ndarray"])
def test_a_step_of_two_samples_averages_its_two_draws(ctx, backend, request):
    if backend == "native":
        request.getfixturevalue("native_kernels")
    X = nd.array(np.random.default_rng(0).uniform(size=(5, 784)), ctx=ctx)
    y = nd.one_hot(nd.array([0, 1, 2, 3, 4], ctx=ctx), 10)

    def step(num_samples, first_stream):
        """(loss, the update of mu) of one SGD step drawing from stream ``first_stream`` on."""
        config = Config(num_hidden_units=20, seed=0, num_samples=num_samples,
                        learning_rate=0.01)
        training = TrainingStep(config.build_plan(), ctx, backend=backend)
        training.noise.stream = first_stream
        before = training.mu.asnumpy()
        loss = training(X, y, 0.1).asscalar()
        return loss, training.mu.asnumpy() - before
    two, update_two = step(2, 0)
    (first, update_first), (second, update_second) = step(1, 0), step(1, 1)
    assert first != second
    assert two == pytest.approx((first + second) / 2, rel=1e-5)
    np.testing.assert_allclose(update_two, (update_first + update_second) / 2, rtol=1e-4,
                               atol=1e-7)


@pytest.mark.slow
def test_short_run_on_real_mnist(tmp_path, mnist, ctx):
    config = Config(train_size=3000, epochs=2, seed=0)
    result = train(config, mnist, ctx, out_dir=str(tmp_path), log=lambda line: None)
    assert [r["epoch"] for r in result.history] == [1, 2]
    assert result.history[-1]["test_accuracy"] >= 0.78
    assert all(m.context == ctx for m in result.mus + result.rhos)
    state = load_checkpoint(str(tmp_path))
    assert state["epoch"] == 2 and state["num_update"] == 2 * 24
    np.testing.assert_array_equal(state["mus"][0].asnumpy(), result.mus[0].asnumpy())
    assert not os.path.exists(tmp_path / "best.params")  # no validation set, no best epoch


@pytest.mark.slow
def test_scale_mixture_prior_trains(mnist, ctx):
    config = Config(train_size=3000, epochs=2, seed=0, prior="scale_mixture")
    result = train(config, mnist, ctx, log=lambda line: None)
    assert all(np.isfinite(r["loss"]) for r in result.history)
    # seeds 0-5 measured 0.775-0.847 (the Gaussian prior 0.805-0.852)
    assert result.history[-1]["test_accuracy"] >= 0.75


@pytest.mark.slow
@pytest.mark.parametrize("estimator,kl", [("lrt", "analytic"), ("sample", "analytic"),
                                          ("lrt", "mc")])
def test_other_estimators_train(mnist, ctx, estimator, kl):
    config = Config(train_size=3000, epochs=2, seed=0, estimator=estimator, kl=kl)
    result = train(config, mnist, ctx, log=lambda line: None)
    assert all(np.isfinite(r["loss"]) for r in result.history)
    assert result.history[-1]["test_accuracy"] >= 0.78


@pytest.mark.parametrize("channels", [8, 32])
def test_a_first_convolution_of_any_width_trains(tmp_path, mnist, ctx, channels):
    """README's network (conv:32:3 first): 8 and 32 channels, where oneDNN's inference
    convolution used to reorder a view of mu in place and fill the run with NaN."""
    config = Config(network="conv:%d:3,relu,pool:2,dense:128,relu,dense:10" % channels,
                    train_size=2000, epochs=2, seed=0, optimizer="adam", learning_rate=0.002,
                    rho_offset=-5.0)
    result = train(config, mnist, ctx, out_dir=str(tmp_path), log=lambda line: None)
    state = load_checkpoint(str(tmp_path))
    for array in state["mus"] + state["rhos"]:
        assert np.isfinite(array.asnumpy()).all()
    np.testing.assert_array_equal(state["mus"][2].asnumpy(), result.mus[2].asnumpy())
    # seed 0 measured 0.832 (8 channels) and 0.874 (32) after 2 epochs of 2,000 images
    assert result.history[-1]["test_accuracy"] >= 0.8


def test_kl_scale_multiplies_the_kl_term_only(mnist, ctx):
    # one plain-SGD step on the same batch and noise: the update is -lr (data + s * KL
    # gradient), linear in s, and s = 1 is the paper's objective (the default)
    def step(kl_scale):
        config = Config(train_size=128, epochs=1, seed=2, num_hidden_units=30,
                        prior="scale_mixture", kl_scale=kl_scale)
        result = train(config, mnist, ctx, log=lambda line: None)
        return np.concatenate([p.asnumpy().ravel() for p in result.mus + result.rhos])
    one, two, three = step(1.0), step(2.0), step(3.0)
    assert Config().kl_scale == 1.0
    assert np.abs(two - one).max() > 1e-3
    np.testing.assert_allclose(three - one, 2 * (two - one), rtol=1e-3, atol=2e-6)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_resume_reaches_the_same_parameters(tmp_path, mnist, ctx, optimizer):
    config = Config(train_size=1000, epochs=2, seed=5, optimizer=optimizer, num_hidden_units=50)
    quiet = lambda line: None
    whole = train(config, mnist, ctx, out_dir=str(tmp_path / "whole"), log=quiet)
    first = Config(**dict(config.to_dict(), epochs=1))
    train(first, mnist, ctx, out_dir=str(tmp_path / "split"), log=quiet)
    resumed = train(config, mnist, ctx, out_dir=str(tmp_path / "split"), resume=True, log=quiet)
    for a, b in zip(whole.mus + whole.rhos, resumed.mus + resumed.rhos):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    with open(tmp_path / "split" / "history.json") as f:
        assert [r["epoch"] for r in json.load(f)] == [1, 2]
    saved = params_of(str(tmp_path / "split"))
    assert any(key.startswith("opt:") for key in saved) == (optimizer == "adam")


@pytest.mark.slow
def test_resume_may_add_a_decay_after_the_trained_epochs(tmp_path, mnist, ctx):
    # a run trained at a constant rate, resumed with a decay starting after its last epoch,
    # is the run that had the decay from the start; a decay reaching back is refused
    quiet = lambda line: None
    decayed = Config(train_size=1000, epochs=3, seed=2, optimizer="adam", num_hidden_units=50,
                     lr_decay_every=2, lr_decay_factor=0.1)
    whole = train(decayed, mnist, ctx, out_dir=str(tmp_path / "whole"), log=quiet)
    constant = Config(**dict(decayed.to_dict(), epochs=2, lr_decay_every=0))
    train(constant, mnist, ctx, out_dir=str(tmp_path / "split"), log=quiet)
    with pytest.raises(CheckpointError, match="changes the rate of epochs already trained "
                                              r"\(epoch 2\)"):
        train(Config(**dict(decayed.to_dict(), lr_decay_every=1)), mnist, ctx,
              out_dir=str(tmp_path / "split"), resume=True, log=quiet)
    resumed = train(decayed, mnist, ctx, out_dir=str(tmp_path / "split"), resume=True, log=quiet)
    for a, b in zip(whole.mus + whole.rhos, resumed.mus + resumed.rhos):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    assert [r["learning_rate"] for r in resumed.history] == pytest.approx([1e-3, 1e-3, 1e-4])
    undecayed = train(Config(**dict(decayed.to_dict(), lr_decay_every=0)), mnist, ctx, log=quiet)
    assert not np.array_equal(undecayed.mus[0].asnumpy(), whole.mus[0].asnumpy())
    with open(tmp_path / "split" / "config.json") as f:
        assert json.load(f)["lr_decay_every"] == 2


def test_resume_keeps_a_linear_schedules_length(tmp_path, mnist, ctx):
    # under the linear schedule the run's length sets every epoch's rate: training longer on
    # resume changes the rates of the epochs trained after the first, so it is refused; the
    # same length resumes to the run trained in one go
    quiet = lambda line: None
    linear = Config(train_size=300, epochs=2, seed=4, optimizer="adam", num_hidden_units=20,
                    lr_schedule="linear")
    whole = train(linear, mnist, ctx, out_dir=str(tmp_path / "whole"), log=quiet)
    assert [r["learning_rate"] for r in whole.history] == pytest.approx([1e-3, 5e-4])

    class Stopped(Exception):
        pass

    def stop_after_the_first_epoch(text):
        # its checkpoint is on disk by now (the first epoch's row comes under the header)
        if any(line.startswith("epoch 1/") for line in text.splitlines()):
            raise Stopped

    with pytest.raises(Stopped):
        train(linear, mnist, ctx, out_dir=str(tmp_path / "split"), log=stop_after_the_first_epoch)
    with pytest.raises(CheckpointError, match="changes the rate of epochs already trained "
                                              r"\(epoch 2\)"):  # 5e-4 would become 6.7e-4
        train(Config(**dict(linear.to_dict(), epochs=3)), mnist, ctx,
              out_dir=str(tmp_path / "whole"), resume=True, log=quiet)
    resumed = train(linear, mnist, ctx, out_dir=str(tmp_path / "split"), resume=True, log=quiet)
    for a, b in zip(whole.mus + whole.rhos, resumed.mus + resumed.rhos):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


@pytest.mark.slow
def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(tmp_path, mnist, ctx):
    config = Config(train_size=1000, epochs=1, seed=1, num_hidden_units=50)
    train(config, mnist, ctx, out_dir=str(tmp_path), log=lambda line: None)
    before = (tmp_path / "checkpoint.params").read_bytes()
    # images so bright that the second layer's pre-activations overflow float32 (NaN images
    # are refused before training, with the data)
    poisoned = mnist._replace(train_images=np.full((1000, 784), 1e37, np.float32),
                              train_labels=mnist.train_labels[:1000])
    with pytest.raises(TrainingDiverged) as info:
        train(Config(**dict(config.to_dict(), epochs=3)), poisoned, ctx, out_dir=str(tmp_path),
              resume=True, log=lambda line: None)
    assert (info.value.epoch, info.value.batch) == (2, 1)
    assert "epoch 2, batch 1" in str(info.value)
    assert (tmp_path / "checkpoint.params").read_bytes() == before
    assert load_checkpoint(str(tmp_path))["epoch"] == 1


@pytest.mark.slow
def test_command_line_run_writes_every_output(tmp_path):
    out = tmp_path / "run"
    proc = run_script("--train-size", "2000", "--epochs", "1", "--out", str(out), "--seed", "2",
                      "--ctx", "cpu:1", "--num-hidden-units", "100", "--prior", "scale-mixture",
                      "--kl-weighting", "blundell")
    assert proc.returncode == 0, proc.stderr
    assert "epoch 1/1" in proc.stdout and "test accuracy" in proc.stdout
    with open(out / "config.json") as f:
        config = json.load(f)
    assert config["prior"] == "scale_mixture" and config["num_hidden_units"] == 100
    assert config["kl_weighting"] == "blundell" and config["ctx"] == "cpu:1"
    with open(out / "history.json") as f:
        history = json.load(f)
    assert set(history[0]) >= {"epoch", "loss", "test_accuracy", "epoch_seconds"}
    assert history[0]["test_accuracy"] >= 0.45  # 1 short epoch, 100 units: 0.56 measured
    for png in ("accuracy.png", "weights.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert load_checkpoint(str(out))["epoch"] == 1
    # resume with no flags: takes the run's own config, trains one more epoch
    proc = run_script("--out", str(out), "--resume", "--epochs", "2")
    assert proc.returncode == 0, proc.stderr
    assert "epoch 2/2" in proc.stdout and "epoch 1/2" not in proc.stdout
    assert load_checkpoint(str(out))["epoch"] == 2


@pytest.mark.parametrize("args,expected", [
    (["--ctx", "gpu"], "--ctx gpu asked for GPU 0"),
    (["--ctx", "tpu"], "--ctx 'tpu' not understood"),
    (["--epochs", "-1"], "--epochs must be an integer in [0, 1000000], got -1"),
    (["--sigma-p", "0"], "--sigma-p must be a finite number > 0 (from 1.18e-38 to 3.4e+38: "
                         "float32's normal numbers), got 0.0"),
    (["--prior", "scale-mixture", "--sigma-p2", "-1"], "--sigma-p2 must be a finite number > 0 (from 1.18e-38 to "
                           "3.4e+38: float32's normal numbers), got -1.0"),
    (["--prior", "scale-mixture", "--pi", "1.5"], "--pi must be in [0, 1], got 1.5"),
    (["--kl-scale", "0"], "--kl-scale must be a finite number > 0 (from 1.18e-38 to 3.4e+38: "
                          "float32's normal numbers), got 0.0"),
    (["--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
    (["--prior", "laplace"], "argument --prior: invalid choice: 'laplace'"),
    (["--epochs", "ten"], "argument --epochs: invalid int value: 'ten'"),
    (["--data-dir", "/nonexistent/mnist"], "MNIST not found in /nonexistent/mnist ("),
    (["--resume"], "--resume needs --out naming the run to continue"),
])
def test_command_line_errors(tmp_path, args, expected):
    if "--ctx" in args and args[1] == "gpu" and mx.context.num_gpus() > 0:
        pytest.skip("this machine has a GPU, so --ctx gpu is valid here")
    proc = run_script("--out", str(tmp_path / "out"), *args) if args != ["--resume"] \
        else run_script(*args)
    assert proc.returncode != 0
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "checkpoint.params").exists()


@pytest.mark.slow
def test_command_line_refuses_to_clobber_or_resume_nothing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_script("--out", str(empty), "--resume")
    assert proc.returncode == 2 and "%s holds no run" % empty in proc.stderr
    run = tmp_path / "run"
    assert run_script("--out", str(run), "--train-size", "500", "--epochs", "1",
                      "--num-hidden-units", "20").returncode == 0
    before = (run / "checkpoint.params").read_bytes()
    proc = run_script("--out", str(run), "--train-size", "500", "--epochs", "1")
    assert proc.returncode != 0 and "already holds a run" in proc.stderr
    # a refused run never says it trains or writes there
    assert proc.stdout == "", proc.stdout
    proc = run_script("--out", str(run), "--resume", "--num-hidden-units", "30")
    assert proc.returncode != 0 and "it was trained with --num-hidden-units 20, not 30" in proc.stderr
    assert proc.stdout == "", proc.stdout
    assert (run / "checkpoint.params").read_bytes() == before


@pytest.mark.slow
def test_non_finite_loss_on_the_command_line(tmp_path):
    proc = run_script("--out", str(tmp_path / "nan"), "--train-size", "1000", "--epochs", "1",
                      "--learning-rate", "100", "--seed", "1")
    assert proc.returncode != 0
    assert "loss became non-finite" in proc.stderr and "at epoch 1, batch" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_validation_split_holds_out_the_last_images(mnist, ctx):
    from gluon_bbb import evaluate_accuracy
    config = Config(train_size=1000, epochs=1, seed=0, validation=10000, num_hidden_units=50)
    result = train(config, mnist, ctx, log=lambda line: None)
    held_out = evaluate_accuracy(mnist.train_images[-10000:], mnist.train_labels[-10000:],
                                 result.mus)
    assert result.history[0]["validation_accuracy"] == pytest.approx(held_out)
    assert result.history[0]["validation_accuracy"] > 0.3  # 0.42 measured after 8 steps
    with pytest.raises(ValueError, match="validation must be less than the 60000"):
        train(Config(validation=60000), mnist, ctx)


def test_best_validation_epoch_is_the_earliest_of_equals():
    history = [{"epoch": 1, "validation_accuracy": 0.5}, {"epoch": 2, "validation_accuracy": 0.7},
               {"epoch": 3, "validation_accuracy": 0.7}, {"epoch": 4, "validation_accuracy": 0.6}]
    assert best_validation_epoch(history)["epoch"] == 2
    assert best_validation_epoch([{"epoch": 1, "test_accuracy": 0.9}]) is None


@pytest.mark.slow
def test_best_params_hold_the_best_validation_epoch(overshooting_run, mnist, ctx):
    run_dir, history = overshooting_run
    accuracies = [record["validation_accuracy"] for record in history]
    best_epoch = 1 + accuracies.index(max(accuracies))
    assert best_epoch < len(history), accuracies  # else this test shows nothing
    best = load_checkpoint(os.path.join(run_dir, "best.params"), ctx)
    assert best["epoch"] == best_epoch and best["optimizer_states"] == []
    assert all(m.context == ctx for m in best["mus"] + best["rhos"])
    validation = evaluate_accuracy(mnist.train_images[-10000:], mnist.train_labels[-10000:],
                                   best["mus"])
    assert validation == pytest.approx(accuracies[best_epoch - 1], abs=1e-6)
    test = evaluate_accuracy(mnist.test_images, mnist.test_labels, best["mus"])
    assert test == pytest.approx(history[best_epoch - 1]["test_accuracy"], abs=1e-6)
    assert test != pytest.approx(history[-1]["test_accuracy"], abs=1e-6)


@pytest.mark.slow
def test_best_params_survive_a_resume(overshooting_run, tmp_path, mnist, ctx):
    # stopped one epoch after the best and resumed: the same best.params as the whole run
    run_dir, history = overshooting_run
    config = Config.from_dict(OVERSHOOTING)
    best_epoch = best_validation_epoch(history)["epoch"]
    split = str(tmp_path / "split")
    quiet = lambda line: None
    train(Config(**dict(config.to_dict(), epochs=best_epoch + 1)), mnist, ctx, out_dir=split,
          log=quiet)
    train(config, mnist, ctx, out_dir=split, resume=True, log=quiet)
    whole, resumed = (nd.load(os.path.join(d, "best.params")) for d in (run_dir, split))
    assert sorted(whole) == sorted(resumed)
    for key in whole:
        np.testing.assert_array_equal(whole[key].asnumpy(), resumed[key].asnumpy())


@pytest.mark.slow
def test_paper_preset_with_overrides(tmp_path):
    out = tmp_path / "paper"
    proc = run_script("--preset", "paper-2x1200", "--num-hidden-units", "30", "--out", str(out),
                      "--train-size", "500", "--epochs", "1", "--test-samples", "0")
    assert proc.returncode == 0, proc.stderr
    with open(out / "config.json") as f:
        config = json.load(f)
    assert config["num_hidden_units"] == 30 and config["prior"] == "scale_mixture"
    assert config["prior_settings"] == dict(pi=0.25, sigma_p1=1.0,
                                            sigma_p2=pytest.approx(np.exp(-6)))
    assert config["validation"] == 10000 and "sigma_p" not in config and "ivon" not in config
    assert config["optimizer"] == "adam" and config["learning_rate"] == 3e-4
    assert config["rho_offset"] == -5.0 and config["lr_decay_every"] == 200
    assert config["epochs"] == 1  # the flag beats the preset's 291
    with open(out / "history.json") as f:
        assert "validation_accuracy" in json.load(f)[0]


@pytest.mark.slow
def test_lenet_from_the_command_line_through_prune_and_evaluate(tmp_path):
    out = tmp_path / "lenet"
    common = ["--train-size", "2000", "--validation", "1000", "--optimizer", "adam",
              "--learning-rate", "1e-3", "--rho-offset", "-5"]
    proc = run_script("--out", str(out), "--network", "lenet", "--epochs", "1", "--seed", "0",
                      "--test-samples", "0", *common)
    assert proc.returncode == 0, proc.stderr
    with open(out / "config.json") as f:
        assert json.load(f)["network"] == "lenet"
    # the resume ends with the uncertainty report, the LeNet's Monte Carlo predictive
    proc = run_script("--out", str(out), "--resume", "--epochs", "2", "--test-samples", "2")
    assert proc.returncode == 0, proc.stderr
    with open(out / "history.json") as f:
        history = json.load(f)
    # 2 epochs on 2,000 images: 0.93 measured
    assert [r["epoch"] for r in history] == [1, 2] and history[-1]["test_accuracy"] >= 0.85
    # prune.py and evaluate read the network from the run: no flag names it
    for checkpoint in (out, out / "best.params"):
        proc = run(PRUNE, "--checkpoint", checkpoint, "--proportions", "0", "0.5")
        assert proc.returncode == 0, proc.stderr
    with open(out / "pruning.json") as f:
        rows = json.load(f)["rows"]
    assert rows[0]["test_accuracy"] == pytest.approx(history[-1]["test_accuracy"], abs=1e-6)
    assert rows[0]["weights_remaining"] == 431080
    proc = run(EVALUATE, "--checkpoint", out, "--test-samples", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["in_distribution"]["mean_weights_accuracy"] == pytest.approx(
        history[-1]["test_accuracy"], abs=1e-6)


@pytest.mark.slow
def test_a_convolutional_network_learns_on_the_default_command(tmp_path):
    # no flag but the network and the data: the run says which defaults it takes, and learns
    proc = run_script("--out", tmp_path / "lenet", "--network", "lenet", "--epochs", "1",
                      "--train-size", "10000", "--seed", "1", "--test-samples", "0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "a network with convolutions takes --optimizer adam, --learning-rate 0.002, "
        "--rho-offset -5.0 (where no flag or preset sets them)")
    with open(tmp_path / "lenet" / "history.json") as f:
        assert json.load(f)[-1]["test_accuracy"] >= 0.95  # 0.9506 measured, seed 1
    # a flag given is kept; a resume continues the run's own settings
    proc = run_script("--out", tmp_path / "sgd", "--network", "conv:4:5,relu,pool:2,dense:10",
                      "--epochs", "1", "--train-size", "500", "--optimizer", "sgd",
                      "--test-samples", "0")
    assert proc.returncode == 0 and "--optimizer" not in proc.stdout.splitlines()[0]
    with open(tmp_path / "sgd" / "config.json") as f:
        config = json.load(f)
    assert (config["optimizer"], config["learning_rate"], config["rho_offset"]) == (
        "sgd", 0.002, -5.0)


@pytest.mark.parametrize("argv, expected", [
    (["--model", "ivon"], dict(model="ivon", parametrization="log_variance", prior="none",
                               learning_rate=0.5, lr_schedule="cosine", mu_scale=0.02)),
    (["--model", "ivon", "--learning-rate", "0.1", "--prior", "gaussian"],
     dict(learning_rate=0.1, prior="gaussian", parametrization="log_variance")),
    (["--preset", "paper-2x1200", "--model", "ivon"],  # the preset's settings count as given
     dict(prior="scale_mixture", learning_rate=3e-4, parametrization="log_variance")),
    (["--prior", "log-uniform"], dict(kl="analytic")),
    (["--remove-switched-off"], dict(prior="log_uniform", kl="analytic")),
    (["--network", "lenet", "--model", "ivon"], dict(learning_rate=0.5, rho_offset=-5.0)),
])
def test_a_choice_takes_the_settings_it_implies_where_none_is_given(argv, expected):
    from gluon_bbb.commands.train import build_parser, config_from_args
    config = config_from_args(build_parser().parse_args(argv))
    assert {field: getattr(config, field) for field in expected} == expected


@pytest.mark.parametrize("argv, field", [
    (["--model", "ivon", "--parametrization", "softplus"], "parametrization"),
    (["--model", "ivon", "--estimator", "lrt"], "estimator"),
    (["--prior", "log-uniform", "--kl", "mc"], "kl"),
    (["--remove-switched-off", "--prior", "gaussian"], "remove_switched_off"),
    (["--ivon-ess", "100"], "ivon_ess"),  # IVON's setting for a Bayes-by-Backprop run
    (["--model", "mcdropout", "--ivon-prior-at-draws"], "ivon_prior_at_draws"),
    (["--sigma-p", "0.5", "--prior", "scale-mixture"], "sigma_p"),  # not the mixture's
    (["--pi", "0.5"], "pi"),  # a setting of the scale mixture, not of the Gaussian
    (["--preset", "paper-2x1200-ivon", "--model", "bbb", "--prior", "gaussian", "--ivon-ess",
      "9"], "ivon_ess"),
])
def test_a_flag_contrary_to_what_a_choice_needs_is_refused(argv, field):
    from gluon_bbb.commands.train import build_parser, config_from_args
    with pytest.raises(ConfigError) as info:
        config_from_args(build_parser().parse_args(argv))
    assert info.value.field == field


def test_a_presets_settings_for_another_choice_are_dropped():
    from gluon_bbb.commands.train import build_parser, config_from_args
    def config(*argv):
        return config_from_args(build_parser().parse_args(list(argv)))
    assert config("--preset", "paper-2x1200", "--prior", "gaussian").prior_settings == {
        "sigma_p": 1.0}
    assert config("--preset", "paper-2x1200-ivon", "--model", "bbb", "--prior",
                  "gaussian").ivon is None
    mixture = config("--preset", "paper-2x1200", "--pi", "0.5").prior_settings
    assert mixture == {"pi": 0.5, "sigma_p1": 1.0, "sigma_p2": pytest.approx(math.exp(-6))}


def test_the_run_says_what_its_choices_took():
    from gluon_bbb.commands.train import _implied_words, build_parser, _config_and_defaults
    _, taken = _config_and_defaults(build_parser().parse_args(["--remove-switched-off"]), None)
    assert _implied_words(taken) == ("--remove-switched-off takes --prior log-uniform; --prior "
                                     "log-uniform takes --kl analytic (where no flag or preset "
                                     "sets them)")

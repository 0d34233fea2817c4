"""commands/train.py: what a training run writes and prints, its flags' one-line refusals, the
presets, and what a choice implies for the settings no flag gives (resume: test_rundir.py; what
training learns: test_loop.py)."""
import json
import math

import mxnet as mx
import numpy as np
import pytest

from commands import EVALUATE, PRUNE, TRAIN, assert_one_line_error, run
from conftest import SMALL
from gluon_bbb import ConfigError, load_checkpoint
from gluon_bbb.commands.train import build_parser, config_from_args


def read_json(path):
    with open(path) as f:
        return json.load(f)


def config_of(*argv):
    return config_from_args(build_parser().parse_args(list(argv)))


def test_a_run_writes_its_files_and_says_what_it_measured(tmp_path):
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, "--epochs", "1", "--ctx", "cpu:1", "--prior",
               "scale-mixture", "--kl-weighting", "blundell", "--validation", "1000", *SMALL)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "epoch 1/1" in proc.stdout and "test accuracy (mean weights)" in lines[2]
    assert "uncertainty (2 weight samples): test accuracy" in proc.stdout
    assert lines[-1].startswith("final test accuracy (mean weights) ")
    assert lines[-1].endswith("; wrote %s" % out)
    config = read_json(out / "config.json")
    assert config["prior"] == "scale_mixture" and config["num_hidden_units"] == 8
    assert config["kl_weighting"] == "blundell" and config["ctx"] == "cpu:1"
    history = read_json(out / "history.json")
    assert set(history[0]) >= {"epoch", "loss", "test_accuracy", "epoch_seconds",
                               "validation_accuracy"}
    for png in ("accuracy.png", "weights.png", "uncertainty.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert load_checkpoint(str(out))["epoch"] == 1


@pytest.mark.parametrize("args,expected", [
    (["--ctx", "gpu"], "--ctx gpu asked for GPU 0"),
    (["--ctx", "tpu"], "--ctx 'tpu' not understood"),
    (["--ctx", "cpu:99999999999999999999"], "--ctx cpu:99999999999999999999: a CPU context's "
                                            "number is at most 1023 (each cpu:N runs on the "
                                            "same cores)"),
    (["--epochs", "-1"], "--epochs must be an integer in [0, 1000000], got -1"),
    (["--sigma-p", "0"], "--sigma-p must be a finite number > 0 (from 1.18e-38 to 3.4e+38: "
                         "float32's normal numbers), got 0.0"),
    (["--prior", "scale-mixture", "--sigma-p2", "-1"], "--sigma-p2 must be a finite number > 0 "
                                                       "(from 1.18e-38 to 3.4e+38: float32's "
                                                       "normal numbers), got -1.0"),
    (["--prior", "scale-mixture", "--pi", "1.5"], "--pi must be in [0, 1], got 1.5"),
    (["--kl-scale", "0"], "--kl-scale must be a finite number > 0 (from 1.18e-38 to 3.4e+38: "
                          "float32's normal numbers), got 0.0"),
    (["--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
    (["--prior", "laplace"], "argument --prior: invalid choice: 'laplace'"),
    (["--epochs", "ten"], "argument --epochs: invalid int value: 'ten'"),
    (["--data-dir", "/nonexistent/mnist"], "MNIST not found in /nonexistent/mnist ("),
    (["--lr-decay-every", "1", "--lr-decay-factor", "1e-30", "--epochs", "3"],
     "under the step schedule epoch 3's would be 1e-63"),
    (["--lr-decay-factor", "1e-320"], "--lr-decay-factor must be in (0, 1] (float32 holds no "
                                      "magnitude below 1.18e-38), got 1e-320"),
    (["--rho-offset", "1e-320"], "--rho-offset must be a number float32 holds (0, or a "
                                 "magnitude from 1.18e-38 to 3.4e+38), got 1e-320"),
    (["--network", "pool:1,flatten,flatten,dense:10"], "pool:1 pools images (channels, height, "
                                                       "width), a conv layer's output; its input "
                                                       "here is flat, (784,): put a conv layer "
                                                       "before it"),
])
def test_command_line_errors(tmp_path, args, expected):
    if "--ctx" in args and args[1] == "gpu" and mx.context.num_gpus() > 0:
        pytest.skip("this machine has a GPU, so --ctx gpu is valid here")
    proc = run(TRAIN, "--out", tmp_path / "out", *args)
    assert_one_line_error(proc, expected)
    assert proc.stdout == "" and not (tmp_path / "out").exists()


def test_a_backend_that_cannot_serve_the_run_is_refused_before_its_directory_is_made(
        tmp_path, native_kernels):
    out = tmp_path / "run"
    proc = run(TRAIN, "--parametrization", "log-variance", "--backend", "native", "--out", out)
    assert_one_line_error(proc, "--backend must be ndarray here: the C kernels serve no "
                                "estimator sample with the reverse mc KL, prior gaussian and "
                                "parametrization log_variance (native.table.SERVED)")
    assert not out.exists()


@pytest.mark.parametrize("flag, value", [
    ("--mu-scale", "1e308"), ("--mu-scale", "nan"), ("--mu-scale", "-0"),
    ("--learning-rate", "1e-300"), ("--sigma-p", "inf"), ("--rho-offset", "-1e39"),
    ("--kl-scale", "-1e-3"), ("--dropout", "1e-300")])
def test_numbers_float32_cannot_hold_are_one_line_without_warnings(tmp_path, flag, value):
    extra = ["--model", "mcdropout"] if flag == "--dropout" else []
    proc = run(TRAIN, "--out", tmp_path / "run", flag, value, "--epochs", "1", *SMALL, *extra)
    assert_one_line_error(proc, "%s must be" % flag)
    assert "Warning" not in proc.stderr and not (tmp_path / "run").exists()


def test_the_paper_preset_with_overrides(tmp_path):
    out = tmp_path / "paper"
    proc = run(TRAIN, "--preset", "paper-2x1200", "--out", out, "--epochs", "1", *SMALL,
               "--validation", "1000")
    assert proc.returncode == 0, proc.stderr
    config = read_json(out / "config.json")
    assert config["num_hidden_units"] == 8 and config["prior"] == "scale_mixture"
    assert config["prior_settings"] == dict(pi=0.25, sigma_p1=1.0,
                                            sigma_p2=pytest.approx(np.exp(-6)))
    assert config["validation"] == 1000 and "sigma_p" not in config and "ivon" not in config
    assert config["optimizer"] == "adam" and config["learning_rate"] == 3e-4
    assert config["rho_offset"] == -5.0 and config["lr_decay_every"] == 200
    assert config["epochs"] == 1  # the flag beats the preset's 291
    assert "validation_accuracy" in read_json(out / "history.json")[0]


def test_a_network_with_convolutions_says_which_defaults_it_takes(tmp_path, runs):
    # no flag but the network: the run says which defaults it takes; a flag given is kept
    lenet = runs["lenet"]
    config = read_json(lenet / "config.json")
    assert (config["optimizer"], config["learning_rate"], config["rho_offset"]) == (
        "adam", 0.002, -5.0)
    proc = run(TRAIN, "--out", tmp_path / "sgd", "--network", "conv:4:5,relu,pool:2,dense:10",
               "--epochs", "1", "--optimizer", "sgd", *SMALL)
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == (
        "a network with convolutions takes --learning-rate 0.002, --rho-offset -5.0 (where no "
        "flag or preset sets them)")
    config = read_json(tmp_path / "sgd" / "config.json")
    assert (config["optimizer"], config["learning_rate"], config["rho_offset"]) == (
        "sgd", 0.002, -5.0)
    # prune and evaluate read the network from the run: no flag names it
    copy = runs.copy("lenet", tmp_path)
    for checkpoint in (copy, copy / "best.params"):
        proc = run(PRUNE, "--checkpoint", checkpoint, "--proportions", "0", "0.5")
        assert proc.returncode == 0, proc.stderr
    rows = read_json(copy / "pruning.json")["rows"]
    history = read_json(copy / "history.json")
    assert rows[0]["test_accuracy"] == pytest.approx(history[-1]["test_accuracy"], abs=1e-6)
    assert rows[0]["weights_remaining"] == 4 * 25 + 4 + 4 * 12 * 12 * 16 + 16 + 16 * 10 + 10
    proc = run(EVALUATE, "--checkpoint", copy, "--test-samples", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["in_distribution"]["mean_weights_accuracy"] == pytest.approx(
        history[-1]["test_accuracy"], abs=1e-6)


@pytest.mark.parametrize("argv, expected", [
    (["--model", "ivon"], dict(model="ivon", parametrization="log_variance", prior="none",
                               learning_rate=0.5, lr_schedule="cosine", mu_scale=0.02)),
    (["--model", "ivon", "--learning-rate", "0.1", "--prior", "gaussian"],
     dict(learning_rate=0.1, prior="gaussian", parametrization="log_variance")),
    (["--preset", "paper-2x1200", "--model", "ivon"],  # the preset's settings count as given
     dict(prior="scale_mixture", learning_rate=3e-4, parametrization="log_variance")),
    (["--prior", "log-uniform"], dict(kl="analytic")),
    (["--prior", "none"], dict(kl="analytic")),  # a prior without a density: its closed form
    (["--preset", "paper-2x1200-ivon", "--model", "bbb"], dict(prior="none", kl="analytic")),
    (["--remove-switched-off"], dict(prior="log_uniform", kl="analytic")),
    (["--network", "lenet", "--model", "ivon"], dict(learning_rate=0.5, optimizer="sgd",
                                                      rho_offset=-3.0)),
])
def test_a_choice_takes_the_settings_it_implies_where_none_is_given(argv, expected):
    config = config_of(*argv)
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
    # a flag the model leaves without effect
    (["--model", "deterministic", "--sigma-p", "2"], "sigma_p"),
    (["--model", "ivon", "--kl-direction", "forward"], "kl_direction"),
    (["--model", "mcdropout", "--num-samples", "3"], "num_samples"),
    # its weight decay is the prior's density, which these have not (its KL, no flag of its)
    (["--model", "mcdropout", "--prior", "none"], "prior"),
    (["--model", "mcdropout", "--prior", "log-uniform"], "prior"),
    (["--dropout", "0.2"], "dropout"),
    # a preset's setting the flags leave wanting
    (["--preset", "lenet-group-sparse-narrow"], "preset"),
])
def test_a_flag_contrary_to_what_a_choice_needs_is_refused(argv, field):
    with pytest.raises(ConfigError) as info:
        config_of(*argv)
    assert info.value.field == field


def test_a_presets_settings_for_another_choice_are_dropped():
    assert config_of("--preset", "paper-2x1200", "--prior", "gaussian").prior_settings == {
        "sigma_p": 1.0}
    assert config_of("--preset", "paper-2x1200-ivon", "--model", "bbb", "--prior",
                     "gaussian").ivon is None
    mixture = config_of("--preset", "paper-2x1200", "--pi", "0.5").prior_settings
    assert mixture == {"pi": 0.5, "sigma_p1": 1.0, "sigma_p2": pytest.approx(math.exp(-6))}


def test_the_run_says_what_its_choices_took():
    from gluon_bbb.commands.train import _implied_words, _config_and_defaults
    _, taken = _config_and_defaults(build_parser().parse_args(["--remove-switched-off"]), None)
    assert _implied_words(taken) == ("--remove-switched-off takes --prior log-uniform; --prior "
                                     "log-uniform takes --kl analytic (where no flag or preset "
                                     "sets them)")

"""What a hostile user tries beyond the outputs (``test_outputs.py``), class by class: an
environment MXNet, OpenMP or matplotlib would stop on, a sweep too large to plan, a schedule
that trains nothing, a figure that would be NaN or infinite, the tutorial's functions given
what they cannot take, and the words each refusal says. Each ends on one line with status 2,
or does the right thing."""
import json
import math
import os
import stat

import numpy as np
import pytest
from hypothesis import given, strategies as st

from commands import (COMPRESS, PREDICT, REGRESSION, SWEEP, TRAIN, assert_one_line_error, run)
from gluon_bbb import Config, ConfigError

SMALL = ["--train-size", "500", "--num-hidden-units", "10", "--test-samples", "2", "--seed", "0"]


# 1. The environment.

@pytest.mark.parametrize("name, value, words", [
    ("OMP_NUM_THREADS", "abc", "OMP_NUM_THREADS='abc' must be a whole number of threads"),
    ("OMP_NUM_THREADS", "100000", "from 1 to 1024"),
    ("OMP_NUM_THREADS", "0", "from 1 to 1024"),
    ("OMP_NUM_THREADS", "4,2", "from 1 to 1024"),
    ("MXNET_CPU_WORKER_NTHREADS", "abc", "MXNET_CPU_WORKER_NTHREADS='abc' must be an integer"),
    ("MXNET_EXEC_BULK_EXEC_TRAIN", "maybe", "must be 0, 1, true or false"),
    ("MXNET_ENGINE_TYPE", "bogus", "must be one of NaiveEngine, ThreadedEngine"),
    ("MPLBACKEND", "bogus", "MPLBACKEND='bogus' must be a matplotlib backend"),
])
def test_an_environment_mxnet_or_matplotlib_would_stop_on_is_one_line(tmp_path, name, value,
                                                                      words):
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, "--epochs", "1", *SMALL, env={name: value})
    assert_one_line_error(proc, words)
    assert not out.exists()


@pytest.mark.slow
def test_a_users_warnings_as_errors_and_another_backend_train_as_ever(tmp_path):
    proc = run(TRAIN, "--out", tmp_path / "run", "--epochs", "1", *SMALL,
               env={"PYTHONWARNINGS": "error", "MPLBACKEND": "svg", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "uncertainty.png").exists()


# 2. Sweeps too large to plan.

def test_a_sweep_past_its_limit_is_refused_before_planning(tmp_path):
    from gluon_bbb.learning.trials import MAX_TRIALS
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"base": {"epochs": 1}, "grid": {
        "seed": list(range(1000)), "num-hidden-units": list(range(1, 101))}}))
    proc = run(SWEEP, spec, "--out", tmp_path / "out", timeout=60)
    assert_one_line_error(proc, "the grid gives 100000 trials, more than the %d a sweep runs"
                          % MAX_TRIALS)
    assert not (tmp_path / "out").exists()


def test_a_sweep_plans_with_one_parser_and_says_how_many_trials_first(tmp_path, monkeypatch):
    from gluon_bbb.commands import train as train_mnist
    from gluon_bbb.learning import trials
    built = []
    real = train_mnist.build_parser

    def counted(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(train_mnist, "build_parser", counted)
    spec = {"base": {"epochs": 1}, "grid": {"seed": list(range(400)),
                                            "lr-decay-every": [0, 1, 2]}}
    found, configs = trials.plan(spec)
    assert len(found) == len(configs) == trials.trial_count(spec) == 1200
    assert len(built) == 1  # linear: one parser reads every trial's flags
    spec["grid"]["learning-rate"] = [0.001, 1e-3]
    with pytest.raises(trials.SpecError, match="the grid gives one trial twice"):
        trials.plan(spec)


# 3. A schedule that trains nothing, and settings beyond float32.

@given(rate=st.floats(1e-40, 1.0), factor=st.floats(1e-320, 1.0, exclude_min=True),
       every=st.integers(1, 5), epochs=st.integers(1, 60))
def test_a_step_schedule_is_taken_exactly_when_every_epochs_rate_is_a_normal_float32(
        rate, factor, every, epochs):
    tiny = float(np.finfo(np.float32).tiny)
    # the last epoch's rate, from logarithms (the product underflows)
    last_log = math.log(rate) + ((epochs - 1) // every) * math.log(factor)
    takes = rate >= tiny and last_log >= math.log(tiny) + 1e-9
    borderline = abs(last_log - math.log(tiny)) < 1e-6 or abs(rate - tiny) < 1e-45
    try:
        Config(learning_rate=rate, lr_decay_factor=factor, lr_decay_every=every, epochs=epochs)
    except ConfigError as exc:
        assert not takes or borderline, str(exc)
        assert exc.field in ("learning_rate", "lr_decay_factor")
    else:
        assert takes or borderline


def test_the_issues_schedule_is_refused_naming_the_epoch(tmp_path):
    proc = run(TRAIN, "--out", tmp_path / "run", "--lr-decay-every", "1", "--lr-decay-factor",
               "1e-300", "--epochs", "3", *SMALL)
    assert_one_line_error(proc, "under the step schedule epoch 3's would be 0")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag, value", [
    ("--mu-scale", "1e308"), ("--mu-scale", "nan"), ("--mu-scale", "-0"),
    ("--learning-rate", "1e-300"), ("--sigma-p", "inf"), ("--rho-offset", "-1e39"),
    ("--kl-scale", "-1e-3"), ("--dropout", "1e-300")])
def test_numbers_float32_cannot_hold_are_one_line_without_warnings(tmp_path, flag, value):
    extra = ["--model", "mcdropout"] if flag == "--dropout" else []
    proc = run(TRAIN, "--out", tmp_path / "run", flag, value, "--epochs", "1", *SMALL, *extra)
    assert_one_line_error(proc, "%s must be" % flag)
    assert "Warning" not in proc.stderr and not (tmp_path / "run").exists()


# 4. Figures that would be NaN or infinite.

def test_a_regression_noise_beyond_float32_is_refused(tmp_path):
    for noise in ("1e308", "1e-30", "nan", "-0"):
        proc = run(REGRESSION, "--data", "sine", "--out", tmp_path / "run", "--noise", noise)
        assert_one_line_error(proc, "--noise must be a standard deviation from")
    assert not (tmp_path / "run").exists()


# 5. The tutorial's functions.

def test_the_tutorials_functions_refuse_what_they_cannot_take(ctx):
    from gluon_bbb import (combined_loss, gaussian_prior, init_variational_params,
                           layer_param_shapes, log_softmax_likelihood, sample_epsilons,
                           transform_gaussian_samples, transform_rhos)
    from mxnet import nd
    shapes = layer_param_shapes(784, 20, 1, 10)
    mus, rhos = init_variational_params(shapes, ctx, seed=0)
    sigmas, eps = transform_rhos(rhos), sample_epsilons(shapes, ctx)
    output, labels = nd.zeros((2, 10), ctx=ctx), nd.one_hot(nd.array([1, 2], ctx=ctx), 10)
    prior = lambda w: gaussian_prior(w, 1.0)  # noqa: E731
    for call, words in (
            (lambda: transform_gaussian_samples(mus, sigmas[:1], eps),
             "mus, sigmas, epsilons must hold one array per parameter each, got 4 mus, "
             "1 sigmas, 4 epsilons"),
            (lambda: transform_gaussian_samples(mus, [-s for s in sigmas], eps),
             "sigmas must be finite standard deviations >= 0"),
            (lambda: transform_gaussian_samples(mus, [s * np.nan for s in sigmas], eps),
             "sigmas[0] holds NaN"),
            (lambda: combined_loss(output, labels, mus, mus, sigmas, prior,
                                   log_softmax_likelihood, num_batches=-1),
             "num_batches must be a finite number > 0, got -1"),
            (lambda: combined_loss(output, labels, mus, mus, sigmas, prior,
                                   log_softmax_likelihood, num_batches=float("nan")),
             "num_batches must be a finite number > 0, got nan"),
            (lambda: combined_loss(output, labels, mus[:2], mus, sigmas, prior,
                                   log_softmax_likelihood, num_batches=10),
             "params, mus, sigmas must hold one array per parameter each"),
            (lambda: combined_loss(output, labels, mus, mus, [s * 0 for s in sigmas], prior,
                                   log_softmax_likelihood, num_batches=10),
             "sigmas must be finite standard deviations > 0"),
            (lambda: layer_param_shapes(784, 0), "num_hidden must be an integer >= 1, got 0"),
            (lambda: init_variational_params(shapes, ctx, mu_scale=-1), "mu_scale must be")):
        with pytest.raises(ValueError) as info:
            call()
        assert words in str(info.value) and "\n" not in str(info.value), str(info.value)
    # what they take, they compute as before
    loss = combined_loss(output, labels, mus, mus, sigmas, prior, log_softmax_likelihood,
                         num_batches=10)
    assert np.isfinite(loss.asscalar())


# 6. The words.

def test_pooling_a_flat_input_names_the_missing_convolution(tmp_path):
    proc = run(TRAIN, "--out", tmp_path / "run", "--network", "pool:1,flatten,flatten,dense:10")
    assert_one_line_error(proc, "pool:1 pools images (channels, height, width), a conv layer's "
                                "output; its input here is flat, (784,): put a conv layer "
                                "before it")


@pytest.mark.slow
def test_resuming_a_regression_run_with_train_names_what_it_is(tmp_path):
    out = tmp_path / "regression"
    proc = run(REGRESSION, "--data", "sine", "--out", out, "--epochs", "20")
    assert proc.returncode == 0, proc.stderr
    proc = run(TRAIN, "--out", out, "--resume")
    assert_one_line_error(proc, "is a regression run (problem sine")
    assert "--likelihood" not in proc.stderr


def test_special_files_named_as_inputs_say_what_they_are(tmp_path):
    from test_model_file import synthetic_model
    model = synthetic_model(tmp_path / "model.gbbb")
    os.mkfifo(tmp_path / "digit.png")
    os.mknod(tmp_path / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    (tmp_path / "zero.png").symlink_to(tmp_path / "zero")
    assert_one_line_error(run(PREDICT, model, tmp_path / "digit.png", timeout=60),
                          "digit.png: a FIFO, not an image file")
    assert_one_line_error(run(PREDICT, model, tmp_path / "zero.png", timeout=60),
                          "zero.png: a link to a character device, not an image file")
    assert_one_line_error(run(PREDICT, tmp_path / "digit.png", tmp_path / "zero.png",
                              timeout=60), "digit.png: a FIFO, not a model")
    assert_one_line_error(run(COMPRESS, tmp_path / "digit.png", "--out", tmp_path / "m.gbbb",
                              timeout=60), "digit.png is a FIFO, not a run directory")
    data = tmp_path / "mnist"
    data.mkdir()
    os.mkfifo(data / "train-images-idx3-ubyte.gz")
    assert_one_line_error(run(TRAIN, "--data-dir", data, "--out", tmp_path / "run", timeout=60),
                          "train-images-idx3-ubyte.gz is a FIFO, not an IDX file")


def test_a_data_directory_that_is_a_file_is_named_as_one(tmp_path):
    (tmp_path / "mnist").write_text("not a directory")
    proc = run(TRAIN, "--data-dir", tmp_path / "mnist", "--out", tmp_path / "run")
    assert_one_line_error(proc, "--data-dir %s is a file, not a directory of MNIST files"
                          % (tmp_path / "mnist"))


@pytest.mark.slow
def test_a_path_the_terminals_encoding_cannot_show_is_printed_with_escapes(tmp_path):
    proc = run(TRAIN, "--out", tmp_path / "r\u00e9sultat", "--epochs", "1", *SMALL,
               env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 0, proc.stderr
    assert "r\\xe9sultat" in proc.stdout

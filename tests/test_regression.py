"""commands/regression.py and the regression's step: both backends with a heteroscedastic head
or a learned noise against autograd, and the command."""
import json
import math
import re

import numpy as np
import pytest
from mxnet import nd

from commands import REGRESSION, TRAIN, assert_one_line_error, run
from gluon_bbb import Config, combined_loss_gradients
from gluon_bbb.learning.step import FlatLayout, NetworkGraph
from gluon_bbb.learning.noise import PhiloxNoise, philox_normals_reference
from test_step import assert_matches
from tutorial_reference import tutorial_gradients


HETEROSCEDASTIC = dict(num_inputs=2, num_outputs=1, num_hidden_units=5, num_hidden_layers=2,
                       likelihood="gaussian:heteroscedastic", prior="scale_mixture",
                       sigma_p1=1.0, sigma_p2=0.1)


def regression_batch(ctx, config, dtype="float64"):
    layout = FlatLayout(config.layer_shapes())
    rng = np.random.default_rng(4)
    to = lambda a: nd.array(a, ctx=ctx, dtype=dtype)  # noqa: E731
    mu, rho = to(rng.normal(size=layout.size) * 0.4), to(rng.normal(size=layout.size) - 1.0)
    return layout, mu, rho, to(rng.normal(size=(9, 2))), to(rng.normal(size=(9, 1)) * 2)


def test_ndarray_backend_with_a_heteroscedastic_head_equals_autograd(ctx):
    config = Config.from_dict(HETEROSCEDASTIC)
    layout, mu, rho, X, y = regression_batch(ctx, config)
    eps = nd.array(np.random.default_rng(5).normal(size=layout.size), ctx=ctx, dtype="float64")
    network, likelihood = config.build_network(), config.build_likelihood()
    got = combined_loss_gradients(X, y, mu, rho, [eps], config.build_prior(), 0.5,
                                  NetworkGraph(network, likelihood))
    reference = tutorial_gradients(
        X, y, layout.views(mu.copy()), layout.views(rho.copy()), config.build_prior(), 0.5,
        [layout.views(eps)], network=network,
        log_likelihood=lambda out, target: likelihood.log_likelihood(out, target, nd))
    assert_matches(got, reference, layout, rtol=1e-9)


def test_native_backend_with_a_learned_noise_equals_autograd(ctx, native_kernels):
    config = Config.from_dict(dict(HETEROSCEDASTIC, likelihood="gaussian:learned"))
    layout, mu, rho, X, y = regression_batch(ctx, config, "float32")
    network, likelihood = config.build_network(), config.build_likelihood()
    noise = PhiloxNoise(ctx, seed=6)
    got = native_kernels.loss_gradients(
        X, y, mu, rho, noise, 1, config.build_prior(), 0.5, NetworkGraph(network, likelihood),
        native_kernels.Workspace(layout.size, ctx), config.kl_kind, config.estimator_kind)
    f64 = lambda a: a.astype("float64")  # noqa: E731
    eps = nd.array(philox_normals_reference(layout.size, noise.key, 0), ctx=ctx, dtype="float64")
    reference = tutorial_gradients(
        f64(X), f64(y), layout.views(f64(mu)), layout.views(f64(rho)), config.build_prior(), 0.5,
        [layout.views(eps)], network=network,
        log_likelihood=lambda out, target: likelihood.log_likelihood(out, target, nd))
    assert_matches(got, reference, layout, rtol=2e-4)


# The figures the toy problems reach on a seed other than 0 (docs/REGRESSION.md gives the
# median and range over seeds 0-4), checked against the bounds they are built to meet.


def test_regression_command_writes_its_run_and_refuses_bad_input(tmp_path):
    out = tmp_path / "quartic"
    proc = run(REGRESSION, "--data", "quartic", "--model", "mcdropout", "--epochs", "200",
               "--test-samples", "20", "--out", out)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["problem"] == "quartic" and metrics["model"] == "mcdropout"
    # what it does first, its progress, then the figures in words
    lines = proc.stdout.splitlines()
    assert lines[0] == "training mcdropout on quartic (6 points, 200 steps), writing to %s" % out
    assert re.match(r"step 200/200  loss -?\d+\.\d \(mean of the last 100\)  \d+\.\d s$",
                    lines[1]), lines
    assert lines[2] == "95%% band holds the true curve at the inputs: %s" % (
        "yes" if metrics["band_holds_truth"] else "no")
    assert lines[3].startswith("band width: %.2f at the inputs" % metrics["band_width_at_data"])
    record = json.loads((out / "config.json").read_text())
    assert record["problem"] == "quartic" and record["epochs"] == 200
    assert record["scaling"]["x_sd"] == pytest.approx(np.std([-2, -1.8, -1, 1, 1.8, 2]))
    assert record["likelihood"] == "gaussian:%r" % (0.1 / record["scaling"]["y_sd"])
    from gluon_bbb import RunDirectory
    assert RunDirectory(str(out)).read_config().model == "mcdropout"
    assert (out / "regression.png").stat().st_size > 0
    assert (out / "checkpoint.params").stat().st_size > 0
    for args, message in (
            ([], "%s already holds a run; choose another --out" % out),
            (["--noise", "-2"], "--noise must be a standard deviation from "),
            (["--noise", "-2"], "in the data's units (its variance a float32's), learned or "
                                "heteroscedastic, got -2.0"),
            (["--dropout", "1.5"], "--dropout must be in (0, 1) (from 1.18e-38 to 1 - 2^-24, as "
                                   "MXNet takes it), got 1.5"),
            (["--epochs", "-5"], "--epochs must be an integer from 1 to 1000000 (the training "
                                 "steps; 0 trains nothing), got -5"),
            (["--epochs", "0"], "--epochs must be an integer from 1 to 1000000 (the training "
                                "steps; 0 trains nothing), got 0"),
            (["--epochs", str(10 ** 17)], "--epochs must be an integer from 1 to 1000000"),
            (["--model", "ivon"], "argument --model: invalid choice: 'ivon' (choose from "
                                  "'bbb', 'mcdropout', 'deterministic', 'mlp')"),
            # the seed is checked before the data's noise is drawn with it
            (["--seed", "-1"], "--seed must be an integer >= 0, got -1")):
        target = out if not args else tmp_path / "other"
        proc = run(REGRESSION, "--data", "quartic", "--model", "mcdropout", "--out", target,
                   *args)
        assert_one_line_error(proc, message)
        assert proc.stdout == "", proc.stdout  # not "training ..., writing to" a refused run
        assert not (tmp_path / "other").exists()
    assert math.isfinite(metrics["width_ratio"])
    for noise in ("1e308", "1e-30", "nan", "-0"):
        assert_one_line_error(run(REGRESSION, "--data", "sine", "--out", tmp_path / "other",
                                  "--noise", noise), "--noise must be a standard deviation from")
    # a regression run is not an image classifier's to resume
    proc = run(TRAIN, "--out", out, "--resume")
    assert_one_line_error(proc, "is a regression run (problem quartic")
    assert "--likelihood" not in proc.stderr

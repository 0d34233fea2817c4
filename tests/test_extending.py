"""A prior, an estimator and a parametrization of the user's own (docs/EXTENDING.md, whose code
blocks run here), the checkpoint's parametrization, and config.json's record of a user's prior."""
import contextlib
import io
import json
import math
import os
import re

import mxnet as mx
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, RunDirectory, train
from gluon_bbb.errors import CheckpointError, ConfigError
from gluon_bbb.family.parametrizations import LogVariance, SOFTPLUS
from gluon_bbb.family.priors import GaussianPrior, Prior, ScaleMixturePrior
from gluon_bbb.learning.step import TrainingStep

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "EXTENDING.md")
QUIET = dict(log=lambda line: None, progress=False)


@pytest.fixture(scope="module")
def doc(mnist):
    """The namespace docs/EXTENDING.md's code blocks leave, run in order, and what they
    printed."""
    with open(DOC) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 4
    namespace, printed = {}, io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in blocks:
            exec(compile(block, DOC, "exec"), namespace)
    namespace["printed"] = printed.getvalue().splitlines()
    yield namespace
    # the names the page's classes took, given back: other modules' tests expect them unknown
    from gluon_bbb.family import estimators
    from gluon_bbb.family import parametrizations
    from gluon_bbb.family import priors
    for known, name in ((priors.KNOWN, "laplace"), (estimators.KNOWN, "my_sample"),
                        (parametrizations.KNOWN, "exp_sigma")):
        known.pop(name, None)


def test_the_docs_laplace_prior_trains_on_the_ndarray_backend_and_says_so(doc):
    assert "\n".join(doc["printed"][:2]) == (
        "backend: ndarray (MXNet operators, cpu(0))\n  native not used: the C kernels serve no "
        "estimator sample with the reverse mc KL, prior laplace(scale=0.05) and "
        "parametrization softplus (native.table.SERVED)")
    history = doc["result"].history
    assert history[0]["test_accuracy"] > 0.8  # 1 epoch of 6,000 images
    assert doc["config"].to_dict()["prior_settings"] == {"scale": 0.05}
    with pytest.raises(ConfigError, match="backend must be ndarray here: the C kernels serve no "
                                          "estimator sample with the reverse mc "
                                          "KL, prior laplace"):
        train(doc["config"], doc["mnist"], mx.cpu(), backend="native", **QUIET)


def test_a_priors_autograd_gradient_is_its_derivative(doc):
    laplace = doc["Laplace"](0.3)
    x = np.random.default_rng(0).normal(size=1000)
    value, gradient = laplace.log_density_and_gradient(nd.array(x, dtype="float64"))
    assert value.asscalar() == pytest.approx(np.sum(-np.abs(x) / 0.3 - math.log(0.6)),
                                             rel=1e-12)
    np.testing.assert_allclose(gradient.asnumpy(), -np.sign(x) / 0.3, rtol=1e-12)


class PlainGaussian(Prior):
    """N(0, sigma_p^2) written as a user would: the log density and a closed-form KL, nothing
    by hand."""
    name = "plain_gaussian"

    def __init__(self, sigma_p=1.0):
        self.sigma_p = sigma_p

    def log_density(self, x, F=None):
        return -x ** 2 / (2 * self.sigma_p ** 2) - 0.5 * math.log(2 * math.pi * self.sigma_p ** 2)

    def kl(self, mu, sigma, F=None):
        return (nd.log(self.sigma_p / sigma) + (sigma ** 2 + mu ** 2) / (2 * self.sigma_p ** 2)
                - 0.5)


@pytest.mark.parametrize("kl", ["mc", "analytic"])
def test_a_users_prior_trains_as_the_built_in_one_with_the_same_formula(ctx, mnist, kl):
    batches = [(nd.array(mnist.train_images[i:i + 64], ctx=ctx),
                nd.one_hot(nd.array(mnist.train_labels[i:i + 64], ctx=ctx), 10))
               for i in range(0, 320, 64)]
    mus = {}
    for prior in (GaussianPrior(0.5), PlainGaussian(0.5)):
        config = Config(prior=prior, kl=kl, num_hidden_units=40, seed=1)
        step = TrainingStep(config.build_plan(), ctx, backend="ndarray")
        for X, y in batches:
            step(X, y, 0.01)
        mus[prior.name] = (step.mu.asnumpy(), step.rho.asnumpy())
    for built_in, users in zip(mus["gaussian"], mus["plain_gaussian"]):
        np.testing.assert_allclose(users, built_in, rtol=1e-5, atol=1e-6)


def test_a_closed_form_kls_autograd_derivatives_are_the_written_ones():
    rng = np.random.default_rng(2)
    mu = nd.array(rng.normal(size=500), dtype="float64")
    sigma = nd.array(rng.uniform(0.01, 2.0, size=500), dtype="float64")
    for got, expected in zip(PlainGaussian(0.7).closed_form_kl(mu, sigma),
                             GaussianPrior(0.7).closed_form_kl(mu, sigma)):
        np.testing.assert_allclose(got.asnumpy(), expected.asnumpy(), rtol=1e-12)


def test_the_docs_estimator_trains_to_the_built_in_ones_numbers(doc, mnist):
    built_in = train(Config(estimator="sample", epochs=1, train_size=2000, seed=0), mnist,
                     mx.cpu(), backend="ndarray", **QUIET)
    assert doc["mine"].config.estimator == "my_sample"
    for got, expected in zip(doc["mine"].mus + doc["mine"].rhos, built_in.mus + built_in.rhos):
        np.testing.assert_array_equal(got.asnumpy(), expected.asnumpy())


def test_the_docs_parametrization_trains_and_the_blocks_take_the_prior(doc):
    run = doc["exp_run"]
    assert run.config.parametrization == "exp_sigma"
    assert run.history[0]["test_accuracy"] > 0.5
    np.testing.assert_allclose(run.sigmas[0].asnumpy(), np.exp(run.rhos[0].asnumpy()), rtol=1e-6)
    # kl_term of the blocks the docs made: log q - log P of the drawn weights, P the Laplace
    from gluon_bbb.networks.blocks import bayesian_layers
    expected = 0.0
    for layer in bayesian_layers(doc["net"]):
        mus, rhos, epsilons = (
            [a.asnumpy().astype(np.float64) for a in arrays]
            for arrays in layer.variational_arrays())
        for mu, rho, eps in zip(mus, rhos, epsilons):
            sigma = np.log1p(np.exp(rho))
            w = mu + sigma * eps
            expected += np.sum(-0.5 * np.log(2 * np.pi) - np.log(sigma) - eps ** 2 / 2)
            expected -= np.sum(-np.abs(w) / 0.05 - np.log(0.1))
    assert doc["kl_of_this_draw"].asscalar() == pytest.approx(expected, rel=1e-4)


def test_a_run_of_a_users_prior_reads_without_its_class_and_resumes_with_it(tmp_path, doc,
                                                                          monkeypatch):
    from gluon_bbb.family import priors
    mnist, laplace = doc["mnist"], doc["Laplace"]
    config = Config(prior=laplace(0.2), epochs=1, train_size=1000, seed=3)
    out = str(tmp_path / "run")
    train(config, mnist, mx.cpu(), out_dir=out, **QUIET)
    with open(os.path.join(out, "config.json")) as f:
        recorded = json.load(f)
    assert (recorded["prior"], recorded["prior_settings"]) == ("laplace", {"scale": 0.2})
    # resumed with the class defined: the same run as one trained for two epochs at once
    resumed = train(Config(prior=laplace(0.2), epochs=2, train_size=1000, seed=3), mnist,
                    mx.cpu(), out_dir=out, resume=True, **QUIET)
    whole = train(Config(prior=laplace(0.2), epochs=2, train_size=1000, seed=3), mnist,
                  mx.cpu(), **QUIET)
    for got, expected in zip(resumed.mus, whole.mus):
        np.testing.assert_array_equal(got.asnumpy(), expected.asnumpy())
    with pytest.raises(CheckpointError, match=r"it was trained with prior_settings "
                                              r"\{'scale': 0.2\}, not \{'scale': 0.3\}"):
        train(Config(prior=laplace(0.3), epochs=3, train_size=1000, seed=3), mnist, mx.cpu(),
              out_dir=out, resume=True, **QUIET)
    # named without settings, a user's prior takes its constructor's defaults
    assert Config(prior="laplace").build_prior() == laplace(0.1)
    # a process that lacks the class reads the run, and refuses to build its prior
    monkeypatch.delitem(priors.KNOWN, "laplace")
    run = RunDirectory(out)
    saved = run.read_config()
    assert run.load_parameters(saved)["epoch"] == 2
    with pytest.raises(ConfigError, match=r"prior must be a prior class defined in this Python "
                                          r"process \(the run was trained with a prior of its "
                                          r"own, laplace\(scale=0.2\)"):
        saved.build_prior()
    with pytest.raises(ConfigError, match="prior must be one of gaussian, scale_mixture"):
        Config(prior="laplace")


def test_prior_settings_are_checked():
    with pytest.raises(ConfigError, match="prior_settings must be the arguments of prior "
                                          "gaussian"):
        Config(prior="gaussian", prior_settings={"sigma": 1.0})
    with pytest.raises(ConfigError, match="prior_settings must be a dict"):
        Config(prior="gaussian", prior_settings=[1.0])
    with pytest.raises(ConfigError, match="prior must be a Prior subclass with a name"):
        Config(prior=Prior())
    with pytest.raises(ConfigError, match="prior_settings must be a dict of the prior's keyword "
                                          "arguments, numbers and strings"):
        Config(prior="laplace", prior_settings={"scale": nd.ones(1)})
    # a built-in prior object gives its name and settings
    given = Config(prior=GaussianPrior(0.3))
    assert (given.prior, given.prior_settings) == ("gaussian", {"sigma_p": 0.3})
    assert given.build_prior() == GaussianPrior(0.3)
    mixture = Config(prior=ScaleMixturePrior(0.5, 2.0, 0.2)).build_prior()
    assert mixture == ScaleMixturePrior(0.5, 2.0, 0.2)


def test_the_checkpoint_names_its_parametrization(tmp_path, mnist):
    out = str(tmp_path / "run")
    result = train(Config(parametrization="log-variance", rho_offset=-6.0, epochs=1,
                          train_size=1000, seed=0), mnist, mx.cpu(), out_dir=out, **QUIET)
    assert result.config.parametrization == "log_variance"
    np.testing.assert_allclose(result.sigmas[1].asnumpy(),
                               np.exp(result.rhos[1].asnumpy() / 2), rtol=1e-6)
    run = RunDirectory(out)
    path = run.file("checkpoint.params")
    arrays = nd.load(path)
    assert bytes(arrays["parametrization"].asnumpy().tolist()) == b"log_variance"
    state = run.load_parameters(run.read_config())
    assert state["parametrization"] == LogVariance()
    # a file from before the key (and the later checksum and trained_as): softplus rhos, which
    # this run's config.json does not say
    for key in ("parametrization", "checksum", "trained_as"):
        del arrays[key]
    nd.save(path, arrays)
    with pytest.raises(CheckpointError, match="holds rhos of parametrization softplus, its "
                                              "run's config.json says log_variance"):
        run.load_parameters(run.read_config())
    from gluon_bbb.learning.rundir import read_checkpoint
    assert read_checkpoint(path)["parametrization"] == SOFTPLUS
    arrays["parametrization"] = nd.array(list(b"cube_root"), dtype="uint8")
    nd.save(path, arrays)
    with pytest.raises(CheckpointError, match="parametrization 'cube_root', which this process "
                                              "does not define"):
        read_checkpoint(path)


def test_the_tutorials_combined_loss_takes_a_users_prior(doc):
    from gluon_bbb import combined_loss, log_softmax_likelihood
    rng = np.random.default_rng(4)
    shapes = [(3, 5), (3,)]
    mus = [nd.array(rng.normal(size=s), dtype="float64") for s in shapes]
    sigmas = [nd.array(rng.uniform(0.1, 1.0, size=s), dtype="float64") for s in shapes]
    params = [m + s * nd.array(rng.normal(size=m.shape), dtype="float64")
              for m, s in zip(mus, sigmas)]
    output = nd.array(rng.normal(size=(4, 3)), dtype="float64")
    labels = nd.one_hot(nd.array([0, 2, 1, 2]), 3).astype("float64")
    loss = combined_loss(output, labels, params, mus, sigmas, doc["Laplace"](0.2),
                         log_softmax_likelihood, num_batches=10)
    log_q = sum(np.sum(-0.5 * np.log(2 * np.pi) - np.log(s.asnumpy())
                       - (w.asnumpy() - m.asnumpy()) ** 2 / (2 * s.asnumpy() ** 2))
                for w, m, s in zip(params, mus, sigmas))
    log_p = sum(np.sum(-np.abs(w.asnumpy()) / 0.2 - np.log(0.4)) for w in params)
    logits = output.asnumpy()
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    nll = -np.sum(log_softmax * labels.asnumpy())
    assert loss.asscalar() == pytest.approx((log_q - log_p) / 10 + nll, rel=1e-12)


@pytest.mark.slow
def test_the_pages_examples_run_as_a_script_in_a_fresh_process(tmp_path):
    # in the order written: the page's first block imports MXNet before gluon_bbb, as a user's
    # script may
    from commands import PYTHON, run
    with open(DOC) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    script = tmp_path / "extending.py"
    script.write_text("\n".join(blocks))
    proc = run([PYTHON, str(script)], cwd=str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("backend: ndarray (MXNet operators, cpu(0))\n  native not used")

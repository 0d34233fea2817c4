"""family/likelihoods.py: the categorical and Gaussian likelihoods against NumPy formulas
written here, and their gradients against finite differences."""
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, ConfigError
from gluon_bbb.family.likelihoods import (Gaussian, gaussian_log_likelihood, log_softmax_likelihood,
                                          parse_likelihood)

from test_tutorial import nd64, np_log_softmax


def numpy_gaussian(y, mean, log_variance):
    log_variance = np.clip(log_variance, -20.0, 20.0)
    return np.sum(-0.5 * np.log(2 * np.pi) - 0.5 * log_variance
                  - 0.5 * (y - mean) ** 2 / np.exp(log_variance), axis=1)


def test_gaussian_log_likelihood_matches_numpy(ctx):
    rng = np.random.default_rng(0)
    y, mean = rng.normal(size=(5, 2)) * 3, rng.normal(size=(5, 2))
    log_variance = rng.normal(size=(5, 2)) * 2
    log_variance[0, 0], log_variance[1, 1] = -45.0, 60.0  # clipped: finite either way
    got = gaussian_log_likelihood(*(nd.array(a, ctx=ctx, dtype="float64")
                                    for a in (y, mean, log_variance)))
    assert got.context == ctx and got.shape == (5,)
    np.testing.assert_allclose(got.asnumpy(), numpy_gaussian(y, mean, log_variance), rtol=1e-12)


@pytest.mark.parametrize("spec,columns", [("gaussian:0.3", 1), ("gaussian:heteroscedastic", 2)])
def test_gaussian_likelihoods_read_the_network_output(ctx, spec, columns):
    likelihood = parse_likelihood(spec)
    assert likelihood.network_outputs(1) == columns
    rng = np.random.default_rng(1)
    output, y = rng.normal(size=(6, columns)), rng.normal(size=(6, 1))
    got = likelihood.log_likelihood(nd.array(output, ctx=ctx, dtype="float64"),
                                    nd.array(y, ctx=ctx, dtype="float64"), nd)
    log_variance = (np.full((6, 1), 2 * np.log(0.3)) if columns == 1 else output[:, 1:])
    np.testing.assert_allclose(got.asnumpy(), numpy_gaussian(y, output[:, :1], log_variance),
                               rtol=1e-12)


def test_a_learned_noise_is_one_weight_of_the_network(ctx):
    config = Config(num_inputs=3, num_outputs=1, num_hidden_units=4, num_hidden_layers=1,
                    likelihood="gaussian:learned")
    shapes = config.layer_shapes()
    assert [tuple(s) for s in shapes] == [(4, 3), (4,), (1, 4), (1,), (1,)]
    params = [nd.array(np.random.default_rng(i).normal(size=s), ctx=ctx, dtype="float64")
              for i, s in enumerate(shapes)]
    output = config.build_network()(nd.ones((5, 3), ctx=ctx, dtype="float64"), params)
    assert output.shape == (5, 2)
    np.testing.assert_array_equal(output.asnumpy()[:, 1], params[-1].asnumpy()[0])


def test_bad_likelihoods_are_refused():
    for bad in ("gaussian", "gaussian:-1", "gaussian:nan", "poisson", "categorical:2"):
        with pytest.raises(ConfigError, match="likelihood must be categorical, gaussian:NOISE"):
            parse_likelihood(bad)


def test_gaussian_gradient_matches_finite_differences(ctx):
    rng = np.random.default_rng(2)
    y, output = rng.normal(size=(4, 1)), rng.normal(size=(4, 2))
    likelihood = Gaussian("heteroscedastic")
    out = nd.array(output, ctx=ctx, dtype="float64")
    out.attach_grad()
    from mxnet import autograd
    with autograd.record():
        nll = -nd.sum(likelihood.log_likelihood(out, nd.array(y, ctx=ctx, dtype="float64"), nd))
    nll.backward()
    f = lambda o: -np.sum(numpy_gaussian(y, o[:, :1], o[:, 1:]))  # noqa: E731
    numeric = np.zeros_like(output)
    for index in np.ndindex(*output.shape):
        step = np.zeros_like(output)
        step[index] = 1e-6
        numeric[index] = (f(output + step) - f(output - step)) / 2e-6
    np.testing.assert_allclose(out.grad.asnumpy(), numeric, rtol=1e-6)


def test_log_softmax_likelihood(ctx):
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(5, 10)) * 3
    labels = rng.integers(0, 10, size=5)
    one_hot = np.eye(10)[labels]
    got = log_softmax_likelihood(nd64(logits, ctx), nd64(one_hot, ctx))
    assert got.shape == (5,)
    np.testing.assert_allclose(got.asnumpy(), np_log_softmax(logits)[np.arange(5), labels],
                               rtol=1e-12)

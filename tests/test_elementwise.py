"""family/elementwise.py: softplus against NumPy, stable in both tails, and its gradient the
sigmoid; a Gaussian's log density."""
import math

import numpy as np
import pytest
from mxnet import autograd, nd

from gluon_bbb import log_gaussian, softplus

from test_tutorial import nd64, np_log_normal, np_softplus


def test_softplus_matches_numpy_and_is_stable(ctx):
    x = np.linspace(-100, 100, 2001).astype(np.float32)
    got = softplus(nd.array(x, ctx=ctx)).asnumpy()
    # exp's argument is floored at -80 as in the C kernels: sigma never falls below
    # softplus(-80) = 1.8e-35, so log sigma stays finite
    expected = np_softplus(np.maximum(x.astype(np.float64), -80.0))
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(np.log(got)))
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert got[-1] == np.float32(100.0)
    assert got[0] == pytest.approx(math.exp(-80), rel=1e-5)
    # the tails MXNet's float32 softrelu gets wrong
    tail = softplus(nd.array([-20.0, -30.0], ctx=ctx)).asnumpy()
    np.testing.assert_allclose(tail, [2.0611537e-09, 9.3576230e-14], rtol=1e-6)


def test_softplus_gradient_is_sigmoid_including_zero(ctx):
    x = nd.array([-100.0, -5.0, 0.0, 3.0, 100.0], ctx=ctx)
    x.attach_grad()
    with autograd.record():
        y = softplus(x)
    y.backward()
    xs = x.asnumpy().astype(np.float64)
    np.testing.assert_allclose(x.grad.asnumpy(), 1 / (1 + np.exp(-xs)), rtol=1e-6, atol=1e-30)


def test_log_gaussian(ctx):
    x = np.array([-2.0, 0.0, 0.5, 3.0])
    mu = np.array([0.0, 0.1, -0.5, 3.0])
    sigma = np.array([1.0, 0.3, 2.0, 0.01])
    got = log_gaussian(nd64(x, ctx), nd64(mu, ctx), nd64(sigma, ctx))
    np.testing.assert_allclose(got.asnumpy(), np_log_normal(x, mu, sigma), rtol=1e-12)


@pytest.mark.parametrize("value", [0.0, -1.0, 1e-39, float("inf"), float("nan"), 3.5e38, True,
                                   "1.0", None])
def test_a_positive_setting_is_a_float32_normal_number(value):
    from gluon_bbb.errors import ConfigError
    from gluon_bbb.errors import FLOAT32_MAX, FLOAT32_TINY, require_positive
    with pytest.raises(ConfigError) as caught:
        require_positive("sigma_p", value)
    assert caught.value.field == "sigma_p" and caught.value.value is value
    assert np.float32(FLOAT32_TINY) == np.finfo(np.float32).tiny
    assert np.float32(FLOAT32_MAX) == np.finfo(np.float32).max
    for good in (FLOAT32_TINY, 1, 0.5, FLOAT32_MAX):
        assert require_positive("sigma_p", good) == good

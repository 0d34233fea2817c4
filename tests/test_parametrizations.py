"""family/parametrizations.py: sigma of rho against NumPy, the closed-form d sigma / d rho against
autograd of sigma and against finite differences, rho_for as sigma's inverse, the floors."""
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb.family.parametrizations import (LogVariance, Parametrization, Softplus,
                                               parametrization)

RHOS = np.array([-200.0, -170.0, -90.0, -30.0, -5.0, -0.5, 0.0, 0.7, 4.0, 25.0])


def nd64(x, ctx):
    return nd.array(x, ctx=ctx, dtype="float64")


@pytest.mark.parametrize("kind, expected", [
    (Softplus(), lambda rho: np.log1p(np.exp(np.maximum(rho, -80.0)))),
    (LogVariance(), lambda rho: np.exp(np.maximum(rho, -160.0) / 2))])
def test_sigma_is_the_formula_with_its_floor(ctx, kind, expected):
    got = kind.sigma(nd64(RHOS, ctx))
    assert got.context == ctx
    np.testing.assert_allclose(got.asnumpy(), expected(RHOS), rtol=1e-12)


@pytest.mark.parametrize("kind", [Softplus(), LogVariance()])
def test_the_closed_form_gradient_is_autograds_and_the_derivative(ctx, kind):
    rho = nd64(RHOS, ctx)
    sigma = kind.sigma(rho)
    closed = kind.sigma_gradient(rho, sigma).asnumpy()
    # the base class's autograd of the same sigma
    autograd = Parametrization.sigma_gradient(kind, rho, sigma).asnumpy()
    above = RHOS > -80.0
    np.testing.assert_allclose(closed[above], autograd[above], rtol=1e-12)
    # central differences away from the floor, where sigma is smooth
    smooth = RHOS > -60.0
    step = 1e-6
    numeric = (kind.sigma(nd64(RHOS + step, ctx)) - kind.sigma(nd64(RHOS - step, ctx))).asnumpy()
    np.testing.assert_allclose(closed[smooth], numeric[smooth] / (2 * step), rtol=1e-6)
    # below the floor: the log variance's derivative is 0, softplus's that of its floor
    # (sigmoid(-80) = 1.8e-35, as the C kernels give it)
    if isinstance(kind, LogVariance):
        assert (closed[RHOS < -160.0] == 0).all() and (autograd[RHOS < -160.0] == 0).all()
    else:
        np.testing.assert_allclose(closed[~above], 1.0 / (1.0 + np.exp(80.0)), rtol=1e-12)


@pytest.mark.parametrize("kind", [Softplus(), LogVariance()])
def test_rho_for_is_sigmas_inverse(ctx, kind):
    for sigma in (1e-4, 0.0067, 0.1, 1.0, 3.5):
        rho = kind.rho_for(sigma)
        assert kind.sigma(nd64([rho], ctx)).asscalar() == pytest.approx(sigma, rel=1e-12)


def test_a_parametrization_is_named_as_config_json_spells_it():
    assert parametrization("log-variance") == parametrization("log_variance") == LogVariance()
    assert parametrization(Softplus()) == Softplus() != LogVariance()
    assert hash(Softplus()) == hash(Softplus())

"""IVON (``learning/ivon.py``): its update against NumPy written here from the method's
equations, over random states, gradients and settings (Hypothesis); a run of ``--model ivon``
that learns and stores its posterior for every reader; the prior's density in the update; and
the optimizer in a user's own ``gluon.Trainer``."""
import math

import mxnet as mx
import numpy as np
import pytest
from hypothesis import example, given, strategies as st
from mxnet import autograd, gluon, nd

from gluon_bbb import Config, ConfigError, GaussianPrior, train
from gluon_bbb.family.priors import ScaleMixturePrior
from gluon_bbb.learning.ivon import IVON, predict_probabilities, sampled_params
from gluon_bbb.learning.noise import PhiloxNoise
from gluon_bbb.learning.rundir import RunDirectory

QUIET = dict(log=lambda line: None, progress=False)


def numpy_ivon(mu, m, h, grads, noises, t, lr, ess, hess_init, beta1, beta2, wd, clip,
               prior=lambda mu: (0.0, 0.0)):
    """One IVON step in float64, from the equations of Shen et al. (2024) as the reference
    implementation states them: the draws' mean gradient and mean noise times gradient. The
    prior's gradient and precision at mu, per example (``prior``), enter beside weight decay's
    wd mu and wd."""
    g, ng = np.mean(grads, axis=0), np.mean([n * d for n, d in zip(noises, grads)], axis=0)
    prior_gradient, prior_precision = prior(mu)
    m = beta1 * m + (1 - beta1) * g
    damped = np.maximum(h + wd + prior_precision, 1e-3 * wd)
    f = ess * damped * ng
    h = beta2 * h + (1 - beta2) * f + 0.5 * (1 - beta2) ** 2 * (h - f) ** 2 / damped
    step = ((m / (1 - beta1 ** t) + wd * mu + prior_gradient)
            / np.maximum(h + wd + prior_precision, 1e-3 * wd))
    mu = mu - lr * (hess_init + wd) * np.clip(step, -clip, clip)
    return mu, m, h


def numpy_mixture_terms(pi, sigma1, sigma2, scale, ess):
    """The scale mixture's -(s / ess) d log P / dmu and its precision: each component's
    precision weighed by its share of the density at mu."""
    def terms(mu):
        # the components' log densities, and their shares of the density from those (both
        # densities underflow far from 0)
        logs = [np.log(weight / sigma) - 0.5 * (mu / sigma) ** 2
                for weight, sigma in ((pi, sigma1), (1 - pi, sigma2))]
        shares = [np.exp(log - np.logaddexp(*logs)) for log in logs]
        precision = scale / ess * (shares[0] / sigma1 ** 2 + shares[1] / sigma2 ** 2)
        return precision * mu, precision
    return terms


@given(st.integers(1, 40), st.integers(1, 3), st.integers(1, 4), st.floats(0.01, 1.0),
       st.floats(10.0, 1e5), st.floats(0.01, 2.0), st.floats(0.5, 0.99),
       st.floats(0.9, 0.99999), st.floats(1e-6, 1e-2), st.sampled_from([math.inf, 0.01, 1.0]),
       st.integers(0, 2 ** 32 - 1))
def test_the_update_is_ivons_equations(ctx, size, draws, steps, lr, ess, hess_init, beta1,
                                       beta2, wd, clip, seed):
    rng = np.random.default_rng(seed)
    optimizer = IVON(learning_rate=lr, ess=ess, hess_init=hess_init, beta1=beta1, beta2=beta2,
                     weight_decay=wd, clip_radius=clip)
    mu = rng.normal(size=size)
    weight = nd.array(mu, ctx=ctx, dtype="float64")
    state = optimizer.create_state(0, weight)
    m, h = np.zeros(size), np.full(size, hess_init)
    for t in range(1, steps + 1):
        sigma = 1 / np.sqrt(ess * (h + wd))
        np.testing.assert_allclose(optimizer.sigma(state, weight).asnumpy(), sigma, rtol=1e-6)
        noises = [sigma * rng.normal(size=size) for _ in range(draws)]
        grads = [rng.normal(size=size) for _ in range(draws)]
        for noise, grad in zip(noises, grads):
            optimizer.accumulate(state, nd.array(grad, ctx=ctx, dtype="float64"),
                                 nd.array(noise, ctx=ctx, dtype="float64"))
        optimizer.update(0, weight, None, state)
        mu, m, h = numpy_ivon(mu, m, h, grads, noises, t, lr, ess, hess_init, beta1, beta2,
                              wd, clip)
        # MXNet's operators take their scalar arguments (beta1, lr, ...) as float32
        np.testing.assert_allclose(weight.asnumpy(), mu, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(state[1].asnumpy(), h, rtol=1e-6)
        # h + wd, the posterior's precision over ess, stays positive (at least half of its
        # value before the step, whatever the estimate f)
        assert (state[1].asnumpy() + wd > 0).all()


@given(st.integers(1, 30), st.integers(1, 4), st.floats(0.1, 0.9), st.floats(0.3, 2.0),
       st.floats(1e-3, 0.1), st.floats(0.1, 2.0), st.floats(100.0, 1e5),
       st.sampled_from([0.9, 0.999, 0.99999]), st.integers(0, 2 ** 32 - 1))
def test_the_update_with_the_scale_mixture_prior(ctx, size, steps, pi, sigma1, sigma2, scale,
                                                 ess, beta2, seed):
    """Over several steps (the prior's terms kept by the state between them, recomputed when
    its weight changes), the update and sigma are the equations' with the mixture's terms."""
    from gluon_bbb.family.priors import ScaleMixturePrior
    rng = np.random.default_rng(seed)
    optimizer = IVON(learning_rate=0.3, ess=ess, beta2=beta2, weight_decay=1e-4,
                     prior=ScaleMixturePrior(pi, sigma1, sigma2), prior_scale=scale)
    mu = rng.normal(scale=3 * sigma2, size=size)  # both components matter at these means
    weight = nd.array(mu, ctx=ctx, dtype="float64")
    state = optimizer.create_state(0, weight)
    m, h = np.zeros(size), np.full(size, 0.1)
    for t in range(1, steps + 1):
        if t == 2:
            scale = scale / 2  # a new weight (the KL's warm-up, say) reaches the next step
            optimizer.prior_scale = scale
        terms = numpy_mixture_terms(pi, sigma1, sigma2, scale, ess)
        sigma = 1 / np.sqrt(ess * np.maximum(h + 1e-4 + terms(mu)[1], 1e-7))
        np.testing.assert_allclose(optimizer.sigma(state, weight).asnumpy(), sigma, rtol=1e-5)
        noises = [sigma * rng.normal(size=size)]
        grads = [rng.normal(size=size)]
        optimizer.accumulate(state, nd.array(grads[0], ctx=ctx, dtype="float64"),
                             nd.array(noises[0], ctx=ctx, dtype="float64"))
        optimizer.update(0, weight, None, state)
        mu, m, h = numpy_ivon(mu, m, h, grads, noises, t, 0.3, ess, 0.1, 0.9, beta2, 1e-4,
                              math.inf, prior=terms)
        np.testing.assert_allclose(weight.asnumpy(), mu, rtol=1e-5, atol=1e-9)
        np.testing.assert_allclose(state[1].asnumpy(), h, rtol=1e-5, atol=1e-12)


@given(st.floats(0.05, 2.0), st.floats(10.0, 1e5), st.floats(1e-3, 2.0),
       st.integers(0, 2 ** 32 - 1))
def test_a_gaussian_prior_is_weight_decay(ctx, sigma_p, ess, scale, seed):
    """N(0, sigma_p^2) weighed by s enters as weight decay s / (ess sigma_p^2) does: the same
    update and the same posterior."""
    rng = np.random.default_rng(seed)
    mu = nd.array(rng.normal(size=20), ctx=ctx, dtype="float64")
    decay = scale / (ess * sigma_p ** 2)
    with_prior = IVON(ess=ess, weight_decay=1e-6, prior=GaussianPrior(sigma_p),
                      prior_scale=scale)
    as_decay = IVON(ess=ess, weight_decay=1e-6 + decay)
    gradient, precision = with_prior.prior_terms(mu)
    np.testing.assert_allclose(gradient.asnumpy(), decay * mu.asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(precision.asnumpy(), np.full(20, decay), rtol=1e-6)
    weights = [mu.copy(), mu.copy()]
    states = [opt.create_state(0, w) for opt, w in zip((with_prior, as_decay), weights)]
    for opt, w, state in zip((with_prior, as_decay), weights, states):
        noise = opt.draw(w, state, nd.array(rng.normal(size=20), ctx=ctx, dtype="float64"))
        opt.accumulate(state, nd.array(np.sin(np.arange(20.0)), ctx=ctx, dtype="float64"), noise)
    # the same normals for both: their sigmas agree, so their draws do
    np.testing.assert_allclose(with_prior.sigma(states[0], weights[0]).asnumpy(),
                               as_decay.sigma(states[1], weights[1]).asnumpy(), rtol=1e-6)


def test_the_scale_mixture_gives_unheld_weights_its_width(ctx):
    """A weight near 0 under the paper's mixture gets about its narrow component's width, one
    far from 0 its wide one's, where the data adds no curvature."""
    from gluon_bbb.family.priors import ScaleMixturePrior
    optimizer = IVON(ess=50000.0, hess_init=1e-12, weight_decay=1e-12,
                     prior=ScaleMixturePrior(0.25, 1.0, math.exp(-6)))
    mu = nd.array([0.0, 1e-4, 3.0], ctx=ctx, dtype="float64")
    state = optimizer.create_state(0, mu)
    # 1 / sqrt(sum_k r_k / sigma_k^2), r_k the components' shares of the density at mu
    sigma = optimizer.sigma(state, mu).asnumpy()
    np.testing.assert_allclose(sigma[:2], math.exp(-6), rtol=1e-3)
    np.testing.assert_allclose(sigma[2], 1.0, rtol=1e-3)
    assert IVON(ess=1000.0).prior_terms(mu) == (0.0, 0.0)
    # a weight of 0 (the warm-up's first epoch), or one below float32's, is no prior
    for scale in (0.0, 1e-300):
        optimizer.prior_scale = scale
        assert optimizer.prior_terms(mu) == (0.0, 0.0)


@given(st.floats(0.05, 0.95), st.floats(0.2, 3.0), st.floats(1e-4, 0.2), st.floats(0.1, 3.0),
       st.integers(0, 2 ** 32 - 1))
def test_each_priors_precision_is_its_slope_over_x(ctx, pi, sigma1, sigma2, sigma_p, seed):
    """``gradient_precision``, written out for the built-ins, against -(d log P / dx) / x from
    autograd of the density, and against the NumPy mixture; a subclass that changes the density
    gets the generic one."""
    from gluon_bbb.family.priors import Prior, ScaleMixturePrior
    x = nd.array(np.random.default_rng(seed).normal(scale=2 * sigma2, size=50), ctx=ctx,
                 dtype="float64")
    for prior in (GaussianPrior(sigma_p), ScaleMixturePrior(pi, sigma1, sigma2)):
        np.testing.assert_allclose(prior.gradient_precision(x).asnumpy(),
                                   Prior.gradient_precision(prior, x).asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(ScaleMixturePrior(pi, sigma1, sigma2).gradient_precision(x)
                               .asnumpy(), numpy_mixture_terms(pi, sigma1, sigma2, 1.0, 1.0)(
                                   x.asnumpy())[1], rtol=1e-6)

    class Laplace(GaussianPrior):
        name = None

        def log_density(self, x, F=None):
            return -nd.abs(x) / self.sigma_p

    np.testing.assert_allclose(Laplace(sigma_p).gradient_precision(x).asnumpy(),
                               1 / (sigma_p * np.abs(x.asnumpy())), rtol=1e-6)


# the priors the kernels' tests draw from: none (weight decay alone), a Gaussian, the paper's
# scale mixture (its precision spans five orders of magnitude over the means drawn)
KERNEL_PRIORS = [None, GaussianPrior(0.3), ScaleMixturePrior(0.25, 1.0, math.exp(-6))]


def random_ivon_state(optimizer, rng, size, ctx, steps_before):
    """Float32 means, momentum and Hessian estimate as a run has them after ``steps_before``
    steps (the Hessian a little below 0 in places: its estimate can go there)."""
    mu = nd.array(rng.normal(scale=0.05, size=size), ctx=ctx)
    state = optimizer.create_state(0, mu)
    momentum = rng.normal(scale=1e-3, size=size)
    momentum[::7] *= 1e-35  # about float32's smallest normal number: flushed to 0 or not
    state[0][:] = nd.array(momentum, ctx=ctx)
    state[1][:] = nd.array(rng.uniform(-optimizer.ivon_weight_decay / 2, 1.0, size=size),
                           ctx=ctx)
    for _ in range(steps_before):
        optimizer._update_count(0)
    optimizer.refresh(state, mu)
    return mu, state


@given(st.integers(1, 20000), st.sampled_from(range(len(KERNEL_PRIORS))), st.floats(0.01, 1.0),
       st.floats(10.0, 1e5), st.floats(0.01, 2.0), st.floats(0.5, 0.99),
       st.floats(0.9, 0.99999), st.floats(1e-6, 1e-2), st.sampled_from([math.inf, 0.01, 1.0]),
       st.floats(1e-3, 1.0), st.floats(0.0, 2.0), st.integers(0, 3),
       st.integers(0, 2 ** 32 - 1))
@example(5695, 2, 1.0, 64510.0, 0.47366345360800355, 0.9097233986886533, 0.9590870671225761,
         0.007894809583779088, math.inf, 0.739515348689864, 1.3567243781241698, 0, 12958)
# beta2 0.99999, where the kernel's 1.0f - beta2 was 0.14% off the operators' (the Hessian 0.3%)
@example(8394, 2, 1.0, 10.0, 1.0, 0.5, 0.99999, 0.0078125, math.inf, 1.0, 2.0, 0, 0)
def test_the_c_kernels_are_ivons_operators(native_kernels, ctx, size, prior, lr, ess, hess_init,
                                           beta1, beta2, wd, clip, rescale, prior_scale,
                                           steps_before, seed):
    """A training step's draw (the normals of a Philox stream made in the kernel's pass) and
    one-draw update on the C kernels (``draw_weights``, ``step_one_draw``) against IVON's
    operators, one step from the same random state and stream: every array up to float32
    rounding, and rho = log sigma^2 of the state the kernels left."""
    results = []
    for on_kernels in (True, False):
        rng = np.random.default_rng(seed)
        optimizer = IVON(learning_rate=lr, ess=ess, hess_init=hess_init, beta1=beta1,
                         beta2=beta2, weight_decay=wd, clip_radius=clip,
                         prior=KERNEL_PRIORS[prior], prior_scale=prior_scale,
                         native=on_kernels)
        optimizer.rescale_grad = rescale
        mu, state = random_ivon_state(optimizer, rng, size, ctx, steps_before)
        drawn, noise = optimizer.draw_weights(mu, state, PhiloxNoise(ctx, seed))
        grad = nd.array(rng.normal(size=size), ctx=ctx)
        rho = nd.zeros(size, ctx=ctx)
        optimizer.step_one_draw(0, mu, state, grad, noise, rho)
        results.append([a.asnumpy() for a in (drawn, noise, mu, state[0], state[1])])
        if on_kernels:
            # the kernel's vectorized logf is within a few ulps of MXNet's (7.6e-6, 8 ulps, at
            # a log-variance of -12, measured), and log(ess (h + wd + p)) takes the roundings
            # of h, wd and the prior's precision p over their sum: where h < 0 nearly cancels
            # them (h -0.085, the sum 1e-4: 2.7e-5 apart, measured) the bound grows with that
            expected = optimizer.log_variance(state, mu).asnumpy()
            h = state[1].asnumpy().astype(np.float64)
            total = np.exp(-expected.astype(np.float64)) / ess
            condition = (np.abs(h) + wd + np.abs(total - h - wd)) / total
            bound = 2e-5 + 1e-6 * np.abs(expected) + 4 * 2.0 ** -24 * condition
            assert np.all(np.abs(rho.asnumpy() - expected) <= bound), np.max(
                np.abs(rho.asnumpy() - expected) / bound)
            assert state[4][0] == 0 and optimizer._index_update_count[0] == steps_before + 1
    # the step divides by h + wd, which the random Hessian takes down to wd / 2: a rounding of
    # h grows by up to |h| / (h + wd) in the means (1.1e-4 relative, measured), and more where
    # the update takes h + wd nearer 0 still: the means' tolerance grows with that ratio
    hessian = results[1][4].astype(np.float64)
    growth = np.abs(hessian) / np.maximum(np.abs(hessian + wd), wd / 1000)
    for name, kernels, operators in zip(("w", "noise", "mu", "momentum", "hessian"), *results):
        scale = np.max(np.abs(operators))
        rtol = 1e-3 * (1 + 1e-3 * growth) if name == "mu" else 1e-3
        assert np.all(np.abs(kernels - operators) <= rtol * np.abs(operators) + 1e-5 * scale), (
            name, np.max(np.abs(kernels - operators) / (np.abs(operators) + 1e-30)))


def test_a_subclass_that_changes_a_formula_loses_the_kernels(native_kernels, ctx):
    """An IVON whose ``precision`` is its own draws and updates with it, on the kernels' context
    and without them alike (a subclass of IVON never takes its kernels)."""
    class FloorAtHessInit(IVON):
        def precision(self, state, mean):
            return nd.maximum(state[1] + self.ivon_weight_decay, self.hess_init)

    found = {}
    for cls, on_kernels in ((FloorAtHessInit, True), (FloorAtHessInit, False), (IVON, True)):
        rng = np.random.default_rng(7)
        optimizer = cls(ess=1000.0, hess_init=0.5, native=on_kernels)
        optimizer.rescale_grad = 1.0
        mu, state = random_ivon_state(optimizer, rng, 5000, ctx, 0)
        drawn, noise = optimizer.draw_weights(mu, state, PhiloxNoise(ctx, 7))
        rho = nd.zeros(5000, ctx=ctx)
        optimizer.step_one_draw(0, mu, state, nd.array(rng.normal(size=5000), ctx=ctx), noise,
                                rho)
        found[cls, on_kernels] = [a.asnumpy() for a in (drawn, mu, state[1], rho)]
    for own, plain in zip(found[FloorAtHessInit, True], found[FloorAtHessInit, False]):
        np.testing.assert_array_equal(own, plain)
    # its formula differs from IVON's where the Hessian is below hess_init
    assert not np.allclose(found[FloorAtHessInit, True][0], found[IVON, True][0])
    assert not FloorAtHessInit()._kernels_take() and IVON()._kernels_take()


@pytest.mark.parametrize("at_draws,network", [(False, "mlp"), (True, "mlp"),
                                              (False, "conv:4:3,relu,pool:2,dense:10")])
def test_a_run_steps_the_same_on_both_backends(native_kernels, native_operators, ctx, at_draws,
                                               network):
    """Five steps of ``--model ivon`` with the scale mixture, its terms at the means or at the
    draws, native and ndarray backends: the same draws, so the same losses and parameters up to
    float rounding; a network that pools takes the operators' ``bbb_max_pool`` on the native
    backend alone."""
    from gluon_bbb.learning.step import TrainingStep
    config = Config.from_dict(dict(IVON_RUN, prior="scale_mixture", pi=0.5, sigma_p1=1.0,
                                   sigma_p2=0.01, ivon_prior_at_draws=at_draws, network=network))
    rng = np.random.default_rng(0)
    X = nd.array(rng.uniform(size=(100, 784)), ctx=ctx)
    y = nd.one_hot(nd.array(rng.integers(0, 10, size=100), ctx=ctx), 10)
    runs = {}
    for backend in ("native", "ndarray"):
        step = TrainingStep(config.build_plan(), ctx, backend=backend, num_train=3000)
        assert step.backend == backend and step.optimizer.native == (backend == "native")
        losses = [step(X, y, 1.0).asscalar() for _ in range(5)]
        runs[backend] = losses, step.mu.asnumpy(), step.rho.asnumpy()
        assert list(step.graph._nll_ops) == [network != "mlp" and backend == "native"]
    np.testing.assert_allclose(runs["native"][0], runs["ndarray"][0], rtol=1e-4)
    for native_array, plain_array in zip(runs["native"][1:], runs["ndarray"][1:]):
        np.testing.assert_allclose(native_array, plain_array, rtol=1e-3,
                                   atol=1e-4 * np.max(np.abs(plain_array)))


@given(st.integers(1, 3000), st.sampled_from([1, 2]), st.floats(0.05, 2.0), st.booleans(),
       st.integers(0, 2 ** 32 - 1))
def test_the_prior_at_draws_enters_the_update_at_the_drawn_weights(ctx, size, prior,
                                                                   prior_scale, on_kernels,
                                                                   seed):
    """``prior_at_draws``: a step's update and the sigma of the next draw take the prior's
    terms at the weights the step drew: the same as an IVON whose state holds the terms at
    those weights, on the C kernels and on the operators."""
    results = []
    for at_draws in (True, False):
        rng = np.random.default_rng(seed)
        optimizer = IVON(learning_rate=0.3, ess=1000.0, prior=KERNEL_PRIORS[prior],
                         prior_scale=prior_scale, prior_at_draws=at_draws, native=on_kernels)
        optimizer.rescale_grad = 1.0
        mu, state = random_ivon_state(optimizer, rng, size, ctx, 1)
        drawn, noise = optimizer.draw_weights(mu, state, PhiloxNoise(ctx, seed))
        if at_draws:
            optimizer.prior_at_draw(state, drawn)
        else:  # the terms at the draw written into the state by hand
            state[5]["terms"] = optimizer.prior_terms(drawn)
        expected_terms = [t.asnumpy() for t in optimizer.prior_terms(drawn)]
        rho = nd.zeros(size, ctx=ctx)
        optimizer.step_one_draw(0, mu, state, nd.array(rng.normal(size=size), ctx=ctx), noise,
                                rho)
        if at_draws:  # kept after the update, for the next draw's sigma and the stored rho
            for kept, expected in zip(state[5]["terms"], expected_terms):
                np.testing.assert_array_equal(kept.asnumpy(), expected)
            np.testing.assert_allclose(rho.asnumpy(), optimizer.log_variance(
                state, mu).asnumpy(), rtol=1e-6, atol=2e-5)
        results.append([a.asnumpy() for a in (mu, state[0], state[1])])
    for at_draws, by_hand in zip(*results):
        np.testing.assert_array_equal(at_draws, by_hand)


def test_settings_ivon_cannot_take_are_refused():
    for kwargs, field in ((dict(model="ivon", parametrization="softplus"), "parametrization"),
                          (dict(model="ivon", parametrization="log_variance",
                                estimator="lrt"), "estimator"),
                          (dict(model="ivon", parametrization="log_variance",
                                prior="log_uniform"), "prior"),
                          (dict(IVON_RUN, ivon_beta2=1.0), "ivon_beta2"),
                          (dict(IVON_RUN, ivon_hess_init=0.0), "ivon_hess_init"),
                          (dict(IVON_RUN, ivon_late_beta2=0.999), "ivon_late_epochs"),
                          (dict(IVON_RUN, ivon_late_epochs=3), "ivon_late_beta2"),
                          (dict(IVON_RUN, ivon_late_epochs=0, ivon_late_beta2=0.9),
                           "ivon_late_epochs"),
                          (dict(IVON_RUN, ivon_late_beta2=1.5, ivon_late_epochs=3),
                           "ivon_late_beta2"),
                          (dict(IVON_RUN, epochs=4, ivon_late_beta2=0.9, ivon_late_epochs=5),
                           "ivon_late_epochs"),
                          (dict(IVON_RUN, ivon_prior_at_draws=True), "ivon_prior_at_draws"),
                          (dict(IVON_RUN, prior="gaussian", ivon_prior_at_draws=1),
                           "ivon_prior_at_draws")):
        with pytest.raises(ConfigError) as info:
            Config.from_dict(kwargs)
        assert info.value.field == field


def test_a_mean_below_float32s_normal_numbers_becomes_0(ctx):
    """The update's means and momentum, where float32 would hold them as subnormal numbers,
    are 0 (the scale mixture pulls the weights it holds to 0 through them, a momentum without
    gradient decays through them, and they are slow)."""
    optimizer = IVON(learning_rate=0.1, ess=100.0)
    weight = nd.array([1e-39, -3e-38, 2e-38, 0.5], ctx=ctx, dtype="float64")
    state = optimizer.create_state(0, weight)
    state[0][:] = nd.array([0.0, 1.2e-38, 2e-38, -1e-3], ctx=ctx, dtype="float64")
    optimizer.accumulate(state, nd.zeros(4, ctx=ctx, dtype="float64"),
                         nd.zeros(4, ctx=ctx, dtype="float64"))
    optimizer.update(0, weight, None, state)
    # a zero gradient: m = 0.9 m, then the step (m / (1 - 0.9) + wd mu) / (h + wd) at the rate
    # lr (hess_init + wd), h still 0.1 (to 1e-11)
    momentum = 0.9 * np.array([0.0, 1.2e-38, 2e-38, -1e-3])
    assert abs(momentum[1]) < 1.1755e-38  # 1.08e-38 is subnormal in float32
    momentum[1] = 0.0
    mu = np.array([1e-39, -3e-38, 2e-38, 0.5])
    mu = mu - 0.1 * (0.1 + 1e-4) * (momentum / 0.1 + 1e-4 * mu) / (0.1 + 1e-4)
    assert abs(mu[0]) < 1.1755e-38 > abs(mu[2])  # about 1e-39 and 2e-39
    mu[0] = mu[2] = 0.0
    np.testing.assert_array_equal(state[0].asnumpy() == 0, momentum == 0)
    np.testing.assert_array_equal(weight.asnumpy() == 0, mu == 0)
    # (MXNet's operators take their scalars as float32)
    np.testing.assert_allclose(state[0].asnumpy(), momentum, rtol=1e-6)
    np.testing.assert_allclose(weight.asnumpy(), mu, rtol=1e-6)


def test_a_run_hands_its_prior_and_the_hessians_schedule_to_the_update(ctx):
    """The step's IVON takes the run's prior with the KL term's scale and warm-up as its weight,
    and beta2 of each epoch: ``ivon_late_beta2`` in the last ``ivon_late_epochs``."""
    from gluon_bbb.family.priors import ScaleMixturePrior
    from gluon_bbb.learning.step import TrainingStep
    config = Config.from_dict(dict(IVON_RUN, prior="scale_mixture", pi=0.5, sigma_p1=1.0,
                                   sigma_p2=0.01, kl_scale=0.5, kl_warmup_epochs=4, epochs=10,
                                   ivon_late_beta2=0.99, ivon_late_epochs=3))
    step = TrainingStep(config.build_plan(), ctx, num_train=3000)
    assert step.optimizer.prior == ScaleMixturePrior(0.5, 1.0, 0.01)
    assert step.optimizer.ess == 3000
    betas, scales = [], []
    for epoch in range(10):
        step.start_epoch(epoch)
        betas.append(step.optimizer.beta2)
        scales.append(step.optimizer.prior_scale)
    assert betas == [0.99999] * 7 + [0.99] * 3
    assert scales == [0.5 * config.build_schedule().kl_factor_at(epoch) for epoch in range(10)]
    assert scales[0] < scales[3] < scales[4] == 0.5
    # rho holds log sigma^2 of the posterior the optimizer's state and prior give
    np.testing.assert_allclose(step.rho.asnumpy(), step.optimizer.log_variance(
        step.optimizer_states[0], step.mu).asnumpy(), rtol=1e-6)


IVON_RUN = dict(model="ivon", parametrization="log_variance", prior="none", num_hidden_units=50,
                learning_rate=0.5, lr_schedule="cosine", train_size=3000, batch_size=100,
                seed=0)


@pytest.mark.slow
def test_an_ivon_run_learns_and_stores_its_posterior(tmp_path, full_mnist, ctx):
    mnist = full_mnist
    config = Config(epochs=4, **IVON_RUN)
    whole = train(config, mnist, ctx, out_dir=str(tmp_path / "whole"), **QUIET)
    # 0.886 measured (a deterministic network, Adam at 1e-3, the same: 0.891)
    assert whole.history[-1]["test_accuracy"] > 0.85
    # the posterior every reader takes: sigma = 1 / sqrt(ess (h + wd)), stored as log sigma^2
    state = RunDirectory(str(tmp_path / "whole")).load_parameters(whole.config)
    hessian = state["optimizer_states"][0][1].asnumpy()
    sigma = np.concatenate([s.asnumpy().ravel() for s in whole.sigmas])
    np.testing.assert_allclose(sigma, 1 / np.sqrt(3000 * (hessian + 1e-4)), rtol=1e-5)


def test_every_reader_takes_an_ivon_run(runs, tmp_path):
    from commands import COMPRESS, EVALUATE, PRUNE, SHIFT, run
    out = runs.copy("ivon", tmp_path)
    assert "ivon" in (out / "config.json").read_text()
    for cmd, args in ((PRUNE, ["--checkpoint", out, "--proportions", "0", "0.5"]),
                      (EVALUATE, ["--checkpoint", out, "--test-samples", "3"]),
                      (COMPRESS, [out, "--sigma-bits", "4", "--proportion", "0.5", "--out",
                                  tmp_path / "m.gbbb"]),
                      (SHIFT, [out, "--out", out / "shift", "--test-size", "50",
                               "--test-samples", "1", "--shift", "rotation"])):
        proc = run(cmd, *args)
        assert proc.returncode == 0, (cmd, proc.stderr)
    assert "removed by snr" in run(PRUNE, "--checkpoint", out, "--proportions", "0").stdout


def test_a_trainer_of_ivon_refuses_what_it_cannot_take():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    assert type(gluon.Trainer(net.collect_params(), "ivon", {"ess": 100})._optimizer) is IVON
    for settings, words in (({"learning_rate": float("nan")}, "learning_rate must be a finite "
                             "number in (0, 1e+06], got nan"),
                            ({"learning_rate": -1}, "learning_rate must be a finite number in "
                             "(0, 1e+06], got -1"),
                            ({"ess": True}, "ivon_ess must be a number from 1.18e-38 (float32's "
                                            "smallest normal number) to 1e+12, got True"),
                            ({"beta1": 1e-40}, "ivon_beta1 must be in (0, 1) (float32 holds no "
                                               "magnitude below 1.18e-38), got 1e-40")):
        with pytest.raises(ValueError) as info:
            gluon.Trainer(net.collect_params(), "ivon", settings)._init_optimizer("ivon",
                                                                                  settings)
        assert str(info.value) == words


@given(st.sampled_from(["ess", "hess_init", "weight_decay", "beta1", "beta2", "rescale_grad",
                        "learning_rate"]),
       st.one_of(st.floats(), st.integers(-10, 10 ** 13), st.sampled_from([
           np.float32(0.9), np.int64(200), np.float64(1e-3), True, "0.1", None])))
def test_ivons_numbers_take_numpy_scalars_and_refuse_what_float32_cannot_keep(name, value):
    from gluon_bbb.learning.plan import MAX_ESS, MAX_HESS_INIT, MAX_WEIGHT_DECAY
    from gluon_bbb.errors import FLOAT32_TINY, FLOAT32_MAX
    high = {"ess": MAX_ESS, "hess_init": MAX_HESS_INIT, "weight_decay": MAX_WEIGHT_DECAY,
            "learning_rate": 1e6, "rescale_grad": FLOAT32_MAX}.get(name, 1.0)
    number = (isinstance(value, (int, float, np.integer, np.floating))
              and not isinstance(value, (bool, np.bool_)))
    takes = number and math.isfinite(value) and FLOAT32_TINY <= value <= high and (
        name not in ("beta1", "beta2") or value < 1.0)
    try:
        optimizer = IVON(**{name: value})
    except ValueError as exc:
        assert not takes, str(exc)
        assert "\n" not in str(exc)
    else:
        assert takes, value
        held = {"weight_decay": "ivon_weight_decay", "learning_rate": "lr"}.get(name, name)
        assert type(getattr(optimizer, held)) is float and getattr(optimizer, held) == value


def test_sampled_params_refuses_what_it_cannot_draw():
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])
    with pytest.raises(ValueError, match="on 2 contexts"):
        with sampled_params(gluon.Trainer(net.collect_params(), "ivon", {"ess": 10})):
            pass
    deferred = gluon.nn.Dense(3)
    deferred.initialize()
    with pytest.raises(ValueError, match="not initialized yet"):
        with sampled_params(gluon.Trainer(deferred.collect_params(), "ivon", {"ess": 10})):
            pass
    with pytest.raises(ValueError, match="whose optimizer is ivon"):
        with sampled_params(gluon.Trainer(deferred.collect_params(), "sgd")):
            pass


def _first_step_is_ivons(net, trainer, loss_fn, X, y):
    """The trainer's first step from the weights sampled_params drew: the momentum (1 - beta1)
    times the mean loss's gradient there, the means moved by lr (hess_init + wd) times the
    bias-corrected momentum plus wd mu, over h + wd (h from f = ess (h + wd) noise grad)."""
    params = list(net.collect_params().values())
    optimizer = trainer._optimizer
    means = [p.data().copy() for p in params]
    with sampled_params(trainer):
        drawn = [p.data().copy() for p in params]
        with autograd.record():
            loss = loss_fn(net(X), y)
        loss.backward()
        grads = [p.grad().asnumpy() / X.shape[0] for p in params]
    trainer.step(X.shape[0])
    lr, wd, hess_init = optimizer.learning_rate, optimizer.ivon_weight_decay, optimizer.hess_init
    for param, mean, w, grad in zip(params, means, drawn, grads):
        mu, m, h = numpy_ivon(mean.asnumpy().astype(np.float64), 0.0, hess_init, [grad],
                              [(w - mean).asnumpy()], 1, lr, optimizer.ess, hess_init,
                              optimizer.beta1, optimizer.beta2, wd, math.inf)
        state = optimizer._state_of(param)
        np.testing.assert_allclose(state[0].asnumpy(), m, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(state[1].asnumpy(), h, rtol=1e-4)
        np.testing.assert_allclose(param.data().asnumpy(), mu, rtol=1e-4, atol=1e-6)


def test_ivon_in_a_users_gluon_trainer(ctx, mnist):
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu", in_units=784), gluon.nn.Dense(10, in_units=64))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "ivon",
                            {"learning_rate": 0.2, "ess": 5000, "hess_init": 0.1})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    X = nd.array(mnist.train_images[:500], ctx=ctx)
    y = nd.array(mnist.train_labels[:500], ctx=ctx)
    _first_step_is_ivons(net, trainer, loss_fn, X[:100], y[:100])
    before = [p.data().copy() for p in net.collect_params().values()]
    for epoch in range(2):
        for i in range(0, 500, 100):
            with sampled_params(trainer):
                with autograd.record():
                    loss = loss_fn(net(X[i:i + 100]), y[i:i + 100])
                loss.backward()
            trainer.step(100)
    # the means moved, and between steps the parameters hold them
    after = [p.data() for p in net.collect_params().values()]
    assert all(not np.allclose(a.asnumpy(), b.asnumpy()) for a, b in zip(before, after))
    probs = predict_probabilities(net, trainer, nd.array(mnist.test_images[:1000], ctx=ctx),
                                  num_samples=5)
    assert probs.shape == (1000, 10)
    np.testing.assert_allclose(probs.sum(axis=1).asnumpy(), 1, rtol=1e-5)
    for a, b in zip(after, [p.data() for p in net.collect_params().values()]):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())  # the predictive draws restore


def test_a_gluon_trainers_step_takes_the_prior_at_its_draws(ctx):
    """``prior_at_draws`` in a user's Gluon model: the step after ``sampled_params`` takes the
    prior's terms at the weights the block held, and the means move as an IVON whose state
    holds those terms by hand."""
    from gluon_bbb.family.priors import ScaleMixturePrior
    results = []
    for at_draws in (True, False):
        mx.random.seed(5)
        net = gluon.nn.Dense(3, in_units=4)
        net.initialize(mx.init.Normal(0.05), ctx=ctx)
        trainer = gluon.Trainer(net.collect_params(), IVON(
            learning_rate=0.2, ess=50.0, prior=ScaleMixturePrior(0.25, 1.0, 0.01),
            prior_at_draws=at_draws))
        X = nd.array(np.random.default_rng(0).normal(size=(6, 4)), ctx=ctx)
        with sampled_params(trainer):
            drawn = {p.name: p.data().copy() for p in net.collect_params().values()}
            with autograd.record():
                loss = (net(X) ** 2).sum()
            loss.backward()
        optimizer = trainer._optimizer
        for param in net.collect_params().values():
            state = optimizer._state_of(param)
            expected = [t.asnumpy() for t in optimizer.prior_terms(drawn[param.name])]
            if not at_draws:  # the terms at the draw written into the state by hand
                state[5]["terms"] = optimizer.prior_terms(drawn[param.name])
                state[5]["version"] = optimizer._prior_version
            for held, want in zip(optimizer._prior_terms_of(state, param.data()), expected):
                np.testing.assert_array_equal(held.asnumpy(), want)
        trainer.step(6)
        results.append([p.data().asnumpy() for p in net.collect_params().values()])
    for at_draws, by_hand in zip(*results):
        np.testing.assert_array_equal(at_draws, by_hand)


@pytest.mark.slow
def test_the_gluon_example_runs_as_a_script(full_mnist_dir):
    import os
    from commands import PYTHON, ROOT, run
    # the data from $GLUON_BBB_DATA, as the test session's (``mnist``)
    proc = run([PYTHON, os.path.join(ROOT, "examples", "ivon_gluon.py")], "--epochs", "2",
               "--train-size", "3000", env={"GLUON_BBB_DATA": full_mnist_dir})
    assert proc.returncode == 0, proc.stderr
    accuracy = float(proc.stdout.split()[-1])
    assert accuracy > 0.8, proc.stdout  # 0.829 measured

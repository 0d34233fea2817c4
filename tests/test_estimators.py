"""The weight estimators (weight sampling, the local reparametrization, Flipout) on dense and
convolutional networks, and the KL in both directions, on both backends: against autograd of
the loss written plainly here, for the same noise (drawn first, then compared). The networks,
priors and settings are drawn at random (Hypothesis); ``NETWORKS`` are examples."""
import math
import statistics

import numpy as np
import pytest
from hypothesis import assume, example, given, strategies as st
from mxnet import autograd, nd

from gluon_bbb import Config, ConfigError, combined_loss_gradients
from gluon_bbb.family import estimators, kl as kl_estimates
from gluon_bbb.learning.step import FlatLayout, NetworkGraph, draw_size
from gluon_bbb.learning.noise import PhiloxNoise, philox_normals_reference
from gluon_bbb.learning.step import choose_backend
from gluon_bbb.family.elementwise import operators
from gluon_bbb.family.parametrizations import (LogVariance, Softplus,
                                               parametrization as parametrization_named)
from gluon_bbb.family.priors import (GatedPrior, GaussianPrior, LogUniformPrior, NoPrior, Prior,
                                     ScaleMixturePrior)
from test_step import assert_matches

LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)
NETWORKS = {"dense": ("dense:5,relu,dense:3", 6),
            "conv": ("conv:3:3,relu,pool:2,conv:4:2,relu,flatten,dense:5,relu,dense:3", 64),
            "gated": ("conv:3:3,gate,relu,pool:2,flatten,dense:5,gate,relu,dense:3", 36)}
WIDTHS = st.one_of(st.integers(1, 20), st.sampled_from([8, 16, 24, 32]))


@st.composite
def networks(draw):
    """(description, features) of a small network of dense and convolution layers, some
    followed by a gate (one factor per unit or channel), three classes, as ``NETWORKS`` holds
    them."""
    gate = lambda: ",gate" if draw(st.booleans()) else ""  # noqa: E731
    if draw(st.booleans()):
        layers = ["dense:%d%s,relu" % (draw(WIDTHS), gate())
                  for _ in range(draw(st.integers(0, 2)))]
        return ",".join(layers + ["dense:3"]), draw(st.integers(1, 12))
    side = draw(st.integers(3, 8))
    layers, height = [], side
    for _ in range(draw(st.integers(1, 2))):
        kernel = draw(st.integers(1, min(3, height)))
        layers.append("conv:%d:%d%s,relu" % (draw(WIDTHS), kernel, gate()))
        height -= kernel - 1
        if height >= 2 and draw(st.booleans()):
            layers.append("pool:2")
            height //= 2
    layers += ["flatten"] + ["dense:%d%s,relu" % (draw(WIDTHS), gate())
                             for _ in range(draw(st.integers(0, 1)))] + ["dense:3"]
    return ",".join(layers), side * side


class UsersLaplace(Prior):
    """A prior of a user's own: its log density alone, the gradient by autograd."""
    name = "test_laplace"

    def __init__(self, scale):
        self.scale = scale

    def log_density(self, x, F=None):
        return -operators(F).abs(x) / self.scale - math.log(2 * self.scale)


@st.composite
def priors(draw, users=False):
    kind = draw(st.sampled_from(["gaussian", "mixture"] + (["laplace"] if users else [])))
    if kind == "gaussian":
        return "gaussian", GaussianPrior(draw(st.floats(0.3, 2.0)))
    if kind == "laplace":
        return "laplace", UsersLaplace(draw(st.floats(0.05, 1.0)))
    return "mixture", ScaleMixturePrior(draw(st.floats(0.1, 0.9)), draw(st.floats(0.5, 2.0)),
                                        draw(st.floats(0.02, 0.4)))


def plain_layers(description):
    return [item.split(":") for item in description.split(",")]


def plain_forward(X, layers, side, weighted, gated):
    """The network, one layer at a time in MXNet's operators; ``weighted(kind, h, i, units)``
    gives a dense or convolution layer's output, its weight at parameter ``i``;
    ``gated(h, i)`` a gate's, its vector at parameter ``i``."""
    h = X.reshape((-1, 1, side, side)) if layers[0][0] == "conv" else X
    i = 0
    for name, *numbers in layers:
        if name in ("dense", "conv"):
            h = weighted(name, h, i, int(numbers[0]))
            i += 2
        elif name == "gate":
            h = gated(h, i)
            i += 1
        elif name == "relu":
            h = nd.relu(h)
        elif name == "pool":
            size = int(numbers[0])
            h = nd.Pooling(h, kernel=(size, size), stride=(size, size), pool_type="max")
        elif name == "flatten":
            h = nd.flatten(h)
    return h


def op(name, h, W, b, units):
    if name == "dense":
        return nd.FullyConnected(h, W, b, num_hidden=units)
    return nd.Convolution(h, W, b, num_filter=units, kernel=W.shape[2:])


def per_unit(vector, h):
    """A gate's (units,) vector, or its (batch, units) draws, shaped to multiply ``h``."""
    return vector.reshape(vector.shape + (1,) * (h.ndim - vector.ndim)) if vector.ndim == 2 \
        else vector.reshape((1, -1) + (1,) * (h.ndim - 2))


def plain_nll(estimator, layers, side, X, y, mus, sigmas, weight_eps, noise):
    """-sum log softmax(y) of the estimator's network, written plainly. ``noise``: the
    estimator's arrays in layer order (a gate's one: per example and unit)."""
    arrays = iter(noise)

    def gated(h, i):
        if estimator == "sample":  # one gate for the mini-batch
            return h * per_unit(mus[i] + sigmas[i] * weight_eps[i], h)
        draw = next(arrays).reshape((h.shape[0], -1))  # per example and unit
        if estimator == "lrt":
            gates = mus[i].reshape((1, -1)) + sigmas[i].reshape((1, -1)) * draw
        else:  # flipout: the mini-batch's perturbation, its sign per example and unit
            gates = mus[i].reshape((1, -1)) + (sigmas[i] * weight_eps[i]).reshape((1, -1)) \
                * nd.sign(draw)
        return h * per_unit(gates, h)

    def weighted(name, h, i, units):
        if estimator == "sample":
            return op(name, h, mus[i] + sigmas[i] * weight_eps[i],
                      mus[i + 1] + sigmas[i + 1] * weight_eps[i + 1], units)
        mean = op(name, h, mus[i], mus[i + 1], units)
        if estimator == "lrt":
            variance = op(name, h * h, sigmas[i] ** 2, sigmas[i + 1] ** 2, units)
            return mean + nd.sqrt(variance + 1e-8) * next(arrays)
        signs_in, signs_out = nd.sign(next(arrays)), nd.sign(next(arrays))
        flipped = nd.broadcast_mul(h if name == "conv" else nd.flatten(h), signs_in)
        perturbation = op(name, flipped, sigmas[i] * weight_eps[i],
                          sigmas[i + 1] * weight_eps[i + 1], units)
        return mean + nd.broadcast_mul(perturbation, signs_out)
    logits = plain_forward(X, layers, side, weighted, gated)
    return -nd.sum(nd.pick(nd.log_softmax(logits, axis=1), nd.argmax(y, axis=1), axis=1))


def plain_log_prior(prior, w):
    if hasattr(prior, "plain"):  # a user's subclass, its own formula written plainly
        return prior.plain(w)
    if isinstance(prior, UsersLaplace):
        return nd.sum(-nd.abs(w) / prior.scale - np.log(2 * prior.scale))
    if isinstance(prior, GaussianPrior):
        return nd.sum(-LOG_SQRT_2PI - np.log(prior.sigma_p) - w ** 2 / (2 * prior.sigma_p ** 2))
    first = np.log(prior.pi) - LOG_SQRT_2PI - np.log(prior.sigma_p1) \
        - w ** 2 / (2 * prior.sigma_p1 ** 2)
    second = np.log(1 - prior.pi) - LOG_SQRT_2PI - np.log(prior.sigma_p2) \
        - w ** 2 / (2 * prior.sigma_p2 ** 2)
    top = nd.maximum(first, second)
    return nd.sum(top + nd.log(nd.exp(first - top) + nd.exp(second - top)))


def plain_log_q(w, mu, sigma):
    return nd.sum(-LOG_SQRT_2PI - nd.log(sigma) - (w - mu) ** 2 / (2 * sigma ** 2))


def part_of(prior, i):
    """The prior of parameter array ``i``: a gated prior's gates' prior for a gate's array, its
    weights' elsewhere."""
    if isinstance(prior, GatedPrior):
        return prior.gates if i in prior.gate_arrays else prior.weights
    return prior


def plain_closed_form_kl(direction, prior, mu, sigma):
    """The Gaussian prior's closed-form KL, entry by entry; the log-uniform prior's by Molchanov
    et al.'s approximation (eq. 14) in log alpha, clipped to [-10, 10]; no prior's, 0."""
    if isinstance(prior, NoPrior):
        return mu * 0
    if isinstance(prior, LogUniformPrior):
        log_alpha = nd.clip(nd.log(sigma ** 2) - nd.log(mu ** 2 + 1e-8), -10, 10)
        return (0.63576 - 0.63576 / (1 + nd.exp(-(1.87320 + 1.48695 * log_alpha)))
                + 0.5 * nd.log(1 + nd.exp(-log_alpha)))
    sp = prior.sigma_p
    if direction == "reverse":
        return nd.log(sp / sigma) + (sigma ** 2 + mu ** 2) / (2 * sp ** 2) - 0.5
    return nd.log(sigma / sp) + (sp ** 2 + mu ** 2) / (2 * sigma ** 2) - 0.5


def plain_kl(kl, direction, prior, mus, sigmas, weight_eps, prior_normals):
    total = 0
    for i, (mu, sigma) in enumerate(zip(mus, sigmas)):
        if kl == "analytic":
            total = total + nd.sum(plain_closed_form_kl(direction, part_of(prior, i), mu, sigma))
        elif direction == "reverse":
            w = mu + sigma * weight_eps[i]
            total = total + plain_log_q(w, mu, sigma) - plain_log_prior(part_of(prior, i), w)
        else:  # at a sample of the prior, which does not depend on mu and sigma
            z, choice = prior_normals[i]
            if isinstance(prior, GaussianPrior):
                w = z * prior.sigma_p
            else:
                first = (choice < statistics.NormalDist().inv_cdf(prior.pi))
                w = z * (first * prior.sigma_p1 + (1 - first) * prior.sigma_p2)
            total = total + plain_log_prior(prior, w) - plain_log_q(w, mu, sigma)
    return total


def reference(estimator, kl, direction, prior, network, layout, mu, rho, X, y, eps, kl_weight,
              parametrization="softplus", keep=None):
    """(loss, [d/dmu], [d/drho]) by autograd of the plain loss, the noise ``eps`` split as
    the estimator and the KL take it; ``network``: (description, features); sigma =
    softplus(rho), or exp(rho / 2) for the ``log_variance`` parametrization. ``keep``: a flat
    0/1 array; the entries at 0 are out of the network (mean and sigma 0 in the data term),
    their closed-form KL in the loss with no gradient."""
    description, features = network
    layers, side = plain_layers(description), int(np.sqrt(features))
    kl_kind = kl_estimates.kl_estimate(kl, direction)
    chosen = estimators.estimator(estimator)
    graph = NetworkGraph(Config(network=description, num_inputs=features,
                                num_outputs=3).build_network())
    data_size = chosen.noise_size(graph, X.shape[0], kl_kind)
    data, prior_part = eps[:data_size], eps[data_size:]
    shapes = chosen.noise_shapes(graph.network, X.shape[0]) if estimator != "sample" else []
    sizes = [int(np.prod(s)) for s in shapes]
    if estimator == "flipout":
        weight_flat, noise_flat = data[:layout.size], data[layout.size:]
    elif estimator == "lrt":
        noise_flat, weight_flat = data[:sum(sizes)], data[sum(sizes):]
    else:
        weight_flat, noise_flat = data, data[:0]
    offsets = np.cumsum([0] + sizes)
    noise = [noise_flat[a:b].reshape(s) for a, b, s in zip(offsets[:-1], offsets[1:], shapes)]
    weight_eps = layout.views(weight_flat) if weight_flat.size else None
    prior_normals = None
    if kl_kind.prior_draws:
        n = layout.size
        second = prior_part[n:2 * n] if isinstance(prior, ScaleMixturePrior) else prior_part[:n]
        prior_normals = list(zip(layout.views(prior_part[:n]), layout.views(second)))
    mus, rhos = layout.views(mu.copy()), layout.views(rho.copy())
    for p in mus + rhos:
        p.attach_grad()
    keeps = layout.views(keep) if keep is not None else [1.0] * len(mus)
    with autograd.record():
        sigmas = [parametrization.plain(r) if hasattr(parametrization, "plain")
                  else nd.log(1 + nd.exp(r)) if parametrization == "softplus" else nd.exp(r / 2)
                  for r in rhos]
        kept = lambda arrays: [a * k for a, k in zip(arrays, keeps)]  # noqa: E731
        loss = plain_nll(estimator, layers, side, X, y, kept(mus), kept(sigmas), weight_eps,
                         noise)
        if keep is None:
            loss = loss + kl_weight * plain_kl(kl, direction, prior, mus, sigmas, weight_eps,
                                               prior_normals)
        else:  # the closed form entry by entry: the kept entries' with their gradient
            for i, (mu_i, sigma_i, k) in enumerate(zip(mus, sigmas, keeps)):
                entries = plain_closed_form_kl(direction, part_of(prior, i), mu_i, sigma_i)
                loss = loss + kl_weight * (nd.sum(entries * k)
                                           + nd.sum(entries * (1 - k)).detach())
    loss.backward()
    return loss, [m.grad for m in mus], [r.grad for r in rhos]


def problem(ctx, network, dtype, seed=3, batch=4):
    description, features = network
    config = Config(network=description, num_inputs=features, num_outputs=3)
    layout = FlatLayout(config.layer_shapes())
    rng = np.random.default_rng(seed)
    to = lambda a: nd.array(a, ctx=ctx, dtype=dtype)  # noqa: E731
    mu, rho = to(rng.normal(size=layout.size) * 0.4), to(rng.normal(size=layout.size) - 1.5)
    X = to(rng.normal(size=(batch, features)))
    y = to(np.eye(3)[rng.integers(0, 3, size=batch)])
    return config, layout, mu, rho, X, y


PRIORS = {"mixture": ScaleMixturePrior(0.25, 1.0, 0.2), "gaussian": GaussianPrior(0.8)}


ESTIMATORS = st.sampled_from(["sample", "lrt", "flipout"])


@given(ESTIMATORS, networks(), st.sampled_from(["mc", "analytic"]),
       st.sampled_from(["reverse", "forward"]), priors(users=True), st.floats(0.01, 2.0),
       st.integers(1, 5), st.integers(0, 2 ** 32 - 1), st.sampled_from(["float64", "float32"]),
       st.sampled_from(["softplus", "log_variance"]), st.sampled_from([0.0, 0.3, 0.9]))
@example("lrt", NETWORKS["conv"], "mc", "forward", ("mixture", PRIORS["mixture"]), 0.3, 4, 3,
         "float64", "softplus", 0.0)
@example("flipout", NETWORKS["dense"], "analytic", "reverse", ("gaussian", PRIORS["gaussian"]),
         0.3, 4, 3, "float64", "log_variance", 0.0)
@example("lrt", NETWORKS["gated"], "analytic", "reverse", ("gaussian", PRIORS["gaussian"]),
         0.3, 4, 3, "float64", "log_variance", 0.3)
@example("flipout", NETWORKS["gated"], "mc", "reverse", ("mixture", PRIORS["mixture"]),
         0.3, 4, 3, "float64", "softplus", 0.0)
def test_the_ndarray_backend_equals_autograd_of_the_plain_loss(ctx, estimator, network, kl,
                                                             direction, prior, kl_weight, batch,
                                                             seed, dtype, parametrization,
                                                             removed):
    """float64: the formulas, to rounding; float32: what trains, through oneDNN's kernels. The
    priors include a user's own (its gradient by autograd), the parametrizations both; with
    the closed-form KL, a share of the entries may be out of the network
    (``Config.remove_switched_off``)."""
    name, prior = prior
    assume(kl == "mc" or name == "gaussian")  # the mixture has no closed-form KL
    # the user's Laplace has no sampler for the forward Monte Carlo KL
    assume(name != "laplace" or direction == "reverse")
    assume(not removed or kl == "analytic")  # removal keeps the removed entries' closed form
    config, layout, mu, rho, X, y = problem(ctx, network, dtype, seed, batch)
    graph = NetworkGraph(config.build_network())
    kl_kind, chosen = kl_estimates.kl_estimate(kl, direction), estimators.estimator(estimator)
    size = draw_size(graph, chosen, kl_kind, prior, X.shape[0])
    rng = np.random.default_rng(seed + 1)
    eps = nd.array(rng.normal(size=size), ctx=ctx, dtype="float64")
    keep = (nd.array(rng.random(layout.size) >= removed, ctx=ctx, dtype="float64")
            if removed else None)
    got = combined_loss_gradients(X, y, mu, rho, [eps.astype(dtype)], prior, kl_weight, graph,
                                  chosen, kl_kind, parametrization_named(parametrization),
                                  None if keep is None else keep.astype(dtype))
    assert all(a.context == ctx and a.dtype == np.dtype(dtype) for a in got)
    def plain(kind):
        return reference(estimator, kl, direction, prior, network, layout,
                         *(a.astype(kind) for a in (mu, rho, X, y, eps)), kl_weight,
                         parametrization, None if keep is None else keep.astype(kind))
    assert_matches(got, plain("float64"), layout, 1e-9 if dtype == "float64" else 5e-4,
                   None if dtype == "float64" else plain("float32"))
    if keep is not None:  # nothing reaches a removed entry
        off = keep.asnumpy() == 0
        assert not got[1].asnumpy()[off].any() and not got[2].asnumpy()[off].any()


@pytest.mark.parametrize("network", NETWORKS.values())
def test_flipout_with_every_sign_positive_is_weight_sampling(ctx, network):
    """Flipout perturbs example n's weights by delta * (r_n s_n^T): with all signs +1 that is
    weight sampling's w = mu + sigma * eps for every example, the same loss and gradients."""
    config, layout, mu, rho, X, y = problem(ctx, network, "float64")
    graph = NetworkGraph(config.build_network())
    kl = kl_estimates.kl_estimate("mc")
    prior = PRIORS["mixture"]
    flipout, sample = estimators.estimator("flipout"), estimators.estimator("sample")
    rng = np.random.default_rng(5)
    eps_w = rng.normal(size=layout.size)
    signs = np.abs(rng.normal(size=draw_size(graph, flipout, kl, prior, X.shape[0])
                              - layout.size))
    rest = rng.normal(size=draw_size(graph, sample, kl, prior, X.shape[0]) - layout.size)
    to = lambda a: nd.array(a, ctx=ctx, dtype="float64")  # noqa: E731
    got = combined_loss_gradients(X, y, mu, rho, [to(np.concatenate([eps_w, signs]))], prior,
                                  0.3, graph, flipout, kl)
    expected = combined_loss_gradients(X, y, mu, rho, [to(np.concatenate([eps_w, rest]))],
                                       prior, 0.3, graph, sample, kl)
    assert_matches(got, expected, layout, rtol=1e-9)


@given(ESTIMATORS, networks(), st.sampled_from(["mc", "analytic"]),
       st.one_of(priors(), st.just(("log_uniform", LogUniformPrior())),
                 st.tuples(st.just("gated"), st.tuples(
                     st.sampled_from(["none", "gaussian", "scale-mixture"]),
                     st.sampled_from(["log-uniform", "gaussian"])))),
       st.floats(0.01, 2.0),
       st.integers(1, 5), st.integers(0, 2 ** 32 - 1),
       st.sampled_from(["softplus", "log_variance"]), st.sampled_from([0.0, 0.3, 0.9]))
@example("flipout", NETWORKS["conv"], "mc", ("mixture", PRIORS["mixture"]), 0.3, 4, 3,
         "softplus", 0.0)
# float32 moves a gate's gradient by 3e-3 of itself here (MXNet's operators as much as the
# kernels): a draw that sits on a kink
@example("flipout", ("conv:10:3,relu,conv:10:2,gate,relu,pool:2,flatten,dense:7,gate,relu,dense:3",
                     49), "analytic", ("gaussian", GaussianPrior(2.0)), 0.125, 1, 750,
         "softplus", 0.0)
# the gates under the log-uniform prior, the weights under none (a region of the parameters
# a call of the kernel)
@example("lrt", NETWORKS["gated"], "analytic", ("gated", ("none", "log-uniform")), 0.3, 4, 3,
         "log_variance", 0.0)
# Bayesian Compression's: N(0, 1) weights, log-uniform gates, the closed forms
@example("sample", NETWORKS["gated"], "analytic", ("gated", ("gaussian", "log-uniform")), 0.3,
         4, 3, "softplus", 0.0)
# both parts' densities: the Monte Carlo KL a region a call
@example("flipout", NETWORKS["gated"], "mc", ("gated", ("scale-mixture", "gaussian")), 0.3, 4,
         3, "softplus", 0.0)
# sparse variational dropout's rows: each estimator under log sigma^2, entries removed
@example("lrt", NETWORKS["conv"], "analytic", ("log_uniform", LogUniformPrior()), 0.3, 4, 3,
         "log_variance", 0.3)
@example("sample", NETWORKS["dense"], "analytic", ("log_uniform", LogUniformPrior()), 0.3, 4,
         3, "log_variance", 0.3)
@example("flipout", NETWORKS["conv"], "analytic", ("log_uniform", LogUniformPrior()), 0.3, 4,
         3, "softplus", 0.9)
# a confident prediction: the loss ~6e-5, where float32's log-softmax rounds by 2% of it
@example("lrt", ("conv:24:2,relu,flatten,dense:3", 25), "analytic", ("gated", ("none", "log-uniform")),
         1.0, 1, 1, "softplus", 0.0)
def test_the_native_backend_equals_autograd_of_the_plain_loss(ctx, native_kernels, estimator,
                                                              network, kl, prior, kl_weight,
                                                              batch, seed, parametrization,
                                                              removed):
    """The kernels (float32) against the plain loss's autograd in float64, within float32's
    rounding: rtol 5e-4, or, where a draw makes the loss that sensitive (a pre-activation or a
    pooling tie within rounding of its kink), no further from it than twice MXNet's own
    operators in float32 (the ndarray backend) on the same draw. Every row of the table: the
    log-uniform prior's closed form under either parametrization, no prior's, gated priors (the
    weights under one prior, the gates under another: one region of entries a call), and with
    the closed-form KL a share of the entries out of the network
    (``Config.remove_switched_off``)."""
    name, prior = prior
    if name == "gated":  # the weights' prior and the gates' (the weights' alone without gates)
        weights, gates = prior
        gated = "gate" in network[0]
        try:
            prior = Config.from_dict(dict(network=network[0], num_inputs=network[1], num_outputs=3,
                                          prior=weights, gate_prior=gates if gated else None,
                                          kl=kl, sigma_p=0.8, pi=0.25, sigma_p1=1.0,
                                          sigma_p2=0.2)).build_prior()
        except ConfigError:  # a KL estimate a part has not
            assume(False)
        assert isinstance(prior, GatedPrior) == (gated and weights != gates)
    chosen, kl_kind = estimators.estimator(estimator), kl_estimates.kl_estimate(kl)
    parametrization = parametrization_named(parametrization)
    assume(native_kernels.serves(chosen, kl_kind, prior, parametrization))
    assume(not removed or kl == "analytic")
    config, layout, mu, rho, X, y = problem(ctx, network, "float32", seed, batch)
    graph = NetworkGraph(config.build_network())
    noise = PhiloxNoise(ctx, seed=seed % 1000)
    keep = (nd.array(np.random.default_rng(seed).random(layout.size) >= removed, ctx=ctx)
            if removed else None)
    got = native_kernels.loss_gradients(
        X, y, mu, rho, noise, 1, prior, kl_weight, graph,
        native_kernels.Workspace(layout.size, ctx), kl_kind, chosen, parametrization, keep)
    size = draw_size(graph, chosen, kl_kind, prior, X.shape[0])
    eps = nd.array(philox_normals_reference(size, noise.key, 0), ctx=ctx, dtype="float64")
    f64 = lambda a: a.astype("float64")  # noqa: E731
    expected = reference(estimator, kl, "reverse", prior, network, layout, f64(mu), f64(rho),
                         f64(X), f64(y), eps, kl_weight, parametrization.name,
                         None if keep is None else f64(keep))
    operators32 = combined_loss_gradients(X, y, mu, rho, [eps.astype("float32")], prior,
                                          kl_weight, graph, chosen, kl_kind, parametrization,
                                          keep)
    if keep is not None:  # nothing reaches a removed entry
        off = keep.asnumpy() == 0
        assert not got[1].asnumpy()[off].any() and not got[2].asnumpy()[off].any()
    assert_matches(got, expected, layout, 5e-4, operators32)


def test_the_forward_kl_runs_on_the_ndarray_backend_and_refuses_what_has_no_closed_form():
    from gluon_bbb.learning.step import choose_backend
    import mxnet as mx
    assert choose_backend(Config(kl_direction="forward").build_plan(), mx.cpu())[0] == "ndarray"
    with pytest.raises(ConfigError, match="kl must be mc with the scale-mixture prior"):
        Config(kl="analytic", kl_direction="forward", prior="scale_mixture")
    with pytest.raises(ConfigError, match="kl_direction must be one of reverse, forward"):
        Config(kl_direction="sideways")


def test_an_estimator_of_layer_outputs_refuses_a_learned_noise_head():
    with pytest.raises(ConfigError, match="estimator must be sample for a network with layers "
                                          "of weights other than dense, conv and gate"):
        Config(estimator="flipout", likelihood="gaussian:learned", num_inputs=1, num_outputs=1)
    Config(estimator="lrt", network="lenet")  # convolutions are drawn too
    Config(estimator="flipout", network="conv:4:5,gate,relu,pool:2,dense:10")  # and gates


# A user's subclasses of the built-ins that change a formula: each trains with its own formula,
# never with a fast path of the built-in's (the kernels serve exact classes only).
def laplace(x, scale, F=nd):
    """log of the Laplace density of ``scale`` at ``x``, entry by entry."""
    return -F.abs(x) / scale - math.log(2 * scale)


# A Laplace density in a Gaussian prior's clothes: every fast path GaussianPrior writes (the sum
# as a dot product, the hand-written gradient, the closed forms, the sampler, the kernel code)
# is the Gaussian's, and must not be used.
class LaplaceAsGaussian(GaussianPrior):
    name = "test_laplace_as_gaussian"

    def __init__(self, sigma_p=0.3):
        self.sigma_p = sigma_p

    def log_density(self, x, F=None):
        return laplace(x, self.sigma_p, operators(F))

    def plain(self, w):
        return nd.sum(laplace(w, self.sigma_p))


class LaplaceAsMixture(ScaleMixturePrior):
    name = "test_laplace_as_mixture"

    def log_density(self, x, F=None):
        return laplace(x, self.sigma_p1, operators(F))

    def plain(self, w):
        return nd.sum(laplace(w, self.sigma_p1))


class TwiceSoftplus(Softplus):
    name = "test_twice_softplus"

    def sigma(self, rho, F=None):
        return 2.0 * super().sigma(rho, F)

    @staticmethod
    def plain(rho):
        return 2.0 * nd.log(1 + nd.exp(rho))


class CubeRootVariance(LogVariance):
    name = "test_cube_root_variance"

    def sigma(self, rho, F=None):
        return operators(F).exp(rho / 3.0)

    @staticmethod
    def plain(rho):
        return nd.exp(rho / 3.0)


def halving(base, name):
    """A subclass of the estimator ``base`` whose draw takes half the noise it is given."""
    def draw(self, graph, X, y, mu, sigma, eps, kl):
        return base.draw(self, graph, X, y, mu, sigma, eps * 0.5, kl)
    return type("Halving" + base.__name__, (base,), {"name": name, "draw": draw})


HALVING = {"sample": halving(estimators.WeightSampling, "test_halving_sample"),
           "lrt": halving(estimators.LocalReparametrization, "test_halving_lrt"),
           "flipout": halving(estimators.Flipout, "test_halving_flipout")}
USERS_PRIORS = {"gaussian": lambda: LaplaceAsGaussian(0.3),
          "mixture": lambda: LaplaceAsMixture(0.25, 0.4, 0.1)}
USERS_PARAMETRIZATIONS = {"softplus": TwiceSoftplus, "log_variance": CubeRootVariance}


@given(st.sampled_from(["sample", "lrt", "flipout"]), st.booleans(), networks(),
       st.sampled_from(["gaussian", "mixture", None]),
       st.sampled_from(["softplus", "log_variance", None]), st.floats(0.01, 2.0),
       st.integers(1, 4), st.integers(0, 2 ** 32 - 1), st.sampled_from(["float64", "float32"]))
# a draw whose float32 loss is 1.3e-3 off the float64 one at a weight's gradient, in the plain
# formula as in the step (found by CI)
@example("lrt", False, ("conv:9:2,gate,relu,pool:2,conv:16:2,relu,flatten,dense:7,relu,dense:3",
                        36), "gaussian", "softplus", 0.0625, 1, 3562449400, "float32")
def test_a_users_changed_formula_trains_with_it_and_never_with_the_built_ins_fast_path(
        ctx, estimator, changed_draw, network, prior, parametrization, kl_weight, batch, seed,
        dtype):
    assume(changed_draw or prior or parametrization)  # one formula of the user's at least
    chosen = HALVING[estimator]() if changed_draw else estimators.estimator(estimator)
    prior_object = USERS_PRIORS[prior]() if prior else GaussianPrior(0.8)
    sigma_of = (USERS_PARAMETRIZATIONS[parametrization]() if parametrization
                else Softplus())
    config, layout, mu, rho, X, y = problem(ctx, network, dtype, seed, batch)
    kl = kl_estimates.kl_estimate("mc")
    # the run's backend: the C kernels serve none of these objects (not their exact classes)
    run_config = Config(network=network[0], num_inputs=network[1], num_outputs=3,
                        prior=prior_object, parametrization=sigma_of, estimator=chosen)
    backend, why = choose_backend(run_config.build_plan(), ctx)
    assert backend == "ndarray" and "native.table.SERVED" in why
    with pytest.raises(ConfigError, match="backend must be ndarray here"):
        choose_backend(run_config.build_plan(), ctx, "native")
    # its gradients: autograd of the plain loss with the user's formulas
    graph = NetworkGraph(config.build_network())
    size = draw_size(graph, chosen, kl, prior_object, X.shape[0])
    rng = np.random.default_rng(seed + 1)
    eps = nd.array(rng.normal(size=size), ctx=ctx, dtype="float64")
    got = combined_loss_gradients(X, y, mu, rho, [eps.astype(dtype)], prior_object, kl_weight,
                                  graph, chosen, kl, sigma_of)
    data_size = chosen.noise_size(graph, X.shape[0], kl)
    # what the user's draw sees: half the data term's noise (the KL's sample included)
    halved = eps.asnumpy()
    halved[:data_size] *= 0.5 if changed_draw else 1.0
    seen = nd.array(halved, ctx=ctx, dtype="float64")
    def plain(kind):
        return reference(estimator, "mc", "reverse", prior_object, network, layout,
                         *(a.astype(kind) for a in (mu, rho, X, y, seen)), kl_weight,
                         sigma_of if parametrization else "softplus")
    assert_matches(got, plain("float64"), layout, 1e-9 if dtype == "float64" else 5e-4,
                   None if dtype == "float64" else plain("float32"))


def test_the_kernels_serve_exact_built_in_classes_and_no_subclass(ctx):
    """A subclass of a class ``native.CODES`` lists gets no code even where it changes no
    formula (it takes the ndarray backend, slower, never wrong), nor the built-in's Python fast
    paths: no closed-form KL, no sampler, no pooled or one-operator convolution."""
    from gluon_bbb.native import library
    from gluon_bbb.networks import layers, network
    import importlib
    for path, code in library.CODES.items():
        module, name = path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        assert library.code(cls()) == code is not None
        instance = type(name, (cls,), {"name": "test_renamed_" + name})()
        assert library.code(instance) is None and library.prior_args(instance) is None
    renamed = type("Renamed", (GaussianPrior,), {"name": "test_renamed_gaussian_prior"})(0.5)
    assert not renamed.has_closed_form_kl and not renamed.has_forward_closed_form_kl
    assert renamed.sample_normals is None and GaussianPrior(0.5).sample_normals == 1
    with pytest.raises(ConfigError, match="kl must be mc with the test-renamed-gaussian-prior"):
        Config(prior=renamed, kl="analytic")
    backend, why = choose_backend(Config(prior=renamed, num_hidden_units=5).build_plan(), ctx)
    assert backend == "ndarray" and "prior test_renamed_gaussian_prior" in why
    assert choose_backend(Config(num_hidden_units=5).build_plan(), ctx)[0] == (
        "native" if library.available() else "ndarray")
    relu = type("Leaky", (layers.ReLU,), {})()
    assert not network._pooled_with(relu, layers.ReLU) and network._pooled_with(layers.ReLU(),
                                                                                layers.ReLU)


def test_a_subclass_of_no_prior_with_a_kl_of_its_own_trains_with_it_not_the_kernels_zero(ctx):
    """The kernels serve no prior (the weights under a gated network's gates) as a KL of 0; a
    subclass whose ``kl`` is not 0 loses that code, alone and as the weights' part of a gated
    prior, and its KL's gradient reaches the means."""
    from gluon_bbb.family.priors import GatedPrior, NoPrior

    class Shrinking(NoPrior):
        name = "test_shrinking_none"

        def kl(self, mu, sigma, F=None):
            return 0.5 * operators(F).square(mu)
    from gluon_bbb.native.library import prior_args
    assert prior_args(NoPrior()) is not None and prior_args(Shrinking()) is None
    gated = "conv:3:3,gate,relu,pool:2,flatten,dense:5,gate,relu,dense:3"
    for prior in (NoPrior(), Shrinking()):
        for network, gate_prior in (("dense:5,relu,dense:3", None), (gated, "log-uniform")):
            config = Config(network=network, num_inputs=36, num_outputs=3, prior=prior,
                            gate_prior=gate_prior, kl="analytic", parametrization="log_variance")
            assert isinstance(config.build_prior(), GatedPrior) == (gate_prior is not None)
            backend, why = choose_backend(config.build_plan(), ctx)
            assert (backend == "native") == (type(prior) is NoPrior), why
    config, layout, mu, rho, X, y = problem(ctx, ("dense:5,relu,dense:3", 36), "float64")
    graph = NetworkGraph(config.build_network())
    kl, chosen = kl_estimates.kl_estimate("analytic"), estimators.estimator("sample")
    eps = nd.array(np.random.default_rng(2).normal(size=draw_size(graph, chosen, kl, NoPrior(),
                                                                  X.shape[0])), ctx=ctx,
                   dtype="float64")
    none = combined_loss_gradients(X, y, mu, rho, [eps], NoPrior(), 0.3, graph, chosen, kl)
    own = combined_loss_gradients(X, y, mu, rho, [eps], Shrinking(), 0.3, graph, chosen, kl)
    np.testing.assert_allclose(own[0].asscalar() - none[0].asscalar(),
                               0.3 * 0.5 * (mu.asnumpy() ** 2).sum(), rtol=1e-12)
    np.testing.assert_allclose((own[1] - none[1]).asnumpy(), 0.3 * mu.asnumpy(), rtol=1e-12,
                               atol=1e-15)
    np.testing.assert_array_equal(own[2].asnumpy(), none[2].asnumpy())


USERS_MODULE = '''
from gluon_bbb.family.estimators import WeightSampling
from gluon_bbb.family.parametrizations import Softplus


class Halving(WeightSampling):
    name = "users_halving_sample"

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        return super().draw(graph, X, y, mu, sigma, eps * 0.5, kl)


class Twice(Softplus):
    name = "users_twice_softplus"

    def sigma(self, rho, F=None):
        return 2.0 * super().sigma(rho, F)
'''


@pytest.mark.slow
def test_every_command_reads_a_run_of_the_users_classes_or_names_the_module(tmp_path):
    from commands import EVALUATE, PRUNE, PYTHON, TRAIN, assert_one_line_error, run
    (tmp_path / "users_formulas.py").write_text(USERS_MODULE)
    (tmp_path / "train_it.py").write_text(
        "import sys\nfrom gluon_bbb import Config, load_mnist, train\n"
        "from users_formulas import Halving, Twice\n"
        "train(Config(estimator=Halving(), parametrization=Twice(), epochs=1, train_size=500, "
        "num_hidden_units=10, seed=0), load_mnist(), __import__('mxnet').cpu(), "
        "out_dir=sys.argv[1], log=lambda line: None)\n")
    proc = run([PYTHON, "train_it.py", "run"], cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "run" / "config.json") as f:
        assert __import__("json").load(f)["classes"] == {
            "estimator": "users_formulas:Halving", "parametrization": "users_formulas:Twice"}
    # a command in another directory cannot import the module: one line naming it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run(PRUNE, "--checkpoint", tmp_path / "run", "--proportions", "0", cwd=str(elsewhere))
    assert_one_line_error(proc, "was trained with estimator users_halving_sample, a class of "
                                "the user's own (Halving in module users_formulas)")
    assert "--import users_formulas" in proc.stderr
    # named with --import (or run where Python finds it), every command reads the run
    for cmd, args in ((PRUNE, ["--checkpoint", "run", "--proportions", "0", "0.5"]),
                      (EVALUATE, ["--checkpoint", "run", "--test-samples", "2"]),
                      (TRAIN, ["--out", "run", "--resume", "--epochs", "2",
                               "--test-samples", "0"])):
        proc = run(cmd, *args, "--import", "users_formulas", cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr
    assert_one_line_error(run(PRUNE, "--checkpoint", "run", "--import", "no_such_module",
                              cwd=str(tmp_path)),
                          "--import must be a module Python can import here")

"""The fast training step: the gradient of ``combined_loss`` in a few passes over flat arrays.

``combined_loss`` written with autograd makes about 60 passes over the 478k parameters of a
2x400 net per step (softplus, log q, log P, each per layer, forward and backward). Here the
variational parameters live in two flat vectors ``mu`` and ``rho`` of N entries, autograd runs
only through the network, and the rest of the gradient is written out:

    w = mu + sigma * eps,           sigma = softplus(rho)
    log q(w | mu, sigma) = -log sigma - eps^2 / 2 - log(2 pi) / 2        (per entry)
    g = dL/dw = -d log P(D|w)/dw - kl_weight * d log P(w)/dw
    dL/dmu = g
    dL/drho = (g * eps - kl_weight / sigma) * sigmoid(rho)

which is exactly what autograd of ``combined_loss`` computes (tests/test_step.py checks it).
On a CPU context with the native kernels built, ``fused_bbb_gradients`` does the same in two
C passes over the parameters (``native.py``); ``bbb_gradients`` is the NDArray version, used
on GPUs and for the other estimators.
"""
import math

import numpy as np
from mxnet import autograd, nd, sym

from . import native
from .model import LOG_SQRT_2PI, log_softmax_likelihood


class FlatLayout:
    """Offsets of the arrays ``[W1, b1, ...]`` inside one flat vector of ``size`` entries."""

    def __init__(self, shapes):
        self.shapes = [tuple(s) for s in shapes]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int).tolist()
        self.size = self.offsets[-1]
        self._ones = {}
        self._nll_op = None

    def views(self, flat):
        """Arrays of ``shapes`` that share memory with ``flat`` (no copy)."""
        return [flat[a:b].reshape(shape) for a, b, shape
                in zip(self.offsets[:-1], self.offsets[1:], self.shapes)]

    def flatten(self, arrays):
        """One flat copy of ``arrays`` (on the context of the first)."""
        return nd.concat(*[a.reshape((-1,)) for a in arrays], dim=0)

    def nll_op(self):
        """``nll_graph`` of these shapes, built on first use."""
        if self._nll_op is None:
            self._nll_op = nll_graph(self.shapes)
        return self._nll_op

    def ones(self, ctx, dtype="float32"):
        """A cached (size,) vector of ones: ``nd.dot(x, ones)`` sums x with BLAS, several
        times faster on the CPU than ``nd.sum``, which reduces on one thread."""
        key = (ctx, dtype)
        if key not in self._ones:
            self._ones[key] = nd.ones((self.size,), ctx=ctx, dtype=dtype)
        return self._ones[key]


class GaussianPrior:
    """log N(w | 0, sigma_p^2) summed over w, with its gradient."""

    def __init__(self, sigma_p):
        self.sigma_p = sigma_p

    def log_density_and_grad(self, w, ones):
        """(summed log density (1,), d/dw (N,)) for flat ``w``; ``ones`` like ``w``."""
        scale = 1.0 / self.sigma_p ** 2
        value = nd.dot(w, w) * (-0.5 * scale) - w.size * (LOG_SQRT_2PI + math.log(self.sigma_p))
        return value, w * (-scale)

    def native_args(self):
        """The prior as ``native.kl_gradients`` takes it."""
        return native.GAUSSIAN, 0.0, self.sigma_p, 0.0


class ScaleMixturePrior:
    """log(pi N(w|0, s1^2) + (1-pi) N(w|0, s2^2)) summed over w, in log space, with its gradient."""

    def __init__(self, pi, sigma_p1, sigma_p2):
        if not 0.0 < pi < 1.0:
            raise ValueError("a scale mixture needs 0 < pi < 1 (prior_for turns pi = 0 or 1 "
                             "into its one Gaussian), got %r" % (pi,))
        self.pi, self.sigma_p1, self.sigma_p2 = pi, sigma_p1, sigma_p2

    def log_density_and_grad(self, w, ones):
        k1, k2 = 0.5 / self.sigma_p1 ** 2, 0.5 / self.sigma_p2 ** 2
        w2 = nd.square(w)
        log_first = (math.log(self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p1)) - k1 * w2
        log_second = (math.log1p(-self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p2)) - k2 * w2
        m = nd.maximum(log_first, log_second)
        log_mix = m + nd.log(nd.exp(log_first - m) + nd.exp(log_second - m))
        # each component's share of the density, in [0, 1], computed directly: 1 - first
        # share would lose all float32 precision where it is near 1 (and k2 is large)
        first_share = nd.exp(log_first - log_mix)
        second_share = nd.exp(log_second - log_mix)
        grad = w * (-2.0) * (k1 * first_share + k2 * second_share)
        return nd.dot(log_mix, ones), grad

    def native_args(self):
        """The prior as ``native.kl_gradients`` takes it."""
        return native.SCALE_MIXTURE, self.pi, self.sigma_p1, self.sigma_p2


def prior_for(config):
    """The config's prior; a scale mixture with pi = 1 or 0 is its one remaining Gaussian."""
    if config.prior == "gaussian":
        return GaussianPrior(config.sigma_p)
    if config.pi in (0.0, 1.0):
        return GaussianPrior(config.sigma_p1 if config.pi == 1.0 else config.sigma_p2)
    return ScaleMixturePrior(config.pi, config.sigma_p1, config.sigma_p2)


class NormalSampler:
    """Standard-normal float32 draws, one numbered stream per call, for one ``seed``.

    Streams are Philox4x64-10 + Box-Muller (``native.py``): drawn on the host (the C kernel
    takes 1 ms for 478k draws on 2 cores, against 19 ms for ``nd.random.normal``), they are the
    same on every device and for any number of threads. ``fused_bbb_gradients`` takes its
    streams from ``next_stream`` and draws them in place, so both paths see the same noise.
    """

    def __init__(self, size, ctx, seed=None):
        self.size, self.ctx = size, ctx
        self.key = native.philox_key(seed)
        self.stream = 0

    def next_stream(self):
        """The number of the next unused stream, marked used."""
        self.stream += 1
        return self.stream - 1

    def __call__(self, size=None):
        """(size,) draws of the next stream, an NDArray on ``ctx`` (default size: ``self.size``)."""
        draws = native.normals(self.size if size is None else size, self.key, self.next_stream())
        return nd.array(draws, ctx=self.ctx, dtype="float32")


def softplus_and_sigmoid(rho):
    """(softplus(rho), sigmoid(rho)) sharing one exp: with e = exp(-|rho|),
    softplus = relu(rho) + log1p(e) and sigmoid = (1 if rho > 0 else e) / (1 + e)."""
    positive_part = nd.relu(rho)
    e = nd.exp(rho - 2.0 * positive_part)
    return positive_part + nd.log1p(e), nd.maximum(e, rho > 0) / (1.0 + e)


def analytic_kl_and_grads(mu, sigma, sigma_p, ones):
    """KL(q || N(0, sigma_p^2)) summed over all entries, with d/dmu and d/dsigma (flat)."""
    scale = 1.0 / sigma_p ** 2
    value = (nd.dot(nd.square(sigma) + nd.square(mu), ones) * (0.5 * scale)
             - nd.dot(nd.log(sigma), ones) + mu.size * (math.log(sigma_p) - 0.5))
    return value, mu * scale, sigma * scale - 1.0 / sigma


def lrt_net(X, mus, sigmas, eps):
    """Logits with the local reparametrization trick (Kingma et al. 2015): each layer's
    pre-activations are drawn from N(h mu_W + mu_b, h^2 sigma_W^2 + sigma_b^2) instead of
    drawing weights. ``eps``: flat standard normals, batch * (sum of layer widths) of them."""
    h, offset = X, 0
    num_layers = len(mus) // 2
    for i in range(num_layers):
        mean = nd.broadcast_add(nd.dot(h, mus[2 * i]), mus[2 * i + 1])
        variance = nd.broadcast_add(nd.dot(nd.square(h), nd.square(sigmas[2 * i])),
                                    nd.square(sigmas[2 * i + 1]))
        count = mean.size
        h = mean + nd.sqrt(variance) * eps[offset:offset + count].reshape(mean.shape)
        offset += count
        if i < num_layers - 1:
            h = nd.relu(h)
    return h


def lrt_noise_size(layout, batch_size):
    """How many standard normals one ``lrt_net`` pass over ``batch_size`` examples needs."""
    return batch_size * sum(shape[0] for shape in layout.shapes[1::2])


def bbb_gradients(X, y_one_hot, mu, rho, layout, prior, kl_weight, epsilons,
                  estimator="sample", kl="mc", sigma_p=1.0):
    """Loss of one mini-batch and its gradients with respect to the flat ``mu`` and ``rho``.

    X: (batch, inputs); y_one_hot: (batch, classes); mu, rho: (N,); ``epsilons``: a list of
    standard-normal draws, one per sample (the loss is their average): (N,) for weight
    sampling, ``lrt_noise_size`` for ``estimator="lrt"``, plus (N,) more when ``lrt`` is used
    with ``kl="mc"`` (the KL term needs a weight sample). ``kl="analytic"`` uses the closed
    form KL to N(0, sigma_p^2). Returns ``(loss (1,), grad_mu (N,), grad_rho (N,))``; with the
    defaults they equal autograd of ``combined_loss`` with ``kl_weight`` in place of 1/M.
    """
    sigma, sigmoid_rho = softplus_and_sigmoid(rho)
    ones = layout.ones(mu.context, mu.dtype)
    loss = grad_mu = grad_sigma = None
    for eps in epsilons:
        if estimator == "lrt":
            split = lrt_noise_size(layout, X.shape[0])
            nll, g_mu, g_sigma = _lrt_likelihood_grads(X, y_one_hot, mu, sigma, layout,
                                                       eps[:split])
            eps = eps[split:]
            w = mu + sigma * eps if kl == "mc" else None
        else:
            w = mu + sigma * eps
            nll, g_w = likelihood_grads(X, y_one_hot, w, layout)
        if kl == "mc":
            # sum log q(w) = -sum log sigma - sum eps^2/2 - N log(2 pi)/2 at w = mu + sigma eps;
            # -sum log sigma and its gradient -1/sigma are added once, after the loop
            log_prior, prior_grad = prior.log_density_and_grad(w, ones)
            nll = nll + kl_weight * (-0.5 * nd.dot(eps, eps) - w.size * LOG_SQRT_2PI - log_prior)
            kl_grad_w = prior_grad * (-kl_weight)
            if estimator == "lrt":
                g_mu, g_sigma = g_mu + kl_grad_w, g_sigma + kl_grad_w * eps
            else:
                g_w = g_w + kl_grad_w
        if estimator != "lrt":
            g_mu, g_sigma = g_w, g_w * eps
        loss = nll if loss is None else loss + nll
        grad_mu = g_mu if grad_mu is None else grad_mu + g_mu
        grad_sigma = g_sigma if grad_sigma is None else grad_sigma + g_sigma
    if len(epsilons) > 1:
        loss, grad_mu, grad_sigma = (a / len(epsilons) for a in (loss, grad_mu, grad_sigma))
    if kl == "analytic":
        kl_value, kl_grad_mu, kl_grad_sigma = analytic_kl_and_grads(mu, sigma, sigma_p, ones)
        loss = loss + kl_weight * kl_value
        grad_mu = grad_mu + kl_weight * kl_grad_mu
        grad_sigma = grad_sigma + kl_weight * kl_grad_sigma
    else:
        loss = loss - kl_weight * nd.dot(nd.log(sigma), ones)
        grad_sigma = grad_sigma - kl_weight / sigma
    return loss, grad_mu, grad_sigma * sigmoid_rho


def fused_supported(ctx, estimator="sample", kl="mc"):
    """Whether ``fused_bbb_gradients`` can serve this context and estimator."""
    return (ctx.device_type == "cpu" and estimator == "sample" and kl == "mc"
            and native.available())


class FusedWorkspace:
    """The (N,) float32 arrays a ``fused_bbb_gradients`` step writes, kept on ``ctx`` from step
    to step (eps, w, dNLL/dw, dL/dmu, dL/drho), and per-layer views of w and dNLL/dw."""

    def __init__(self, layout, ctx):
        self.eps, self.w, self.grad_w, self.grad_mu, self.grad_rho = (
            nd.zeros((layout.size,), ctx=ctx, dtype="float32") for _ in range(5))
        self.weights, self.weight_grads = layout.views(self.w), layout.views(self.grad_w)


def fused_bbb_gradients(X, y_one_hot, mu, rho, layout, prior, kl_weight, sampler,
                        num_samples=1, workspace=None):
    """``bbb_gradients`` for weight sampling with the Monte Carlo KL, on a CPU context, with
    the parameter-side work in two native passes: draw eps and w = mu + sigma * eps, run the
    network, then log q - log P and the gradients. The noise is ``num_samples`` streams of
    ``sampler``, the same ones ``bbb_gradients(..., [sampler() ...])`` would get.
    Returns ``(loss (1,), grad_mu (N,), grad_rho (N,))``; the gradients live in ``workspace``
    (a ``FusedWorkspace``, made here if not given) and are overwritten by its next step.
    """
    ws = FusedWorkspace(layout, mu.context) if workspace is None else workspace
    loss = grad_mu = grad_rho = None
    for sample in range(num_samples):
        native.sample_weights(mu, rho, sampler.key, sampler.next_stream(), ws.eps, ws.w)
        nll = _nll_backward(X, y_one_hot, layout, ws.weights, ws.weight_grads)
        kl = native.kl_gradients(rho, ws.eps, ws.w, ws.grad_w, kl_weight, prior.native_args(),
                                 ws.grad_mu, ws.grad_rho)
        sample_loss = nll + kl_weight * kl
        if num_samples == 1:
            return sample_loss, ws.grad_mu, ws.grad_rho
        if sample == 0:
            loss, grad_mu, grad_rho = sample_loss, ws.grad_mu.copy(), ws.grad_rho.copy()
        else:
            loss = loss + sample_loss
            grad_mu, grad_rho = grad_mu + ws.grad_mu, grad_rho + ws.grad_rho
    return loss / num_samples, grad_mu / num_samples, grad_rho / num_samples


def nll_graph(shapes):
    """-sum log P(y | X, w) of ``model.net`` as one ``CachedOp``, called as
    ``op(y_one_hot, X, W1, b1, W2, b2, ...)`` and returning (1,). It uses MXNet's
    ``FullyConnected`` (oneDNN on the CPU) on transposed weights, and runs as one graph with
    static memory: together 1.5 times faster than the same layers as imperative ``nd.dot``."""
    names = ["w%d" % i for i in range(len(shapes))]
    h = sym.var("X")
    num_layers = len(shapes) // 2
    for i in range(num_layers):
        W, b = sym.var(names[2 * i]), sym.var(names[2 * i + 1])
        h = sym.FullyConnected(h, sym.transpose(W), b, num_hidden=shapes[2 * i][1])
        if i < num_layers - 1:
            h = sym.relu(h)
    nll = -sym.sum(sym.var("y") * sym.log_softmax(h, axis=1))
    order = nll.list_inputs()
    if order != ["y", "X"] + names:
        raise AssertionError("unexpected graph input order %s" % order)
    return nd.CachedOp(nll, flags=[("static_alloc", True), ("static_shape", True)])


def likelihood_grads(X, y_one_hot, w, layout):
    """-sum log P(y | X, w) (1,) and its gradient with respect to the flat weights ``w`` (N,).
    X: (batch, inputs); y_one_hot: (batch, classes)."""
    grad_w = nd.zeros_like(w)
    return _nll_backward(X, y_one_hot, layout, layout.views(w), layout.views(grad_w)), grad_w


def _nll_backward(X, y_one_hot, layout, weights, weight_grads):
    """-sum log P(y | X, w) (1,) for per-layer ``weights``; backward writes each layer's
    gradient into ``weight_grads`` (views of one flat array)."""
    autograd.mark_variables(weights, weight_grads)
    with autograd.record():
        nll = layout.nll_op()(y_one_hot, X, *weights)
    nll.backward()
    return nll.detach()


def _lrt_likelihood_grads(X, y_one_hot, mu, sigma, layout, eps):
    """-sum log P(y | X) under the local reparametrization, and its d/dmu and d/dsigma."""
    grad_mu, grad_sigma = nd.zeros_like(mu), nd.zeros_like(sigma)
    mus, sigmas = layout.views(mu), layout.views(sigma)
    autograd.mark_variables(mus + sigmas, layout.views(grad_mu) + layout.views(grad_sigma))
    with autograd.record():
        nll = -nd.sum(log_softmax_likelihood(lrt_net(X, mus, sigmas, eps), y_one_hot))
    nll.backward()
    return nll.detach(), grad_mu, grad_sigma

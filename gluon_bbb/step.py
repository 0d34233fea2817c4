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
"""
import math

import numpy as np
from mxnet import autograd, nd

from .model import LOG_SQRT_2PI, log_softmax_likelihood, net


class FlatLayout:
    """Offsets of the arrays ``[W1, b1, ...]`` inside one flat vector of ``size`` entries."""

    def __init__(self, shapes):
        self.shapes = [tuple(s) for s in shapes]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int).tolist()
        self.size = self.offsets[-1]
        self._ones = {}

    def views(self, flat):
        """Arrays of ``shapes`` that share memory with ``flat`` (no copy)."""
        return [flat[a:b].reshape(shape) for a, b, shape
                in zip(self.offsets[:-1], self.offsets[1:], self.shapes)]

    def flatten(self, arrays):
        """One flat copy of ``arrays`` (on the context of the first)."""
        return nd.concat(*[a.reshape((-1,)) for a in arrays], dim=0)

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


class ScaleMixturePrior:
    """log(pi N(w|0, s1^2) + (1-pi) N(w|0, s2^2)) summed over w, in log space, with its gradient."""

    def __init__(self, pi, sigma_p1, sigma_p2):
        self.pi, self.sigma_p1, self.sigma_p2 = pi, sigma_p1, sigma_p2

    def log_density_and_grad(self, w, ones):
        if self.pi in (0.0, 1.0):
            return GaussianPrior(self.sigma_p1 if self.pi == 1.0 else self.sigma_p2) \
                .log_density_and_grad(w, ones)
        k1, k2 = 0.5 / self.sigma_p1 ** 2, 0.5 / self.sigma_p2 ** 2
        w2 = nd.square(w)
        log_first = (math.log(self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p1)) - k1 * w2
        log_second = (math.log1p(-self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p2)) - k2 * w2
        m = nd.maximum(log_first, log_second)
        log_mix = m + nd.log(nd.exp(log_first - m) + nd.exp(log_second - m))
        first_share = nd.exp(log_first - log_mix)  # posterior weight of component 1, in [0, 1]
        grad = w * (-2.0) * (k2 + (k1 - k2) * first_share)
        return nd.dot(log_mix, ones), grad


def prior_for(config):
    if config.prior == "gaussian":
        return GaussianPrior(config.sigma_p)
    return ScaleMixturePrior(config.pi, config.sigma_p1, config.sigma_p2)


class NormalSampler:
    """Standard-normal (size,) float32 vectors drawn on the host with NumPy, copied to ``ctx``.

    NumPy's ziggurat sampler is about four times faster than ``nd.random.normal`` on the CPU
    (5 ms against 19 ms for 478k draws here), and a seeded sampler gives the same draws on
    every device. (Drawing ahead in a background thread was measured and did not pay on 2 cores.)
    """

    def __init__(self, size, ctx, seed=None):
        self.size, self.ctx = size, ctx
        self.rng = np.random.default_rng(seed)

    def __call__(self, size=None):
        draws = self.rng.standard_normal(self.size if size is None else size, dtype=np.float32)
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


def likelihood_grads(X, y_one_hot, w, layout):
    """-sum log P(y | X, w) and its gradient with respect to the flat weights ``w``."""
    grad_w = nd.zeros_like(w)
    weights = layout.views(w)
    # backward writes dL/dw of every layer straight into the flat grad_w
    autograd.mark_variables(weights, layout.views(grad_w))
    with autograd.record():
        nll = -nd.sum(log_softmax_likelihood(net(X, weights), y_one_hot))
    nll.backward()
    return nll.detach(), grad_w


def _lrt_likelihood_grads(X, y_one_hot, mu, sigma, layout, eps):
    """-sum log P(y | X) under the local reparametrization, and its d/dmu and d/dsigma."""
    grad_mu, grad_sigma = nd.zeros_like(mu), nd.zeros_like(sigma)
    mus, sigmas = layout.views(mu), layout.views(sigma)
    autograd.mark_variables(mus + sigmas, layout.views(grad_mu) + layout.views(grad_sigma))
    with autograd.record():
        nll = -nd.sum(log_softmax_likelihood(lrt_net(X, mus, sigmas, eps), y_one_hot))
    nll.backward()
    return nll.detach(), grad_mu, grad_sigma

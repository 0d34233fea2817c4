"""The functional Bayes-by-Backprop core, step by step as in the tutorial, with no globals.

Every function takes NDArrays and works on their context; parameters are plain lists
``[W1, b1, W2, b2, ...]`` with ``W`` of shape (inputs, outputs) and ``b`` of shape (outputs,).
"""
import math

import numpy as np
from mxnet import nd

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def layer_param_shapes(num_inputs=784, num_hidden=400, num_layers=2, num_outputs=10):
    """Shapes ``[W1 (in, hidden), b1 (hidden,), ..., W_out (hidden, out), b_out (out,)]``.

    ``num_layers`` is the number of hidden layers (0 gives a linear softmax model).
    """
    sizes = [num_inputs] + [num_hidden] * num_layers + [num_outputs]
    shapes = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        shapes += [(fan_in, fan_out), (fan_out,)]
    return shapes


def init_variational_params(shapes, ctx, mu_scale=0.1, rho_offset=-3.0, seed=None):
    """Initial ``(mus, rhos)``: mu ~ N(0, mu_scale^2), rho = rho_offset, one array per shape.

    Drawn with NumPy so that a given ``seed`` gives the same start on every device.
    Gradients are attached, ready for ``autograd.record()``.
    """
    rng = np.random.default_rng(seed)
    mus = [nd.array(rng.normal(0.0, mu_scale, size=shape), ctx=ctx, dtype="float32")
           for shape in shapes]
    rhos = [nd.full(shape, rho_offset, ctx=ctx, dtype="float32") for shape in shapes]
    for param in mus + rhos:
        param.attach_grad()
    return mus, rhos


def sample_epsilons(param_shapes, ctx):
    """One standard-normal NDArray per shape, on ``ctx``."""
    return [nd.random.normal(shape=shape, ctx=ctx, dtype="float32") for shape in param_shapes]


def softplus(x):
    """log(1 + exp(x)) elementwise, stable for any finite x (no overflow, exact tails).

    Written as relu(x) + log1p(exp(x - 2 relu(x))), i.e. relu(x) + log1p(exp(-|x|)),
    whose gradient is sigmoid(x) everywhere, 0.5 at x = 0 included. MXNet's float32
    ``softrelu`` is not used: its oneDNN kernel returns -1.9e-6 at x = -20.
    """
    positive_part = nd.relu(x)
    return positive_part + nd.log1p(nd.exp(x - 2.0 * positive_part))


def transform_rhos(rhos):
    """Standard deviations ``sigma = softplus(rho)`` (always > 0) for each rho array."""
    return [softplus(rho) for rho in rhos]


def transform_gaussian_samples(mus, sigmas, epsilons):
    """Reparametrized weights ``w = mu + sigma * eps``, one array per parameter."""
    return [mu + sigma * eps for mu, sigma, eps in zip(mus, sigmas, epsilons)]


def net(X, layer_params):
    """Logits of the MLP: ReLU hidden layers, linear output.

    X: (batch, num_inputs) float32; returns (batch, num_outputs).
    """
    num_layers = len(layer_params) // 2
    h = X
    for i in range(num_layers):
        W, b = layer_params[2 * i], layer_params[2 * i + 1]
        h = nd.broadcast_add(nd.dot(h, W), b)
        if i < num_layers - 1:
            h = nd.relu(h)
    return h


def log_gaussian(x, mu, sigma):
    """Elementwise log N(x | mu, sigma^2); mu and sigma broadcast against x."""
    return -LOG_SQRT_2PI - nd.log(sigma) - (x - mu) ** 2 / (2.0 * sigma ** 2)


def gaussian_prior(x, sigma_p=1.0):
    """Summed log density of N(0, sigma_p^2) over all elements of x; shape (1,)."""
    constant = -x.size * (LOG_SQRT_2PI + math.log(sigma_p))
    return nd.sum(nd.square(x)) * (-0.5 / sigma_p ** 2) + constant


def scale_mixture_prior(x, pi=0.25, sigma_p1=0.75, sigma_p2=0.1):
    """Summed log density of pi N(0, sigma_p1^2) + (1 - pi) N(0, sigma_p2^2) over x; shape (1,).

    Computed in log space, m + log(exp(a - m) + exp(b - m)) with a, b the log densities of
    the weighted components and m = max(a, b): finite for any finite x, where the tutorial's
    log(pi N1 + (1-pi) N2) gives log(0) once both densities underflow (|x| ~ 15).
    m is detached: the expression's derivative with respect to m is identically zero.
    """
    if pi == 0.0:
        return gaussian_prior(x, sigma_p2)
    if pi == 1.0:
        return gaussian_prior(x, sigma_p1)
    x2 = nd.square(x)
    # log(w_k N(x | 0, s_k^2)) = c_k - x^2 / (2 s_k^2)
    log_first = (math.log(pi) - LOG_SQRT_2PI - math.log(sigma_p1)) - (0.5 / sigma_p1 ** 2) * x2
    log_second = (math.log1p(-pi) - LOG_SQRT_2PI - math.log(sigma_p2)) - (0.5 / sigma_p2 ** 2) * x2
    m = nd.maximum(log_first, log_second).detach()
    return nd.sum(m + nd.log(nd.exp(log_first - m) + nd.exp(log_second - m)))


def log_softmax_likelihood(yhat_linear, y_one_hot):
    """Per-example log p(y | x, w) from logits (batch, classes) and one-hot labels; (batch,)."""
    return nd.sum(y_one_hot * nd.log_softmax(yhat_linear, axis=1), axis=1)


def combined_loss(output, label_one_hot, params, mus, sigmas, log_prior, log_likelihood,
                  num_batches, kl_weight=None):
    """Mini-batch loss (1/M)(sum log q(w|mu,sigma) - sum log P(w)) - sum_i log P(y_i|x_i,w).

    ``log_prior`` maps one weight NDArray to its summed log density; ``log_likelihood``
    maps (logits, one-hot labels) to per-example log-likelihoods. ``num_batches`` is M;
    ``kl_weight``, if given, replaces 1/M (the paper's section 3.4 weighting). Shape (1,).
    """
    weight = 1.0 / num_batches if kl_weight is None else kl_weight
    log_likelihood_sum = nd.sum(log_likelihood(output, label_one_hot))
    log_prior_sum = nd.add_n(*[log_prior(w) for w in params])
    log_posterior_sum = nd.add_n(*[nd.sum(log_gaussian(w, mu, sigma))
                                   for w, mu, sigma in zip(params, mus, sigmas)])
    return weight * (log_posterior_sum - log_prior_sum) - log_likelihood_sum


def evaluate_accuracy(data, labels, layer_params, batch_size=1000):
    """Fraction of ``data`` (N, num_inputs) whose argmax logit equals ``labels`` (N,).

    Runs on the context of ``layer_params``; data and labels may be NumPy arrays or
    NDArrays on any context. Returns a Python float in [0, 1].
    """
    ctx = layer_params[0].context
    num_examples = data.shape[0]
    if num_examples == 0:
        raise ValueError("evaluate_accuracy needs at least one example")
    correct = nd.zeros((1,), ctx=ctx)
    for start in range(0, num_examples, batch_size):
        X = _as_nd(data[start:start + batch_size], ctx)
        y = _as_nd(labels[start:start + batch_size], ctx)
        predictions = nd.argmax(net(X, layer_params), axis=1)
        correct += nd.sum(predictions == y.astype("float32"))
    return float(correct.asscalar()) / num_examples


def _as_nd(array, ctx):
    if isinstance(array, nd.NDArray):
        return array.as_in_context(ctx)
    return nd.array(array, ctx=ctx, dtype=array.dtype if array.dtype != np.float64 else "float32")

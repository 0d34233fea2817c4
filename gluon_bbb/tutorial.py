"""The Bayes-by-Backprop model, step by step as in the tutorial."""
import numpy as np
from mxnet import nd

# the tutorial's names, from the modules that own them
from .family.elementwise import (LOG_SQRT_2PI, LRT_VARIANCE_FLOOR, SOFTPLUS_FLOOR,  # noqa: F401
                          log_gaussian, sigmoid, softplus, total)
from .family.likelihoods import gaussian_log_likelihood, log_softmax_likelihood  # noqa: F401
from .networks.layers import flipout_parts, lrt_parts
from .networks.network import mlp, mlp_of
from .family.priors import (GaussianPrior, ScaleMixturePrior, gaussian_prior,  # noqa: F401
                            scale_mixture_prior)
from .errors import require_positive, require_real, require_whole


# each function checks its arguments by the numbers' rules (errors.py) and names the wrong one
# in a one-line ValueError

def _check_lengths(**lists):
    """ValueError unless the lists (one array per parameter) have one length."""
    lengths = {name: len(value) for name, value in lists.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError("%s must hold one array per parameter each, got %s" % (
            ", ".join(lengths), ", ".join("%d %s" % (n, name) for name, n in lengths.items())))


def _check_sigmas(sigmas, zero_allowed=False, name="sigmas"):
    """ValueError unless every NDArray of ``sigmas`` holds finite values > 0 (>= 0 where
    ``zero_allowed``: a weight taken out of the network draws no noise), with one read of
    their smallest and largest values; symbols, in a hybridized block, are not read."""
    arrays = [sigma for sigma in sigmas if isinstance(sigma, nd.NDArray)]
    if not arrays:
        return
    from mxnet import autograd
    with autograd.pause():
        bounds = nd.concat(*[nd.concat(nd.min(a), nd.max(a), dim=0) for a in arrays],
                           dim=0).asnumpy()
    for i in range(len(arrays)):
        low, high = bounds[2 * i:2 * i + 2]
        if not ((low >= 0 if zero_allowed else low > 0) and np.isfinite(high)):
            raise ValueError("%s must be finite standard deviations %s (sigma = "
                             "transform_rhos(rho)); %s[%d] holds %s" % (
                                 name, ">= 0" if zero_allowed else "> 0", name, i,
                                 "NaN" if np.isnan(low) or np.isnan(high)
                                 else "%g" % (high if np.isinf(high) else low)))


def layer_param_shapes(num_inputs=784, num_hidden=400, num_layers=2, num_outputs=10):
    """Shapes ``[W1 (hidden, in), b1 (hidden,), ..., W_out (out, hidden), b_out (out,)]``."""
    return mlp(require_whole("num_inputs", num_inputs, 1),
               require_whole("num_hidden", num_hidden, 1),
               require_whole("num_layers", num_layers, 0),
               require_whole("num_outputs", num_outputs, 1)).param_shapes()


def init_variational_params(shapes, ctx, mu_scale=0.1, rho_offset=-3.0, seed=None):
    """Initial ``(mus, rhos)``: mu ~ N(0, mu_scale^2), rho = rho_offset, one array per shape."""
    mu_scale = require_positive("mu_scale", mu_scale)
    rho_offset = require_real("rho_offset", rho_offset)
    if seed is not None:
        seed = require_whole("seed", seed, 0)
    rng = np.random.default_rng(seed)
    mus = [nd.array(rng.normal(0.0, mu_scale, size=shape), ctx=ctx, dtype="float32")
           for shape in shapes]
    rhos = [nd.full(shape, rho_offset, ctx=ctx, dtype="float32") for shape in shapes]
    for param in mus + rhos:
        param.attach_grad()
    return mus, rhos


def sample_epsilons(param_shapes, ctx=None, noise=None):
    """One standard-normal NDArray per shape, on ``ctx`` (default: MXNet's current context, as
    the tutorial's call without one has it): from ``noise`` (a source of ``learning/noise.py``,
    seeded per run) if given, else from MXNet's sampler, as in the tutorial. A shape is of whole
    numbers >= 1, at most ``MAX_DRAW`` entries (MXNet's samplers' bound)."""
    for shape in param_shapes:
        size = 1
        for side in shape:
            size *= require_whole("param_shapes", side, 1, MAX_DRAW)
        if size > MAX_DRAW or not len(shape):
            raise ValueError("param_shapes must be shapes of 1 to %d entries (MXNet's "
                             "samplers' bound), got %s" % (MAX_DRAW, tuple(shape)))
    if noise is not None:
        return [noise.normal(tuple(shape)) for shape in param_shapes]
    return [nd.random.normal(shape=tuple(shape), ctx=ctx, dtype="float32")
            for shape in param_shapes]


# the most entries one draw of MXNet's samplers takes (2^31 - 2)
MAX_DRAW = 2 ** 31 - 2


def transform_rhos(rhos, F=nd):
    """Standard deviations ``sigma = softplus(rho)`` (always > 0) for each rho array."""
    return [softplus(rho, F) for rho in rhos]


def transform_gaussian_samples(mus, sigmas, epsilons):
    """Reparametrized weights ``w = mu + sigma * eps``, one array per parameter."""
    _check_lengths(mus=mus, sigmas=sigmas, epsilons=epsilons)
    _check_sigmas(sigmas, zero_allowed=True)
    return [mu + sigma * eps for mu, sigma, eps in zip(mus, sigmas, epsilons)]


def net(X, layer_params, F=None, network=None):
    """Logits of the network: by default the MLP the parameters shape (ReLU hidden layers,
    linear output), else ``network`` (a ``networks.network.Network``); X (batch, inputs)."""
    if network is None and _inputs_first(layer_params):
        layer_params = [nd.transpose(p) if i % 2 == 0 else p for i, p in enumerate(layer_params)]
    return (network or mlp_of(layer_params))(X, layer_params, F)


def _inputs_first(layer_params):
    """Whether NDArray weights ``[W1, b1, ...]`` are shaped (inputs, outputs), the tutorial's
    ``nd.dot(X, W)`` layout: W1's columns, not its rows, match b1."""
    W, b = layer_params[0], layer_params[1] if len(layer_params) > 1 else None
    return (isinstance(W, nd.NDArray) and isinstance(b, nd.NDArray) and W.ndim == 2
            and b.ndim == 1 and W.shape[1] == b.shape[0] != W.shape[0])


def lrt_net(X, mus, sigmas, noise, F=nd, network=None):
    """Logits with the local reparametrization trick (Kingma et al. 2015): each dense or
    convolution layer's pre-activations are drawn from their Gaussian, mean ``layer(h, mu_W,
    mu_b)`` and variance ``layer(h^2, sigma_W^2, sigma_b^2)`` (plus ``LRT_VARIANCE_FLOOR``),
    instead of drawing weights; each gate (``networks.layers.Gate``) is drawn per example,
    ``h * (mu + sigma * eps)``."""
    return (network or mlp_of(mus)).noisy_run(X, lrt_parts, mus, sigmas, noise, F)


def flipout_net(X, mus, deltas, noise, F=nd, network=None):
    """Logits with Flipout (Wen et al. 2018): one weight perturbation ``deltas`` (sigma * eps)
    for the mini-batch, made example by example independent by random signs: a dense or
    convolution layer gives ``layer(h, mu) + layer(h * s, delta) * r`` with s and r of +-1
    over its input and output units (channels: the same sign at every position), a gate
    ``h * (mu + delta * r)``."""
    return (network or mlp_of(mus)).noisy_run(X, flipout_parts, mus, deltas, noise, F)


def combined_loss(output, label_one_hot, params, mus, sigmas, log_prior, log_likelihood,
                  num_batches, kl_weight=None):
    """Mini-batch loss (1/M)(sum log q(w|mu,sigma) - sum log P(w)) - sum_i log P(y_i|x_i,w)."""
    _check_lengths(params=params, mus=mus, sigmas=sigmas)
    # M is any positive number: the tutorial's own is num_train / batch_size, a float
    num_batches = require_positive("num_batches", num_batches)
    if kl_weight is not None:
        kl_weight = require_real("kl_weight", kl_weight, 0.0)
    _check_sigmas(sigmas)
    weight = 1.0 / num_batches if kl_weight is None else kl_weight
    log_likelihood_sum = nd.sum(log_likelihood(output, label_one_hot))
    return weight * sampled_kl(params, mus, sigmas, log_prior) - log_likelihood_sum


def sampled_kl(params, mus, sigmas, log_prior):
    """The Monte Carlo KL of one draw ``params`` of the weights: sum log q(w | mu, sigma) -
    sum log P(w), shape (1,)."""
    log_prior_sum = nd.add_n(*[log_prior(w) for w in params])
    log_posterior_sum = nd.add_n(*[nd.sum(log_gaussian(w, mu, sigma))
                                   for w, mu, sigma in zip(params, mus, sigmas)])
    return log_posterior_sum - log_prior_sum


def evaluate_accuracy(data, labels, layer_params, batch_size=1000, network=None):
    """Fraction of ``data`` (N, num_inputs) whose argmax logit equals ``labels`` (N,), for
    ``net`` with ``layer_params`` (and ``network``, default the MLP they shape; with every unit
    kept where it has dropout)."""
    if callable(labels):
        return _tutorial_accuracy(data, labels, layer_params)
    correct = sum(nd.sum(nd.argmax(output, axis=1) == y)
                  for output, y in _batched_outputs(data, labels, layer_params, batch_size,
                                                    network))
    return float(correct.asscalar()) / data.shape[0]


def evaluate_nll(data, labels, layer_params, batch_size=1000, network=None):
    """Mean negative log-likelihood (nats) of ``labels`` under the softmax of ``net``'s
    outputs, for ``data`` and ``layer_params`` as ``evaluate_accuracy`` takes them."""
    nll_sum = sum(-nd.sum(nd.pick(nd.log_softmax(output, axis=1), y, axis=1))
                  for output, y in _batched_outputs(data, labels, layer_params, batch_size,
                                                    network))
    return float(nll_sum.asscalar()) / data.shape[0]


def _tutorial_accuracy(data_iterator, net_function, layer_params):
    ctx = layer_params[0].context
    correct = total_seen = 0
    for images, labels in data_iterator:
        images = as_nd(images, ctx)
        output = net_function(images.reshape((images.shape[0], -1)), layer_params)
        correct += float(nd.sum(nd.argmax(output, axis=1) == as_nd(labels, ctx).astype(
            "float32")).asscalar())
        total_seen += images.shape[0]
    if not total_seen:
        raise ValueError("evaluating a network needs at least one example")
    return correct / total_seen


def _batched_outputs(data, labels, layer_params, batch_size, network):
    """(outputs, labels as float32) of ``net`` batch by batch, on the parameters' context."""
    ctx = layer_params[0].context
    batch_size = require_whole("batch_size", batch_size, 1)
    if data.shape[0] == 0:
        raise ValueError("evaluating a network needs at least one example")
    if labels.shape[0] != data.shape[0]:
        raise ValueError("%d examples with %d labels: one label each" % (data.shape[0],
                                                                         labels.shape[0]))
    outputs = (network or mlp_of(layer_params)).num_outputs
    _check_values("data", data, lambda values: np.isfinite(values).all(),
                  "finite numbers (these hold NaN or infinity)")
    _check_values("labels", labels, lambda values: ((values == np.round(values))
                                                    & (values >= 0) & (values < outputs)).all(),
                  "whole numbers from 0 to %d, one of the network's %d outputs"
                  % (outputs - 1, outputs))
    network = network.without_dropout() if network is not None else None
    for start in range(0, data.shape[0], batch_size):
        X = as_nd(data[start:start + batch_size], ctx)
        y = as_nd(labels[start:start + batch_size], ctx).astype("float32")
        yield net(X, layer_params, network=network), y


def _check_values(name, array, holds, words):
    """ValueError unless ``holds`` the values of ``array`` (NumPy or NDArray), read once."""
    values = array.asnumpy() if isinstance(array, nd.NDArray) else np.asarray(array)
    if not (np.issubdtype(values.dtype, np.number) and holds(values)):
        raise ValueError("%s must be %s" % (name, words))


def as_nd(array, ctx):
    """``array`` (NumPy or NDArray) as an NDArray on ``ctx``; float64 NumPy becomes float32."""
    if isinstance(array, nd.NDArray):
        return array.as_in_context(ctx)
    return nd.array(array, ctx=ctx, dtype=array.dtype if array.dtype != np.float64 else "float32")

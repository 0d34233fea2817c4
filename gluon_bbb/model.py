"""The Bayes-by-Backprop model, step by step as in the tutorial, and the NDArray backend of the
training step, which is built from the same functions.

The tutorial's functions: ``sample_epsilons``, ``transform_rhos`` (softplus),
``transform_gaussian_samples`` (w = mu + sigma * eps), ``net``, the priors, ``log_gaussian``,
the likelihoods (``log_softmax_likelihood``, ``gaussian_log_likelihood``: ``likelihood.py``) and
``combined_loss``, the mini-batch loss

    (1/M) (sum log q(w | mu, sigma) - sum log P(w)) - sum_i log P(y_i | x_i, w).

Parameters are plain lists ``[W1, b1, W2, b2, ...]`` with ``W`` of shape (outputs, inputs), the
layout of MXNet's ``FullyConnected`` and Gluon's ``Dense``, and ``b`` of shape (outputs,). Every
function works on the context of its inputs; nothing reads a global. The MLP is the tutorial's
network; ``net`` and the functions built on it take any network described in ``network.py``
(a convolutional one too) through their ``network`` argument.

``combined_loss_gradients`` is the training step's NDArray backend: the same loss on flat
parameter vectors, averaged over weight samples, with its gradient written out next to it
(autograd runs through ``net`` alone, as one ``CachedOp`` graph built from ``net`` itself by
``NetworkGraph``). Tests check it against autograd of ``combined_loss``.
"""
import collections
import math

import numpy as np
from mxnet import autograd, nd, sym

from .likelihood import Categorical, gaussian_log_likelihood, log_softmax_likelihood  # noqa: F401
from .network import Network, mlp, mlp_of, rows_of

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# rho is floored here in softplus and sigmoid, as in the C kernels (_fused.c): sigma bottoms
# out at softplus(-80) = 1.8e-35, so log sigma and 1/sigma stay finite for any rho
SOFTPLUS_FLOOR = -80.0


def layer_param_shapes(num_inputs=784, num_hidden=400, num_layers=2, num_outputs=10):
    """Shapes ``[W1 (hidden, in), b1 (hidden,), ..., W_out (out, hidden), b_out (out,)]``.

    ``num_layers`` is the number of hidden layers (0 gives a linear softmax model): the shapes
    of ``network.mlp``.
    """
    return mlp(num_inputs, num_hidden, num_layers, num_outputs).param_shapes()


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


def sample_epsilons(param_shapes, ctx, noise=None):
    """One standard-normal NDArray per shape, on ``ctx``: from ``noise`` (a source of
    ``noise.py``, seeded per run) if given, else from MXNet's sampler, as in the tutorial."""
    if noise is not None:
        return [noise.normal(shape) for shape in param_shapes]
    return [nd.random.normal(shape=shape, ctx=ctx, dtype="float32") for shape in param_shapes]


def softplus(x, F=nd):
    """log(1 + exp(x)) elementwise, with x floored at ``SOFTPLUS_FLOOR`` as in the C kernels:
    relu(x) - log1p(-sigmoid(-|x|)), exact in both tails, no overflow for large x. ``F=sym``
    builds the same in a graph (the Gluon blocks' forward).

    -|x| is written x - 2 relu(x) so that autograd's gradient is sigmoid(x) everywhere, 0.5 at
    x = 0 included. exp(-|x|) comes from ``sigmoid``, whose CPU kernel is vectorised, where
    ``nd.exp`` is not. MXNet's float32 ``softrelu`` is not used: it returns -1.9e-6 at x = -20.
    """
    x = F.maximum(x, SOFTPLUS_FLOOR)
    positive_part = F.relu(x)
    return positive_part - F.log1p(-sigmoid(x - 2.0 * positive_part, F))


def sigmoid(x, F=nd):
    """1 / (1 + exp(-x)) elementwise, the derivative of ``softplus``. ``Activation`` runs
    oneDNN's vectorised kernel on the CPU: 0.3 ms for 478k floats here against 2.5 ms for
    ``nd.sigmoid``, within 2.5e-7 relative of float64 (float64 inputs take MXNet's own)."""
    return F.Activation(x, act_type="sigmoid")


def transform_rhos(rhos, F=nd):
    """Standard deviations ``sigma = softplus(rho)`` (always > 0) for each rho array."""
    return [softplus(rho, F) for rho in rhos]


def prediction_sigmas(model, rhos):
    """The standard deviations a ``model`` draws its weights with at prediction: softplus(rho)
    for Bayes by Backprop; None for Monte Carlo dropout and the MLP, which keep their mean
    weights (the first drawing dropout masks instead)."""
    return transform_rhos(rhos) if model == "bbb" else None


def transform_gaussian_samples(mus, sigmas, epsilons):
    """Reparametrized weights ``w = mu + sigma * eps``, one array per parameter."""
    return [mu + sigma * eps for mu, sigma, eps in zip(mus, sigmas, epsilons)]


def net(X, layer_params, F=nd, network=None):
    """Logits of the network: by default the MLP the parameters shape (ReLU hidden layers,
    linear output), else ``network`` (a ``network.Network``); X (batch, inputs).

    With ``F=mx.sym`` and symbols for X and the parameters it builds the same network as a
    graph (``NetworkGraph`` trains with it).
    """
    return (network or mlp_of(layer_params))(X, layer_params, F)


def lrt_net(X, mus, sigmas, noise, F=nd):
    """Logits with the local reparametrization trick (Kingma et al. 2015): each layer's
    pre-activations are drawn as h mu_W + mu_b + sqrt(h^2 sigma_W^2 + sigma_b^2) * noise
    instead of drawing weights; ``noise``: one standard-normal (batch, width) array per layer.
    """
    num_layers = len(mus) // 2
    h = X
    for i in range(num_layers):
        width = rows_of(mus[2 * i])
        mean = F.FullyConnected(h, mus[2 * i], mus[2 * i + 1], num_hidden=width)
        variance = F.FullyConnected(F.square(h), F.square(sigmas[2 * i]),
                                    F.square(sigmas[2 * i + 1]), num_hidden=width)
        h = mean + F.sqrt(variance) * noise[i]
        if i < num_layers - 1:
            h = F.relu(h)
    return h


def total(x):
    """The sum of all entries of ``x``, shape (1,), as a BLAS dot with ones: on the CPU 30 times
    faster than ``nd.sum``, which reduces on one thread (3 ms for 478k entries on 2 cores)."""
    flat = x.reshape((-1,))
    return nd.dot(flat, nd.ones_like(flat))


def log_gaussian(x, mu, sigma):
    """Elementwise log N(x | mu, sigma^2); mu and sigma broadcast against x."""
    return -LOG_SQRT_2PI - nd.log(sigma) - (x - mu) ** 2 / (2.0 * sigma ** 2)


class GaussianPrior:
    """P(w) = N(w | 0, sigma_p^2) for every weight. Called on an array: the summed log density,
    shape (1,), as ``combined_loss`` takes a log prior."""

    def __init__(self, sigma_p=1.0):
        self.sigma_p = sigma_p

    def __call__(self, x):
        flat = x.reshape((-1,))
        return (nd.dot(flat, flat) * (-0.5 / self.sigma_p ** 2)
                - x.size * (LOG_SQRT_2PI + math.log(self.sigma_p)))

    def log_density_and_gradient(self, x):
        """(the summed log density (1,), elementwise d log P / dx)."""
        return self(x), x * (-1.0 / self.sigma_p ** 2)


class ScaleMixturePrior:
    """P(w) = pi N(w | 0, sigma_p1^2) + (1 - pi) N(w | 0, sigma_p2^2), 0 < pi < 1.

    With a, b the log densities of the two weighted components and m = max(a, b),
    log P = m + softplus(min(a, b) - m): finite for any finite x (``softplus`` is stable in
    both tails), where the tutorial's log(pi N1 + (1-pi) N2) gives log(0) once both densities
    underflow (|x| ~ 15). The first component's share of the density is sigmoid(a - b).
    """

    def __init__(self, pi=0.25, sigma_p1=0.75, sigma_p2=0.1):
        if not 0.0 < pi < 1.0:
            raise ValueError("a scale mixture needs 0 < pi < 1 (prior_for turns pi = 0 or 1 "
                             "into its one Gaussian), got %r" % (pi,))
        self.pi, self.sigma_p1, self.sigma_p2 = pi, sigma_p1, sigma_p2

    def __call__(self, x):
        return self.log_density_and_gradient(x, gradient=False)[0]

    def log_density_and_gradient(self, x, gradient=True):
        """(the summed log density (1,), elementwise d log P / dx or None), where
        d log P / dx = -x (share1 / s1^2 + share2 / s2^2)."""
        x2 = nd.square(x)
        k1, k2 = 0.5 / self.sigma_p1 ** 2, 0.5 / self.sigma_p2 ** 2
        log_first = (math.log(self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p1)) - k1 * x2
        log_second = (math.log1p(-self.pi) - LOG_SQRT_2PI - math.log(self.sigma_p2)) - k2 * x2
        larger = nd.maximum(log_first, log_second)
        log_density = total(larger + softplus(nd.minimum(log_first, log_second) - larger))
        if not gradient:
            return log_density, None
        # a - b from x^2 directly (not as a difference of two large numbers), and both shares
        # from it: 1 - share1 would lose all float32 precision where share1 is near 1
        log_ratio = (math.log(self.pi / (1.0 - self.pi)) + math.log(self.sigma_p2 / self.sigma_p1)
                     + (k2 - k1) * x2)
        return log_density, x * -(sigmoid(log_ratio) * (2.0 * k1)
                                  + sigmoid(-log_ratio) * (2.0 * k2))


def gaussian_prior(x, sigma_p=1.0):
    """Summed log density of N(0, sigma_p^2) over all elements of x; shape (1,)."""
    return GaussianPrior(sigma_p)(x)


def scale_mixture_prior(x, pi=0.25, sigma_p1=0.75, sigma_p2=0.1):
    """Summed log density of pi N(0, sigma_p1^2) + (1 - pi) N(0, sigma_p2^2) over x; shape (1,).
    pi = 0 or 1 is the remaining Gaussian."""
    if pi in (0.0, 1.0):
        return gaussian_prior(x, sigma_p1 if pi == 1.0 else sigma_p2)
    return ScaleMixturePrior(pi, sigma_p1, sigma_p2)(x)


def prior_for(config):
    """The config's prior; a scale mixture with pi = 1 or 0 is its one remaining Gaussian."""
    if config.prior == "gaussian":
        return GaussianPrior(config.sigma_p)
    if config.pi in (0.0, 1.0):
        return GaussianPrior(config.sigma_p1 if config.pi == 1.0 else config.sigma_p2)
    return ScaleMixturePrior(config.pi, config.sigma_p1, config.sigma_p2)


def gaussian_kl(mu, sigma, sigma_p):
    """Closed-form KL(N(mu, sigma^2) || N(0, sigma_p^2)) elementwise, with its derivatives with
    respect to mu and sigma: (log(sigma_p / sigma) + (sigma^2 + mu^2) / (2 sigma_p^2) - 1/2,
    mu / sigma_p^2, sigma / sigma_p^2 - 1 / sigma)."""
    scale = 1.0 / sigma_p ** 2
    value = (nd.square(sigma) + nd.square(mu)) * (0.5 * scale) - nd.log(sigma) \
        + (math.log(sigma_p) - 0.5)
    return value, mu * scale, sigma * scale - 1.0 / sigma


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


def combined_loss_gradients(X, y_one_hot, mu, rho, epsilons, prior, kl_weight, graph,
                            estimator="sample", kl="mc"):
    """``combined_loss`` of one mini-batch on flat (N,) vectors ``mu`` and ``rho`` (in
    ``graph.layout``'s order), averaged over the noise draws in ``epsilons``, with its gradients.
    Returns ``(loss (1,), dL/dmu (N,), dL/drho (N,))``. Written out, with autograd only through
    the network:

        w = mu + sigma * eps,   sigma = softplus(rho)
        log q(w | mu, sigma) = -log sigma - eps^2 / 2 - log sqrt(2 pi)           (per entry)
        g = dNLL/dw - kl_weight * d log P(w)/dw
        dL/dmu = g,   dL/drho = (g * eps - kl_weight / sigma) * sigmoid(rho)

    ``kl="analytic"`` replaces log q - log P by the closed-form KL to a Gaussian prior;
    ``estimator="lrt"`` draws pre-activations (``lrt_net``) with the first
    ``graph.lrt_noise_size(batch)`` entries of each draw, the rest (N, for ``kl="mc"``) being
    the KL's weight sample. Each draw: ``graph.noise_size(batch, estimator, kl)`` normals.
    """
    sigma = transform_rhos([rho])[0]
    loss = grad_mu = grad_sigma = None
    for eps in epsilons:
        if estimator == "lrt":
            split = graph.lrt_noise_size(X.shape[0])
            nll, g_mu, g_sigma = graph.lrt_nll_and_grads(X, y_one_hot, mu, sigma, eps[:split])
            eps = eps[split:]
            w = transform_gaussian_samples([mu], [sigma], [eps])[0] if kl == "mc" else None
        else:
            w = transform_gaussian_samples([mu], [sigma], [eps])[0]
            nll, g_mu = graph.nll_and_grad(X, y_one_hot, w)
        if kl == "mc":
            # log q summed at w: -sum log sigma (added once, after the loop) - sum eps^2/2 - c
            log_q_sum = -0.5 * nd.dot(eps, eps) - eps.size * LOG_SQRT_2PI
            log_prior_sum, log_prior_grad = prior.log_density_and_gradient(w)
            nll = nll + kl_weight * (log_q_sum - log_prior_sum)
            kl_grad_w = log_prior_grad * -kl_weight
            g_mu = g_mu + kl_grad_w
            if estimator == "lrt":
                g_sigma = g_sigma + kl_grad_w * eps
        if estimator != "lrt":
            g_sigma = g_mu * eps
        loss = nll if loss is None else loss + nll
        grad_mu = g_mu if grad_mu is None else grad_mu + g_mu
        grad_sigma = g_sigma if grad_sigma is None else grad_sigma + g_sigma
    if len(epsilons) > 1:
        loss, grad_mu, grad_sigma = (a / len(epsilons) for a in (loss, grad_mu, grad_sigma))
    if kl == "analytic":
        kl_value, kl_grad_mu, kl_grad_sigma = gaussian_kl(mu, sigma, prior.sigma_p)
        loss = loss + kl_weight * total(kl_value)
        grad_mu = grad_mu + kl_weight * kl_grad_mu
        grad_sigma = grad_sigma + kl_weight * kl_grad_sigma
    else:
        loss = loss - kl_weight * total(nd.log(sigma))
        grad_sigma = grad_sigma - kl_weight / sigma
    # d softplus / d rho = sigmoid(rho), at rho floored as in softplus
    return loss, grad_mu, grad_sigma * sigmoid(nd.maximum(rho, SOFTPLUS_FLOOR))


class FlatLayout:
    """Where the arrays ``[W1, b1, ...]`` of ``shapes`` live inside one flat vector of ``size``
    entries: the training step keeps mu and rho as two such vectors, so that everything but the
    network works entry by entry on all parameters at once."""

    def __init__(self, shapes):
        self.shapes = [tuple(s) for s in shapes]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int).tolist()
        self.size = self.offsets[-1]

    def views(self, flat):
        """The per-parameter arrays of ``shapes``, sharing memory with ``flat`` (no copy)."""
        return [flat[a:b].reshape(shape) for a, b, shape
                in zip(self.offsets[:-1], self.offsets[1:], self.shapes)]

    def flatten(self, arrays):
        """One flat vector (on the context of the first) holding copies of ``arrays``."""
        return nd.concat(*[a.reshape((-1,)) for a in arrays], dim=0)


class NetworkGraph:
    """-sum log P(y | X, w) of ``net`` (and of ``lrt_net``) as ``CachedOp`` graphs built from
    those functions, run with autograd on the per-layer views of flat vectors.

    ``network``: a ``network.Network``, or the parameter shapes of an MLP; ``likelihood``: a
    ``likelihood.py`` object (default: categorical, one-hot labels). One graph with static
    memory and MXNet's ``FullyConnected`` (oneDNN on the CPU) runs the network's forward and
    backward pass 1.5 times faster than the same layers imperatively.
    """

    def __init__(self, network, likelihood=None):
        self.network = network if isinstance(network, Network) else mlp_of(
            [tuple(shape) for shape in network])
        self.likelihood = likelihood or Categorical()
        self.layout = FlatLayout(self.network.param_shapes())
        self._nll_op = self._lrt_op = None
        self._views = collections.OrderedDict()

    def _graph(self, build):
        """``(op, names)``: a CachedOp of the symbol ``build(X, y, params)`` returns, and the
        order (by name) it takes its inputs in."""
        params = [sym.var("p%d" % i, shape=s) for i, s in enumerate(self.layout.shapes)]
        loss = build(sym.var("X"), sym.var("y"), params)
        op = nd.CachedOp(loss, flags=[("static_alloc", True), ("static_shape", True)])
        return op, loss.list_inputs()

    def nll_and_grad(self, X, y_one_hot, w, grad_w=None):
        """-sum log P(y | X, w) (1,) for flat weights ``w`` and its gradient with respect to
        ``w``, written into ``grad_w`` (a new array if not given)."""
        if self._nll_op is None:
            self._nll_op = self._graph(lambda X, y, params: -sym.sum(
                self.likelihood.log_likelihood(self.network(X, params, F=sym), y, F=sym)))
        grad_w = nd.zeros_like(w) if grad_w is None else grad_w
        weights = self._named(w, "p")
        nll = self._run(self._nll_op, dict(X=X, y=y_one_hot, **weights), weights,
                        self._named(grad_w, "p"))
        return nll, grad_w

    def lrt_noise_size(self, batch_size):
        """Standard normals one ``lrt_net`` pass over ``batch_size`` examples takes."""
        return batch_size * sum(shape[0] for shape in self.layout.shapes[1::2])

    def noise_size(self, batch_size, estimator="sample", kl="mc"):
        """Standard normals of one draw of ``combined_loss_gradients``."""
        if estimator != "lrt":
            return self.layout.size
        return self.lrt_noise_size(batch_size) + (self.layout.size if kl == "mc" else 0)

    def lrt_nll_and_grads(self, X, y_one_hot, mu, sigma, noise):
        """-sum log P(y | X) (1,) of ``lrt_net`` and its gradients with respect to the flat
        ``mu`` and ``sigma``; ``noise``: ``lrt_noise_size`` standard normals."""
        if self._lrt_op is None:
            noise_vars = [sym.var("eps%d" % i) for i in range(len(self.layout.shapes) // 2)]
            self._lrt_op = self._graph(lambda X, y, params: -sym.sum(
                self.likelihood.log_likelihood(
                    lrt_net(X, params, self._sigma_vars(), noise_vars, F=sym), y, F=sym)))
        grad_mu, grad_sigma = nd.zeros_like(mu), nd.zeros_like(sigma)
        noise_views, offset = {}, 0
        for i, (width,) in enumerate(self.layout.shapes[1::2]):
            count = X.shape[0] * width
            noise_views["eps%d" % i] = noise[offset:offset + count].reshape((X.shape[0], width))
            offset += count
        variables = dict(self._named(mu, "p"), **self._named(sigma, "s"))
        gradients = dict(self._named(grad_mu, "p"), **self._named(grad_sigma, "s"))
        inputs = dict(X=X, y=y_one_hot, **variables, **noise_views)
        nll = self._run(self._lrt_op, inputs, variables, gradients)
        return nll, grad_mu, grad_sigma

    def _sigma_vars(self):
        return [sym.var("s%d" % i, shape=s) for i, s in enumerate(self.layout.shapes)]

    def _named(self, flat, prefix):
        """The graph's inputs named ``prefix0``, ... : per-parameter views of ``flat``. Views of
        the arrays a run reuses every step are kept (slicing costs 0.2 ms a step); the entry
        holds ``flat`` itself, so its id is not reused while it is kept."""
        key = (id(flat), prefix)
        if key not in self._views:
            views = {"%s%d" % (prefix, i): view for i, view in enumerate(self.layout.views(flat))}
            self._views[key] = flat, views
            if len(self._views) > 8:
                self._views.popitem(last=False)
        return self._views[key][1]

    @staticmethod
    def _run(op_and_names, inputs, variables, gradients):
        op, names = op_and_names
        names_of_variables = list(variables)
        autograd.mark_variables([variables[n] for n in names_of_variables],
                                [gradients[n] for n in names_of_variables])
        with autograd.record():
            loss = op(*[inputs[name] for name in names])
        loss.backward()
        return loss.detach()


def evaluate_accuracy(data, labels, layer_params, batch_size=1000, network=None):
    """Fraction of ``data`` (N, num_inputs) whose argmax logit equals ``labels`` (N,), for
    ``net`` with ``layer_params`` (and ``network``, default the MLP they shape; with every unit
    kept where it has dropout).

    Runs on the context of ``layer_params``; data and labels may be NumPy arrays or
    NDArrays on any context. Returns a Python float in [0, 1].
    """
    ctx = layer_params[0].context
    num_examples = data.shape[0]
    if num_examples == 0:
        raise ValueError("evaluate_accuracy needs at least one example")
    correct = nd.zeros((1,), ctx=ctx)
    network = network.without_dropout() if network is not None else None
    for start in range(0, num_examples, batch_size):
        X = as_nd(data[start:start + batch_size], ctx)
        y = as_nd(labels[start:start + batch_size], ctx)
        predictions = nd.argmax(net(X, layer_params, network=network), axis=1)
        correct += nd.sum(predictions == y.astype("float32"))
    return float(correct.asscalar()) / num_examples


def as_nd(array, ctx):
    """``array`` (NumPy or NDArray) as an NDArray on ``ctx``; float64 NumPy becomes float32."""
    if isinstance(array, nd.NDArray):
        return array.as_in_context(ctx)
    return nd.array(array, ctx=ctx, dtype=array.dtype if array.dtype != np.float64 else "float32")

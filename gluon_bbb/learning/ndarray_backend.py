"""The ndarray backend of the training step: the tutorial's loss on flat parameter vectors with
its gradient written out, on MXNet operators (any context, every estimator)."""
import collections

import numpy as np
from mxnet import autograd, nd, sym

from ..family.estimators import estimator as estimator_named
from ..family.kl import kl_estimate
from ..family.elementwise import LOG_SQRT_2PI
from ..family.likelihoods import Categorical
from ..networks.layers import Network, mlp_of
from ..family.parametrizations import SOFTPLUS


def combined_loss_gradients(X, targets, mu, rho, epsilons, prior, kl_weight, graph,
                            estimator="sample", kl="mc", parametrization=SOFTPLUS, keep=None):
    """``combined_loss`` of one mini-batch on flat (N,) vectors ``mu`` and ``rho`` (in
    ``graph.layout``'s order), averaged over the noise draws in ``epsilons``, with its gradients.
    Returns ``(loss (1,), dL/dmu (N,), dL/drho (N,))``."""
    estimator, kl = estimator_named(estimator), kl_estimate(kl)
    sigma = parametrization.sigma(rho)
    drawn_mu, drawn_sigma = (mu, sigma) if keep is None else (mu * keep, sigma * keep)
    data_size = estimator.noise_size(graph, X.shape[0], kl)
    loss = grad_mu = grad_sigma = None
    for eps in epsilons:
        nll, g_mu, g_sigma, w, eps_w = estimator.draw(graph, X, targets, drawn_mu, drawn_sigma,
                                                      eps[:data_size], kl)
        if kl.per_draw:
            # log q summed at w: -sum log sigma (added once, after the loop) - sum eps^2/2 - c
            log_q_sum = -0.5 * nd.dot(eps_w, eps_w) - eps_w.size * LOG_SQRT_2PI
            log_prior_sum, log_prior_grad = prior.log_density_and_gradient(w)
            nll = nll + kl_weight * (log_q_sum - log_prior_sum)
            kl_grad_w = log_prior_grad * -kl_weight
            g_mu = g_mu + kl_grad_w
            if g_sigma is not None:
                g_sigma = g_sigma + kl_grad_w * eps_w
        if g_sigma is None:  # the weights were drawn: dL/dsigma = dL/dw * eps
            g_sigma = g_mu * eps_w
        if kl.prior_draws:
            value, kl_mu, kl_sigma = kl.prior_term(prior, mu, sigma, eps[data_size:])
            nll = nll + kl_weight * value
            g_mu, g_sigma = g_mu + kl_weight * kl_mu, g_sigma + kl_weight * kl_sigma
        loss = nll if loss is None else loss + nll
        grad_mu = g_mu if grad_mu is None else grad_mu + g_mu
        grad_sigma = g_sigma if grad_sigma is None else grad_sigma + g_sigma
    if len(epsilons) > 1:
        loss, grad_mu, grad_sigma = (a / len(epsilons) for a in (loss, grad_mu, grad_sigma))
    value, kl_mu, kl_sigma = kl.closed_term(prior, mu, sigma, kl_weight)
    if value is not None:
        loss = loss + value
        if kl_mu is not None:
            grad_mu = grad_mu + kl_mu
        grad_sigma = grad_sigma + kl_sigma
    if keep is not None:
        # where, not a product: nothing of a removed entry's gradient reaches it, whatever it is
        grad_mu, grad_sigma = (nd.where(keep, g, nd.zeros_like(g)) for g in (grad_mu, grad_sigma))
    return loss, grad_mu, grad_sigma * parametrization.sigma_gradient(rho, sigma)


def draw_size(graph, estimator, kl, prior, batch_size):
    """Standard normals one draw of ``combined_loss_gradients`` takes."""
    return (estimator.noise_size(graph, batch_size, kl)
            + kl.prior_noise_size(prior, graph.layout.size))


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
    """-sum log P(y | X, w) of ``net`` (and of the estimators' ``lrt_net`` and
    ``flipout_net``) as ``CachedOp`` graphs built from those functions, run with autograd on the
    per-layer views of flat vectors."""
    DATA_INPUT = "X"  # the graphs' input that takes the images, whose gradient no one takes

    def __init__(self, network, likelihood=None):
        self.network = network if isinstance(network, Network) else mlp_of(
            [tuple(shape) for shape in network])
        self.likelihood = likelihood or Categorical()
        self.layout = FlatLayout(self.network.param_shapes())
        self._nll_ops, self._noisy_ops = {}, {}
        self._views = collections.OrderedDict()

    def _graph(self, build):
        """``(op, names)``: a CachedOp of the symbol ``build(X, y, params)`` returns, and the
        order (by name) it takes its inputs in."""
        params = [sym.var("p%d" % i, shape=s) for i, s in enumerate(self.layout.shapes)]
        loss = build(sym.var(self.DATA_INPUT), sym.var("y"), params)
        op = nd.CachedOp(loss, flags=[("static_alloc", True), ("static_shape", True)])
        return op, loss.list_inputs()

    def nll_and_grad(self, X, targets, w, grad_w=None, operators=sym):
        """-sum log P(y | X, w) (1,) for flat weights ``w`` and its gradient with respect to
        ``w``, written into ``grad_w`` (a new array if not given)."""
        key = operators is not sym
        if key not in self._nll_ops:
            self._nll_ops[key] = self._graph(lambda X, y, params: -sym.sum(
                self.likelihood.log_likelihood(self.network(X, params, F=operators), y,
                                               F=sym)))
        grad_w = nd.zeros_like(w) if grad_w is None else grad_w
        weights = self._named(w, "p")
        nll = self._run(self._nll_ops[key], dict(X=X, y=targets, **weights), weights,
                        self._named(grad_w, "p"))
        return nll, grad_w

    def noisy_nll_and_grads(self, estimator, X, targets, mu, second, noise, operators=sym):
        """-sum log P(y | X) of ``estimator.net`` (``tutorial.lrt_net`` or ``tutorial.flipout_net``)
        and its gradients with respect to the flat ``mu`` and ``second`` (sigma for the first,
        the weight perturbation sigma * eps for the second); ``noise``: the flat standard
        normals of ``estimator.noise_shapes``."""
        shapes = estimator.noise_shapes(self.network, X.shape[0])
        key = (estimator.name, operators is not sym)
        if key not in self._noisy_ops:
            noise_vars = [sym.var("n%d" % i) for i in range(len(shapes))]
            seconds = [sym.var("s%d" % i, shape=s) for i, s in enumerate(self.layout.shapes)]
            self._noisy_ops[key] = self._graph(lambda X, y, params: -sym.sum(
                self.likelihood.log_likelihood(estimator.net(
                    X, params, seconds, noise_vars, F=operators, network=self.network), y,
                    F=sym)))
        grad_mu, grad_second = nd.zeros_like(mu), nd.zeros_like(second)
        noise_views, offset = {}, 0
        for i, shape in enumerate(shapes):
            count = int(np.prod(shape))
            noise_views["n%d" % i] = noise[offset:offset + count].reshape(shape)
            offset += count
        variables = dict(self._named(mu, "p"), **self._named(second, "s"))
        gradients = dict(self._named(grad_mu, "p"), **self._named(grad_second, "s"))
        inputs = dict(X=X, y=targets, **variables, **noise_views)
        nll = self._run(self._noisy_ops[key], inputs, variables, gradients)
        return nll, grad_mu, grad_second

    def _named(self, flat, prefix):
        """The graph's inputs named ``prefix0``, ... : per-parameter views of ``flat``."""
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

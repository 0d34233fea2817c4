"""The loss that trains and the training step.

``combined_loss_gradients`` is the tutorial's ``combined_loss`` (``gluon_bbb.tutorial``, its
reference: tests/test_step.py holds them equal) with its gradient written out, on flat parameter
vectors and MXNet operators: the data term of the estimator's draws, the KL estimate (per draw,
from prior draws or in closed form), the prior's density and the parametrization's gradient, in
one function. ``TrainingStep`` takes a mini-batch and updates the posterior with it; where the C
kernels serve the run (``choose_backend``: a CPU context and the exact built-in classes of
``native.library.CODES``) the same loss is ``native.library.loss_gradients``, its one
alternative."""
import collections
import math

import mxnet as mx
import numpy as np
from mxnet import autograd, nd, sym

from ..native import library as native, operators as native_operators
from ..errors import CheckpointError, ConfigError
from ..family.estimators import estimator as estimator_named
from ..family.kl import kl_estimate
from ..family.elementwise import LOG_SQRT_2PI
from ..family.likelihoods import Categorical
from ..family.parametrizations import SOFTPLUS
from ..family.priors import removed
from ..networks.network import Network, mlp_of
from ..tutorial import init_variational_params, sample_epsilons
from .noise import noise_for, seed_generator
from .plan import Plan
from .threads import Threads


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


BACKENDS = ("native", "ndarray")


def choose_backend(plan, ctx, backend=None):
    """``(name, why)`` of the backend a run takes: ``backend`` ("native" or "ndarray") if given
    (ConfigError where it cannot serve), else "native" wherever the C kernels serve the run and
    "ndarray" elsewhere; ``why`` says why the kernels are not used (None when they are)."""
    if backend not in (None,) + BACKENDS:
        raise ConfigError("backend", backend, "one of %s" % ", ".join(BACKENDS))
    why_not = None
    if ctx.device_type != "cpu":
        why_not = "the native kernels run on CPU contexts only"
    elif not native.available():
        why_not = native.unavailable_reason()
    elif plan.model_kind.natural_gradient:
        pass  # IVON's kernels take the prior's terms as MXNet computes them: every prior
    elif plan.remove_switched_off and not native.serves_removal(plan.prior,
                                                                 plan.parametrization):
        why_not = ("the native kernels remove switched-off weights under the log-uniform "
                   "prior's rule only")
    elif not native.serves(plan.estimator, plan.kl, plan.prior, plan.parametrization):
        # native.table.SERVED of the exact built-in classes: a subclass of one, which may
        # compute another formula, never trains with the built-in's kernels
        why_not = ("the C kernels serve no estimator %s with the %s %s KL, prior %s and "
                   "parametrization %s (native.table.SERVED)" % (
                       plan.estimator.name, plan.kl.direction, plan.kl.name,
                       plan.prior_description, plan.parametrization.name))
    if backend == "native" and why_not:
        raise ConfigError("backend", backend, "ndarray here: %s" % why_not)
    if backend == "ndarray":
        return backend, "asked for"
    return ("ndarray", why_not) if why_not else ("native", None)


def training_memory_bytes(plan):
    """About how many bytes a run's step holds at its peak: per parameter, float32 mu and rho,
    the five workspace vectors, the estimator's extra ones and a removal's means (or the
    ndarray backend's temporaries), the update rule's state (two Adam moments for each of mu
    and rho), and the copies
    made while they are initialised (float64 for the largest array); per example of a batch,
    the activations of every layer."""
    network = plan.network
    shapes = network.param_shapes()
    size = sum(math.prod(shape) for shape in shapes)
    floats_per_entry = (2 + 5 + native.extra_workspace_vectors(plan.estimator)
                        + plan.remove_switched_off  # the means the network takes
                        + plan.optimizer.state_vectors + 4)
    largest = max(math.prod(shape) for shape in shapes)
    # forward outputs and their gradients, and the graph's temporaries
    activations = plan.batch_size * network.activation_size * 4
    return 4 * size * floats_per_entry + 8 * largest + 4 * activations


class TrainingStep:
    """One run's training step on ``ctx``: ``step(X, targets, kl_weight)`` computes the
    mini-batch's loss and its gradient and updates mu and rho (mu alone for a model kind that
    learns no sigma: Monte Carlo dropout, the deterministic network); it returns the loss, an
    NDArray (1,) that is not waited for."""

    def __init__(self, plan, ctx, mus=None, rhos=None, backend=None, noise=None,
                 num_update=0, num_train=None):
        if not isinstance(plan, Plan):
            raise TypeError("TrainingStep takes a learning.plan.Plan (Config.build_plan() gives "
                            "a config's), not a %s" % type(plan).__name__)
        self.plan, self.ctx, self.noise_kind = plan, ctx, noise
        self.backend, self.why_not_native = choose_backend(plan, ctx, backend)
        self.native = self.backend == "native"
        self.network, self.prior, self.model_kind = plan.network, plan.prior, plan.model_kind
        self.graph = NetworkGraph(self.network, plan.likelihood)
        self.layout = self.graph.layout
        self.estimator, self.kl, self.parametrization = plan.estimator, plan.kl, plan.parametrization
        if mus is None:
            mus, _ = init_variational_params(self.layout.shapes, ctx, plan.mu_scale,
                                             seed=plan.seed)
            mus = self.network.initial_means(mus, nd.ones_like)
        if rhos is None:
            rhos = [nd.full(shape, value, ctx=ctx)
                    for shape, value in zip(self.layout.shapes, plan.initial_rhos)]
        self.mu, self.rho = self.layout.flatten(mus), self.layout.flatten(rhos)
        # the plan's update rule (IVON's: its fast paths on the C kernels where native)
        self.optimizer = plan.optimizer.create(plan, num_update, num_train, self.native)
        self.optimizer_states = plan.optimizer.states(self.optimizer, self.mu, self.rho)
        self.workspace = (native.Workspace(self.layout.size, ctx) if self.native
                          and not self.model_kind.natural_gradient else None)
        self._kept = None  # remove_switched_off's mask of the parameters held, once known
        self._grad_w = None  # the data term's gradient at the weights, where the step keeps it
        self.threads = Threads.for_process(ctx)
        self.start_epoch(0)

    def describe(self):
        """The run's first line: the backend and, where it is not native, why."""
        if not self.native:
            return "backend: ndarray (MXNet operators, %s)\n  native not used: %s" % (
                self.ctx, self.why_not_native)
        line = "backend: native (C kernels, %s)" % self.ctx
        # MXNet loads the operators for the runs whose graphs take them only
        if (native.takes_graph_operators(self.estimator, self.network)
                and not native_operators.available()):
            line += "\n  native operators not used: %s" % native_operators.unavailable_reason()
        return line

    def start_epoch(self, epoch):
        """Set the epoch's learning rate and noise: the draws of an epoch depend on the seed and
        the epoch alone, so a resumed run draws what an uninterrupted one does."""
        schedule = self.plan.schedule
        self.optimizer.set_learning_rate(schedule.learning_rate_at(epoch))
        if self.model_kind.natural_gradient:  # the prior's weight: the KL term's, warmed up
            self.optimizer.prior_scale = self.plan.kl_scale * schedule.kl_factor_at(epoch)
            self.optimizer.beta2 = schedule.beta2_at(epoch)
            # sigma from the state and the prior's weight this epoch (a run's first: from the
            # Hessian's start); a resumed run has loaded its state before it starts an epoch
            self.rho[:] = self.optimizer.log_variance(self.optimizer_states[0], self.mu)
        self.noise = noise_for(self.ctx, [self.plan.seed, epoch, 1], self.noise_kind)
        self.threads.start_epoch()
        if self.network.has_dropout:
            seed_generator(self.ctx, [self.plan.seed, epoch, 2])

    def __call__(self, X, targets, kl_weight):
        """One step on the mini-batch ``X`` with ``targets`` (what the likelihood scores) and
        the KL weight of this mini-batch; returns the loss, an NDArray (1,), not waited for."""
        self.threads.step()
        if self.model_kind.natural_gradient:
            return self._ivon_step(X, targets)
        if not self.model_kind.learns_sigma:
            loss, grad_mu = self._data_term(X, targets, self.mu)
            if self.model_kind.prior_as_weight_decay:
                # the prior as weight decay: (1/M)(-log P(w)) at the mean weights
                # (one pass of the kernel, bbb_prior_terms, for the priors it serves)
                terms = native.prior_terms(self.prior, self.mu, kl_weight) if self.native else None
                if terms is None:
                    log_prior_sum, log_prior_grad = self.prior.log_density_and_gradient(self.mu)
                    terms = log_prior_sum, log_prior_grad * -kl_weight
                loss = loss - kl_weight * terms[0]
                grad_mu = grad_mu + terms[1]
            self._update(0, self.mu, grad_mu)
            return loss
        keep = None
        if self.plan.remove_switched_off:
            # the mask the last step left, or, on a new or resumed step, the same from the
            # parameters it holds
            keep = self._kept if self._kept is not None else self.kept()
        # steps 1-4: the loss and its gradients with respect to mu and rho
        if self.native:
            loss, grad_mu, grad_rho = native.loss_gradients(
                X, targets, self.mu, self.rho, self.noise, self.plan.num_samples, self.prior,
                kl_weight, self.graph, self.workspace, self.kl, self.estimator,
                self.parametrization, keep)
        else:
            size = draw_size(self.graph, self.estimator, self.kl, self.prior, X.shape[0])
            epsilons = sample_epsilons([(size,)] * self.plan.num_samples, self.ctx, self.noise)
            loss, grad_mu, grad_rho = combined_loss_gradients(
                X, targets, self.mu, self.rho, epsilons, self.prior, kl_weight, self.graph,
                self.estimator, self.kl, self.parametrization, keep)
        # step 5: the update
        self._update(0, self.mu, grad_mu)
        self._update(1, self.rho, grad_rho)
        if keep is not None:
            # what is off after the update: this step's removals with those the rule has just
            # switched off
            self._kept = self._switched_off_removed()
        return loss

    def _data_term(self, X, targets, weights):
        """-sum log P(y | X, w) at ``weights`` and its gradient, written into one array the
        step keeps (the graph writes every entry)."""
        if self._grad_w is None:
            self._grad_w = nd.zeros(self.mu.shape, ctx=self.ctx, dtype=self.mu.dtype)
        return self.graph.nll_and_grad(X, targets, weights, self._grad_w,
                                       native.graph_operators(self.graph) if self.native
                                       else mx.sym)

    def _ivon_step(self, X, targets):
        """IVON's step: ``num_samples`` draws of the weights from the posterior, the data
        term's gradient at each (the prior's part added by the optimizer), one update of mu
        and the Hessian estimate, and rho = log sigma^2 from it."""
        state, optimizer = self.optimizer_states[0], self.optimizer
        optimizer.rescale_grad = 1.0 / X.shape[0]  # the mean loss's gradient
        loss = None
        for sample in range(self.plan.num_samples):
            weights, noise = optimizer.draw_weights(self.mu, state, self.noise)
            if sample == 0:
                optimizer.prior_at_draw(state, weights)
            nll, grad_w = self._data_term(X, targets, weights)
            loss = nll if loss is None else loss + nll
            if self.plan.num_samples == 1:  # the update from this draw, in one pass
                optimizer.step_one_draw(0, self.mu, state, grad_w, noise, self.rho)
                return loss
            optimizer.accumulate(state, grad_w, noise)
        optimizer.update(0, self.mu, None, state)
        self.rho[:] = optimizer.log_variance(state, self.mu)
        return loss / self.plan.num_samples

    def kept(self):
        """1 where the parameter is in the network, 0 where it is removed
        (``priors.removed``); a flat array of mu's shape."""
        return 1.0 - removed(self.prior, self.mu, self.parametrization.sigma(self.rho))

    def _switched_off_removed(self):
        """The mask of what stays in the network after an update (``priors.removed``), with
        the means of the rest set to 0: what is off has mean 0 whatever Adam's momentum would
        make of it, so it stays off and the saved means are the network that trains (one pass
        of the kernel, bbb_kept, where it serves the prior's rule)."""
        if self.native:
            keep = nd.empty(self.mu.shape, ctx=self.ctx)
            if native.kept(self.prior, self.parametrization, self.mu, self.rho, keep):
                return keep
        keep = self.kept()
        self.mu *= keep
        return keep

    def _update(self, index, param, grad):
        state = self.optimizer_states[index]
        if self.native:
            native.optimizer_update(self.optimizer, index, param, grad, state)
        else:
            self.optimizer.update(index, param, grad, state)

    @property
    def mus(self):
        """Per-parameter views of mu (sharing memory with the flat vector)."""
        return self.layout.views(self.mu)

    @property
    def rhos(self):
        """Per-parameter views of rho (sharing memory with the flat vector)."""
        return self.layout.views(self.rho)

    @property
    def num_update(self):
        """Optimizer steps taken, those before a resume included."""
        return self.optimizer.num_update

    def state_arrays(self):
        """The optimizer's state: for mu and for rho, a list of flat arrays (none for SGD; for
        IVON, mu's momentum and Hessian estimate)."""
        saved = getattr(self.optimizer, "saved_arrays", _state_arrays)
        return [saved(state) for state in self.optimizer_states]

    def load_state_arrays(self, saved):
        """Copy ``state_arrays()`` of an earlier step (a checkpoint's) into this one's."""
        for i, state in enumerate(self.optimizer_states):
            targets = getattr(self.optimizer, "saved_arrays", _state_arrays)(state)
            arrays = saved[i] if i < len(saved) else []
            if [a.shape for a in arrays] != [t.shape for t in targets]:
                raise CheckpointError("checkpoint optimizer state for parameter %d has shapes "
                                      "%s, this run's optimizer needs %s", i,
                                      [a.shape for a in arrays], [t.shape for t in targets])
            for target, array in zip(targets, arrays):
                target[:] = array.as_in_context(self.ctx)


def _state_arrays(state):
    """The NDArrays of one optimizer state (None, an NDArray or nested tuples), in order."""
    if state is None:
        return []
    if isinstance(state, (tuple, list)):
        return [a for s in state for a in _state_arrays(s)]
    return [state]

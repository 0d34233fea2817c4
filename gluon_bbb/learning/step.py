"""The training step: one object per run that takes a mini-batch and updates the posterior."""
import math

import mxnet as mx
from mxnet import nd

from ..native import library as native, operators as native_operators
from ..errors import CheckpointError, ConfigError
from ..tutorial import init_variational_params, sample_epsilons
from .ndarray_backend import NetworkGraph, combined_loss_gradients, draw_size
from .noise import noise_for, seed_generator
from .plan import Plan
from .threads import Threads
from ..family.priors import removed


class NdarrayBackend:
    """Steps 1-5 on MXNet operators."""
    name = "ndarray"
    native = False

    def loss_gradients(self, step, X, y, kl_weight, keep=None):
        size = draw_size(step.graph, step.estimator, step.kl, step.prior, X.shape[0])
        epsilons = sample_epsilons([(size,)] * step.plan.num_samples, step.ctx, step.noise)
        return combined_loss_gradients(X, y, step.mu, step.rho, epsilons, step.prior,
                                       kl_weight, step.graph, step.estimator, step.kl,
                                       step.parametrization, keep)

    def update(self, optimizer, index, param, grad, state):
        optimizer.update(index, param, grad, state)

    def prior_penalty(self, prior, weights, kl_weight):
        """(sum log P(weights), the gradient of -kl_weight log P(weights)): a MAP model's
        prior as weight decay."""
        log_prior_sum, log_prior_grad = prior.log_density_and_gradient(weights)
        return log_prior_sum, log_prior_grad * -kl_weight

    def remove_switched_off(self, step):
        """The mask of what stays in the network after an update (``priors.removed``), with
        the means of the rest set to 0: what is off has mean 0 whatever Adam's momentum would
        make of it, so it stays off and the saved means are the network that trains."""
        keep = step.kept()
        step.mu *= keep
        return keep

    def workspace(self, size, ctx):
        return None

    def graph_operators(self, graph, estimator=None):
        """What ``graph``'s network graphs are built from (``NetworkGraph``'s ``operators``)."""
        return mx.sym

    def describe(self, ctx, why_not_native, estimator, network):
        return "backend: ndarray (MXNet operators, %s)\n  native not used: %s" % (
            ctx, why_not_native)


class NativeBackend(NdarrayBackend):
    """Steps 1-5 with the C kernels doing the parameter-side work and the update; the MXNet
    operators of the ndarray backend for what the kernels do not serve."""
    name = "native"
    native = True

    def loss_gradients(self, step, X, y, kl_weight, keep=None):
        return native.loss_gradients(
            X, y, step.mu, step.rho, step.noise, step.plan.num_samples, step.prior,
            kl_weight, step.graph, step.workspace, step.kl, step.estimator,
            step.parametrization, keep)

    def update(self, optimizer, index, param, grad, state):
        native.optimizer_update(optimizer, index, param, grad, state)

    def prior_penalty(self, prior, weights, kl_weight):
        # one pass of the kernel (bbb_prior_terms) for the priors it serves
        terms = native.prior_terms(prior, weights, kl_weight)
        if terms is None:
            return super().prior_penalty(prior, weights, kl_weight)
        return terms[:2]

    def remove_switched_off(self, step):
        # one pass of bbb_kept where it serves the prior's rule (the log-uniform prior's)
        keep = nd.empty(step.mu.shape, ctx=step.ctx)
        if native.kept(step.prior, step.parametrization, step.mu, step.rho, keep):
            return keep
        return super().remove_switched_off(step)

    def workspace(self, size, ctx):
        return native.Workspace(size, ctx)

    def graph_operators(self, graph, estimator=None):
        return native.graph_operators(graph, estimator)

    def describe(self, ctx, why_not_native, estimator, network):
        line = "backend: native (C kernels, %s)" % ctx
        # MXNet loads the operators for the runs whose graphs take them only
        if (native.takes_graph_operators(estimator, network)
                and not native_operators.available()):
            line += "\n  native operators not used: %s" % native_operators.unavailable_reason()
        return line


BACKENDS = {backend.name: backend for backend in (NativeBackend(), NdarrayBackend())}


def choose_backend(plan, ctx, backend=None):
    """``(backend, why)`` for a run: the backend object ``backend`` names if given
    (ConfigError where it cannot serve), else the native one wherever it can serve and the
    ndarray one elsewhere; ``why`` says why the native backend is not used (None when it is).
    """
    if backend is not None and backend not in BACKENDS:
        raise ConfigError("backend", backend, "one of %s" % ", ".join(BACKENDS))
    asked = BACKENDS.get(backend)
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
    if asked is not None and asked.native and why_not:
        raise ConfigError("backend", backend, "ndarray here: %s" % why_not)
    if asked is not None and not asked.native:
        return asked, "asked for"
    return (BACKENDS["ndarray"], why_not) if why_not else (BACKENDS["native"], None)


# parameter-sized vectors the optimizer keeps, for mu and rho together
OPTIMIZER_STATE_VECTORS = {"sgd": 0, "adam": 4}


def training_memory_bytes(plan):
    """About how many bytes a run's step holds at its peak: per parameter, float32 mu and rho,
    the five workspace vectors, the estimator's extra ones and a removal's means (or the
    ndarray backend's temporaries), two Adam moments for each of mu and rho, and the copies
    made while they are initialised (float64 for the largest array); per example of a batch,
    the activations of every layer."""
    network = plan.network
    shapes = network.param_shapes()
    size = sum(math.prod(shape) for shape in shapes)
    floats_per_entry = (2 + 5 + native.extra_workspace_vectors(plan.estimator)
                        + plan.remove_switched_off  # the means the network takes
                        + OPTIMIZER_STATE_VECTORS[plan.optimizer] + 4)
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
        if self.model_kind.natural_gradient:
            # IVON (learning/ivon.py): its own update of mu, sigma from its Hessian estimate,
            # its fast paths on the C kernels with the native backend
            from .ivon import IVON
            ivon, schedule, ess = plan.ivon, plan.schedule, plan.ivon.ess or num_train
            if ess is None:
                raise ConfigError("ivon_ess", None, "given where the training images are not "
                                  "known")
            self.optimizer = IVON(
                learning_rate=schedule.learning_rate, ess=ess,
                hess_init=ivon.hess_init, beta1=ivon.beta1, beta2=schedule.beta2,
                weight_decay=ivon.weight_decay, clip_radius=(
                    float("inf") if ivon.clip_radius is None else ivon.clip_radius),
                prior=plan.prior if plan.prior.has_log_density else None,
                prior_at_draws=ivon.prior_at_draws, native=self.backend.native,
                begin_num_update=num_update)
            self.optimizer_states = [self.optimizer.create_state(0, self.mu)]
        else:
            self.optimizer = mx.optimizer.create(
                plan.optimizer, learning_rate=plan.schedule.learning_rate, rescale_grad=1.0,
                wd=0.0, begin_num_update=num_update)
            self.optimizer_states = [self.optimizer.create_state(i, p)
                                     for i, p in enumerate((self.mu, self.rho))]
        self.workspace = (None if self.model_kind.natural_gradient
                          else self.backend.workspace(self.layout.size, ctx))
        self._kept = None  # remove_switched_off's mask of the parameters held, once known
        self._grad_w = None  # the data term's gradient at the weights, where the step keeps it
        self.threads = Threads.for_process(ctx)
        self.start_epoch(0)

    def describe(self):
        """The run's first line: the backend and, where it is not native, why."""
        return self.backend.describe(self.ctx, self.why_not_native, self.estimator,
                                     self.graph.network)

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
                log_prior_sum, penalty_grad = self.backend.prior_penalty(self.prior, self.mu,
                                                                         kl_weight)
                loss = loss - kl_weight * log_prior_sum
                grad_mu = grad_mu + penalty_grad
            self._update(0, self.mu, grad_mu)
            return loss
        keep = None
        if self.plan.remove_switched_off:
            # the mask the last step left, or, on a new or resumed step, the same from the
            # parameters it holds
            keep = self._kept if self._kept is not None else self.kept()
        # steps 1-4: the loss and its gradients with respect to mu and rho
        loss, grad_mu, grad_rho = self.backend.loss_gradients(self, X, targets, kl_weight, keep)
        # step 5: the update
        self._update(0, self.mu, grad_mu)
        self._update(1, self.rho, grad_rho)
        if keep is not None:
            # what is off after the update: this step's removals with those the rule has just
            # switched off
            self._kept = self.backend.remove_switched_off(self)
        return loss

    def _data_term(self, X, targets, weights):
        """-sum log P(y | X, w) at ``weights`` and its gradient, written into one array the
        step keeps (the graph writes every entry)."""
        if self._grad_w is None:
            self._grad_w = nd.zeros(self.mu.shape, ctx=self.ctx, dtype=self.mu.dtype)
        return self.graph.nll_and_grad(X, targets, weights, self._grad_w,
                                       self.backend.graph_operators(self.graph))

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

    def _update(self, index, param, grad):
        self.backend.update(self.optimizer, index, param, grad, self.optimizer_states[index])

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

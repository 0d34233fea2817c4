"""IVON, the improved variational online Newton method (Shen et al. 2024, "Variational Learning
is Effective for Large Deep Networks"): a second way to fit the project's posterior
N(mu, sigma^2) over every weight, beside Bayes by Backprop's reparametrized gradients."""
import contextlib
import math

import mxnet as mx
from mxnet import nd

from ..errors import (FLOAT32_TINY, MAX_PREDICTIVE_SAMPLES, require_positive, require_real,
                      require_whole)
from ..native import library as native
from .noise import PhiloxNoise
from .plan import check_ivon_numbers


def flushed(x):
    """``x``, 0 where its magnitude is below float32's smallest normal number, as flush-to-zero
    hardware makes it."""
    return x * (nd.abs(x) >= FLOAT32_TINY)


def _check_learning_rate(rate):
    """``float(rate)``; ConfigError unless it is a number > 0 whose steps float32 can take: a
    NaN, an infinite or a huge rate turns every mean NaN at the first update."""
    return require_real("learning_rate", rate, 0.0, MAX_LEARNING_RATE, low_open=True,
                        words="a finite number in (0, %g]" % MAX_LEARNING_RATE)


# IVON's reference rates are 0.1 to 1 (the paper's and this package's preset: 0.5); a rate of
# 1e6 already moves a mean by 1e6 times its momentum in one step
MAX_LEARNING_RATE = 1e6


# the constructor the package's import named "ivon" with gives way to the class itself
mx.optimizer.Optimizer.opt_registry.pop("ivon", None)


@mx.optimizer.register
class IVON(mx.optimizer.Optimizer):
    """The IVON update of one parameter array (``update``) from the draws its step took
    (``accumulate``); ``sigma`` and ``draw`` give the posterior. A training step's two calls,
    ``draw_weights`` and ``step_one_draw``, take the C kernels for this exact class (a
    subclass, which may change a formula, takes the formulas' composition)."""

    def __init__(self, learning_rate=0.1, ess=50000, hess_init=0.1, beta1=0.9, beta2=0.99999,
                 weight_decay=1e-4, clip_radius=float("inf"), prior=None, prior_scale=1.0,
                 prior_at_draws=False, native=True, **kwargs):
        super().__init__(learning_rate=_check_learning_rate(learning_rate), **kwargs)
        (self.ess, self.hess_init, self.beta1, self.beta2, self.ivon_weight_decay,
         self.clip_radius) = check_ivon_numbers(ess, hess_init, beta1, beta2, weight_decay,
                                                clip_radius)
        self.native, self.prior_at_draws = native, prior_at_draws
        self._prior_version = 0  # counts changes of the prior or its weight
        self.prior, self.prior_scale = prior, prior_scale
        self._states = {}  # by parameter name, for a Gluon model's own draws

    def set_learning_rate(self, lr):
        super().set_learning_rate(_check_learning_rate(lr))

    @property
    def rescale_grad(self):
        """The factor of the gradients a step takes (a Trainer's 1 / batch size)."""
        return self._rescale_grad

    @rescale_grad.setter
    def rescale_grad(self, value):
        self._rescale_grad = require_positive("rescale_grad", value)

    # the prior's terms at the means, computed once a step (at the update) or, with
    # ``prior_at_draws``, at the step's draw; a new prior or weight and ``refresh`` recompute them

    @property
    def prior(self):
        return self._prior

    @prior.setter
    def prior(self, prior):
        self._prior = prior
        self._prior_version += 1

    @property
    def prior_scale(self):
        return self._prior_scale

    @prior_scale.setter
    def prior_scale(self, scale):
        self._prior_scale = scale
        self._prior_version += 1

    def refresh(self, state, mean):
        """Recompute the prior's terms of ``state`` at ``mean``: after the means were set
        other than by ``update`` (loaded, say)."""
        if self.prior_at_draws and state[5].get("version") == self._prior_version:
            return
        state[5]["terms"], state[5]["version"] = self.prior_terms(mean), self._prior_version

    def prior_at_draw(self, state, weights):
        """With ``prior_at_draws``: the prior's terms of ``state`` at ``weights``, the step's
        draw (its first, where it takes several), for its update and the sigma of the draws
        after it."""
        if self.prior_at_draws:
            state[5]["terms"], state[5]["version"] = (self.prior_terms(weights),
                                                      self._prior_version)

    def _prior_terms_of(self, state, mean):
        if state[5].get("version") != self._prior_version:
            self.refresh(state, mean)
        return state[5]["terms"]

    # the state: the momentum, the Hessian estimate, then what the draws since the last step
    # add up: their loss gradients (scaled by rescale_grad at the step, as a Trainer sets it
    # then), noise times those, and their count; last, the prior's terms at the means

    def create_state(self, index, weight):
        zeros = lambda: nd.zeros(weight.shape, ctx=weight.context, dtype=weight.dtype)  # noqa
        return (zeros(), nd.full(weight.shape, self.hess_init, ctx=weight.context,
                                 dtype=weight.dtype), zeros(), zeros(), [0], {})

    @staticmethod
    def saved_arrays(state):
        """What a checkpoint keeps of a state: the momentum and the Hessian estimate."""
        return [state[0], state[1]]

    def prior_terms(self, mean):
        """The prior's gradient and precision at the means, per example: (s / ess) p mu and
        (s / ess) max(p, 0), p = -(d log P / dmu) / mu (``Prior.gradient_precision``), beside
        weight decay's wd mu and wd; (0, 0) without a prior, or with a weight s / ess below
        float32's smallest."""
        factor = self.prior_scale / self.ess
        if self.prior is None or abs(factor) < FLOAT32_TINY:
            return 0.0, 0.0
        if self.native:  # the kernel's pass, for the priors it serves (their formulas)
            terms = native.prior_terms(self.prior, mean, factor, with_precision=True)
            if terms is not None:
                return terms[1], terms[2]
        precision = self.prior.gradient_precision(mean) * factor
        return precision * mean, nd.relu(precision)

    def precision(self, state, mean):
        """The posterior's precision over ess, h + wd + the prior's, floored at wd / 1000; the
        prior's part at ``mean`` as the state last saw it (its update's, or ``refresh``'s)."""
        total = state[1] + self.ivon_weight_decay + self._prior_terms_of(state, mean)[1]
        return nd.maximum(total, self.precision_floor)

    @property
    def precision_floor(self):
        """The least precision over ess a posterior takes, wd / 1000: h + wd stays positive
        whatever the Hessian's estimate, written once for the operators and the kernels."""
        return 1e-3 * self.ivon_weight_decay

    def sigma(self, state, mean):
        """The posterior's standard deviation, 1 / sqrt(ess (h + wd + p))."""
        return 1.0 / nd.sqrt(self.ess * self.precision(state, mean))

    def log_variance(self, state, mean):
        """log sigma^2: the rho a run stores (``LogVariance``)."""
        return -nd.log(self.ess * self.precision(state, mean))

    def draw(self, weight, state, normals):
        """The perturbation sigma z for standard normals ``normals`` of ``weight``'s shape."""
        return normals * self.sigma(state, weight)

    def accumulate(self, state, grad, noise):
        """Add one draw: ``grad``, the data term's gradient at the weights mu + ``noise`` (the
        mean loss's once times ``rescale_grad``)."""
        state[2][:] += grad
        state[3][:] += noise * grad
        state[4][0] += 1

    def update(self, index, weight, grad, state):
        """The IVON step of ``weight`` (mu) from the draws ``accumulate`` took since the last
        step (``grad`` is one of them, already accumulated, and not read again)."""
        self._update_count(index)
        momentum, hessian, grad_sum, noise_grad_sum, count, _ = state
        if count[0] == 0:
            raise RuntimeError("IVON.update before any draw: take the gradient at drawn weights "
                               "(sampled_params) first")
        lr, wd, t = self._get_lr(index), self.ivon_weight_decay, self._index_update_count[index]
        grad_mean = grad_sum * (self.rescale_grad / count[0])
        noise_grad = noise_grad_sum * (self.rescale_grad / count[0])
        prior_gradient, prior_precision = self._prior_terms_of(state, weight)
        momentum[:] = flushed(self.beta1 * momentum + (1.0 - self.beta1) * grad_mean)
        damped = self.precision(state, weight)
        f = self.ess * damped * noise_grad
        hessian[:] = (self.beta2 * hessian + (1.0 - self.beta2) * f
                      + (0.5 * (1.0 - self.beta2) ** 2) * nd.square(hessian - f) / damped)
        direction = ((momentum / (1.0 - self.beta1 ** t) + wd * weight + prior_gradient)
                     / nd.maximum(hessian + wd + prior_precision, self.precision_floor))
        if math.isfinite(self.clip_radius):
            direction = nd.clip(direction, -self.clip_radius, self.clip_radius)
        updated = weight - lr * (self.hess_init + wd) * direction
        weight[:] = flushed(updated)
        self.refresh(state, weight)
        for total in (grad_sum, noise_grad_sum):
            total[:] = 0.0
        count[0] = 0

    # A training step's calls: the formulas above composed, or in one pass each over the flat
    # vectors by the C kernels (native/_fused.c: bbb_ivon_draw, bbb_ivon_update)

    def _kernels_take(self, *arrays):
        return type(self) is IVON and self.native and native.serves_arrays(*arrays)

    def _prior_arrays(self, state, weight):
        return [None if isinstance(term, float) else term
                for term in self._prior_terms_of(state, weight)]

    def draw_weights(self, weight, state, noise):
        """``(weight + perturbation, perturbation)``: weights drawn from the posterior with the
        next standard normals of ``noise`` (a ``noise.py`` source), and their perturbation
        ``draw(weight, state, normals)``."""
        prior_precision = self._prior_arrays(state, weight)[1]
        if not (isinstance(noise, PhiloxNoise)
                and self._kernels_take(weight, state[1], prior_precision)):
            perturbation = self.draw(weight, state, noise.normal(weight.shape))
            return weight + perturbation, perturbation
        # the normals of the stream noise.normal would draw, made in the kernel's pass
        perturbation, drawn = (nd.empty(weight.shape, ctx=weight.context) for _ in range(2))
        native.ivon_draw(weight, state[1], prior_precision, self.ess, self.ivon_weight_decay,
                         self.precision_floor, noise.key, noise.next_stream(),
                         perturbation, drawn)
        return drawn, perturbation

    def step_one_draw(self, index, weight, state, grad, noise, log_variance):
        """A step of one draw: ``accumulate`` the gradient ``grad`` at ``weight + noise``,
        ``update`` ``weight``, and fill ``log_variance`` with the new ``log_variance``."""
        momentum, hessian, _, _, count, _ = state
        prior_gradient, prior_precision = self._prior_arrays(state, weight)
        if count[0] != 0 or not self._kernels_take(weight, momentum, hessian, grad, noise,
                                                   prior_gradient, log_variance):
            self.accumulate(state, grad, noise)
            self.update(index, weight, None, state)
            log_variance[:] = self.log_variance(state, weight)
            return None
        self._update_count(index)
        lr, wd, t = self._get_lr(index), self.ivon_weight_decay, self._index_update_count[index]
        native.ivon_update(weight, momentum, hessian, grad, noise, prior_gradient,
                           prior_precision, self.rescale_grad, self.ess, wd, self.precision_floor,
                           self.beta1, self.beta2, 1.0 - self.beta1 ** t,
                           lr * (self.hess_init + wd), self.clip_radius, log_variance)
        self.refresh(state, weight)
        if prior_precision is not None:  # the prior's precision at the new means
            native.ivon_log_variance(hessian, self._prior_terms_of(state, weight)[1], self.ess,
                                     wd, self.precision_floor, log_variance)
        return None

    # A Gluon model of the user's own: the trainer's parameters drawn, and the predictive.

    def _state_of(self, param):
        key = param.name
        if key not in self._states:
            self._states[key] = self.create_state(None, param.data())
        return self._states[key]

    def create_state_multi_precision(self, index, weight):
        # a Trainer asks for its states by index; each is the one sampled_params uses, by name
        name = self.idx2name.get(index) if self.idx2name else None
        param = self.param_dict.get(index) if self.param_dict else None
        if param is not None:
            return self._state_of(param)
        return self._states.setdefault(name, self.create_state(index, weight))


@contextlib.contextmanager
def sampled_params(trainer, train=True):
    """Inside the block the parameters of ``trainer`` (a ``gluon.Trainer`` of ``IVON``) hold
    weights drawn from the posterior, w = mu + sigma z; afterwards their means again, and, with
    ``train``, each parameter's gradient at w counted as one draw of the next
    ``trainer.step`` (examples/ivon_gluon.py)."""
    optimizer = trainer._optimizer
    if not isinstance(optimizer, IVON):
        raise ValueError("sampled_params takes a gluon.Trainer whose optimizer is ivon")
    drawn = []
    for param in trainer._params:
        if param.grad_req == "null":
            continue
        if param._data is None:
            raise ValueError("sampled_params: %s is not initialized yet (deferred): give the "
                             "layers their input sizes (in_units, in_channels), or run one "
                             "forward pass first" % param.name)
        if len(param.list_ctx()) > 1:
            raise ValueError("sampled_params: %s is on %d contexts; IVON here takes a model on "
                             "one" % (param.name, len(param.list_ctx())))
        state, mean = optimizer._state_of(param), param.data().copy()
        noise = optimizer.draw(mean, state, nd.random.normal(shape=mean.shape,
                                                             ctx=mean.context))
        param.set_data(mean + noise)
        if train:
            optimizer.prior_at_draw(state, mean + noise)
        drawn.append((param, state, mean, noise))
    try:
        yield
    finally:
        for param, state, mean, noise in drawn:
            param.set_data(mean)
            if train:
                optimizer.accumulate(state, param.grad().copy(), noise)


def predict_probabilities(net, trainer, X, num_samples=10):
    """The Monte Carlo predictive of a Gluon model trained by ``trainer`` (IVON): the mean of
    softmax(net(X)) over ``num_samples`` draws of its weights (0: the means)."""
    from mxnet import autograd
    if require_whole("num_samples", num_samples, 0, MAX_PREDICTIVE_SAMPLES) == 0:
        return nd.softmax(net(X), axis=1)
    total = None
    with autograd.predict_mode():
        for _ in range(num_samples):
            with sampled_params(trainer, train=False):
                probs = nd.softmax(net(X), axis=1)
            total = probs if total is None else total + probs
    return total / num_samples

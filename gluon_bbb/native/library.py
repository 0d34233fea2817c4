"""The native backend of the training step: the C kernels of ``_fused.c``, loaded with ctypes,
an accelerator of the ndarray backend's formulas for the combinations ``table.SERVED``
declares, of the exact built-in classes ``CODES`` lists (a subclass, which may compute another
formula, trains on the ndarray backend)."""
import ctypes
import functools
import math
import sys

import mxnet as mx
import numpy as np

from . import operators, table
from .built import open_built
from ..errors import FLOAT32_MAX
from ..family.parametrizations import SOFTPLUS


ABI_VERSION = 12          # must match ABI_VERSION in _fused.c

_P, _I64, _U64, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float
_SIGNATURES = {
    "bbb_abi_version": ([], ctypes.c_int),
    "bbb_philox_words": ([_I64, _U64, _U64, _U64, _U64, _P], None),
    "bbb_normals": ([_I64, _U64, _U64, _U64, _P], None),
    "bbb_sample_weights": ([_I64, _P, _P, _U64, _U64, _U64, _P, _P], None),
    "bbb_kl_gradients": ([_I64, _P, _P, _P, _P, _P, _P, ctypes.c_int, _F32, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int, _F32, _F32, _F32, _P, _P, _P],
                         ctypes.c_double),
    "bbb_perturb": ([_I64, _P, _P, _P, ctypes.c_int] + [_P] * 5, None),
    "bbb_kept": ([_I64, _P, _P, ctypes.c_int, ctypes.c_int, _P], None),
    "bbb_sgd_update": ([_I64, _P, _P, _F32, _F32, _F32], None),
    "bbb_adam_update": ([_I64, _P, _P, _P, _P] + [_F32] * 6, None),
    "bbb_prior_terms": ([_I64, _P, ctypes.c_int, _F32, _F32, _F32, _F32, _P, _P],
                        ctypes.c_double),
    "bbb_ivon_draw": ([_I64, _P, _P, _P, _F32, _F32, _F32, _U64, _U64, _U64, _P, _P], None),
    "bbb_ivon_log_variance": ([_I64, _P, _P, _F32, _F32, _F32, _P], None),
    "bbb_ivon_update": ([_I64] + [_P] * 7 + [_F32] * 10 + [_P], None),
    "bbb_conv_maxpool": ([_I64] * 7 + [_P] * 4 + [_I64] * 2, ctypes.c_int),
}


@functools.lru_cache(maxsize=None)
def _load():
    """(library or None, why not) for the built ``_fused`` shared object. A library that is
    there but does not match this source is reported once, on one line of stderr."""
    lib, problem, stale = open_built("_fused", ("_fused.c", "_conv_tiles.h"), "bbb_abi_version",
                                     ABI_VERSION, "kernels")
    if stale:
        sys.stderr.write("gluon_bbb: warning: %s; using the ndarray backend\n" % problem)
    if lib is None:
        return None, problem
    for name, (argtypes, restype) in _SIGNATURES.items():
        getattr(lib, name).argtypes, getattr(lib, name).restype = argtypes, restype
    return lib, None


def available():
    """True where the native kernels are built, current and loadable."""
    return _load()[0] is not None


def unavailable_reason():
    """Why ``available()`` is False (None when it is True)."""
    return _load()[1]


def library():
    """The loaded ctypes library; RuntimeError where it is not available."""
    lib, why = _load()
    if lib is None:
        raise RuntimeError(why)
    return lib


def normals(size, key, stream):
    """(size,) float32 standard normals of Philox ``stream`` under ``key`` as a NumPy array:
    ``noise.philox_normals_reference``, computed in C."""
    out = np.empty(size, dtype=np.float32)
    library().bbb_normals(size, int(key[0]), int(key[1]), stream, out.ctypes.data)
    return out


def normals_into(out, key, stream):
    """Fill ``out``, a float32 NDArray on a CPU context, with ``normals(out.size, key,
    stream)``."""
    library().bbb_normals(out.size, int(key[0]), int(key[1]), stream,
                          _host_pointer(out, write=True))


def _host_pointer(array, write=False):
    """Address of a CPU float32 NDArray's data, once MXNet's pending operations on it are done
    (all of them before a write, the writes before a read)."""
    if array.context.device_type != "cpu" or array.dtype != np.float32:
        raise ValueError("native kernels take float32 arrays on a CPU context, got %s on %s"
                         % (np.dtype(array.dtype).name, array.context))
    if write:
        mx.base.check_call(mx.base._LIB.MXNDArrayWaitToWrite(array.handle))
    else:
        array.wait_to_read()
    pointer = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(array.handle, ctypes.byref(pointer)))
    return pointer


def sample_weights(mu, rho, key, stream, eps, w):
    """Fill ``eps`` with the normals of ``stream`` and ``w`` with mu + softplus(rho) * eps.
    All (N,) float32 NDArrays on a CPU context."""
    library().bbb_sample_weights(mu.size, _host_pointer(mu), _host_pointer(rho), int(key[0]),
                                 int(key[1]), stream, _host_pointer(eps, write=True),
                                 _host_pointer(w, write=True))


def perturb(mu, rho, eps, parametrization=SOFTPLUS, keep=None, drawn_mu=None, sigma=None,
            delta=None, w=None):
    """Fill, where given, ``sigma`` with sigma(rho) under ``parametrization`` (its kernel
    code), ``delta`` with sigma * eps, ``w`` with mu + delta and ``drawn_mu`` with mu; with
    ``keep`` (0/1), the entries at 0 take mu and sigma as 0."""
    library().bbb_perturb(rho.size, _host_pointer(mu), _host_pointer(rho), _host_pointer(eps),
                          code(parametrization), _optional(keep), _optional(drawn_mu, True),
                          _optional(sigma, True), _optional(delta, True), _optional(w, True))


# the kernels' code of each exact class they serve (``table.py``'s), by the class's full name
CODES = {"gluon_bbb.family." + name: code for name, code in (
    ("estimators.WeightSampling", table.DATA_TERMS["sample"]),
    ("estimators.LocalReparametrization", table.DATA_TERMS["lrt"]),
    ("estimators.Flipout", table.DATA_TERMS["flipout"]),
    ("kl.MonteCarloKL", table.KL_ESTIMATES["mc"]),
    ("kl.ClosedFormKL", table.KL_ESTIMATES["analytic"]),
    ("priors.GaussianPrior", table.PRIORS["gaussian"]),
    ("priors.ScaleMixturePrior", table.PRIORS["scale_mixture"]),
    ("priors.LogUniformPrior", table.PRIORS["log_uniform"]),
    ("priors.NoPrior", table.PRIORS["none"]),
    ("parametrizations.Softplus", table.PARAMETRIZATIONS["softplus"]),
    ("parametrizations.LogVariance", table.PARAMETRIZATIONS["log_variance"]))}


def code(obj):
    """The kernels' code of ``obj``, an object of a class ``CODES`` names exactly; None for
    any other (a subclass of one, which may compute another formula, included)."""
    return CODES.get("%s.%s" % (type(obj).__module__, type(obj).__qualname__))


def prior_args(prior):
    """``(code, pi, sigma1, sigma2)`` of a prior as the kernels take it, or None: not of a
    class they serve, or a log-uniform prior whose constants are not those they are compiled
    with."""
    density = code(prior)
    if density == table.PRIORS["gaussian"]:
        return density, 0.0, prior.sigma_p, 0.0
    if density == table.PRIORS["scale_mixture"]:
        return density, prior.pi, prior.sigma_p1, prior.sigma_p2
    if density == table.PRIORS["log_uniform"] and any(
            getattr(prior, name) != value for name, value in table.LOG_UNIFORM_CONSTANTS.items()):
        return None
    return None if density is None else (density, 0.0, 0.0, 0.0)


def serves_removal(prior, parametrization):
    """Whether ``kept`` serves the prior's rule of what it switches off under
    ``parametrization``."""
    args = prior_args(prior)
    return (args is not None and args[0] == table.PRIORS["log_uniform"]
            and code(parametrization) is not None)


def kept(prior, parametrization, mu, rho, keep):
    """Fill ``keep`` with 1 where an entry stays in the network under the prior's rule
    (``priors.removed``: the log-uniform prior's log alpha at most 3 and mu not 0), 0
    elsewhere, and set those entries of ``mu`` to 0; False (nothing written) where the kernels
    do not serve the prior's rule and ``parametrization`` (a subclass of a built-in
    included) or the arrays."""
    if not (serves_removal(prior, parametrization) and serves_arrays(mu, rho, keep)):
        return False
    library().bbb_kept(mu.size, _host_pointer(mu, write=True), _host_pointer(rho),
                       prior_args(prior)[0], code(parametrization),
                       _host_pointer(keep, write=True))
    return True


def _kernel_calls(estimator, kl, prior, parametrization, size=None):
    """``[(start, stop, codes, prior_args)]``, one call of the kernel a region of the
    parameters (``priors.Prior.regions``; the whole vector for a prior without) with the codes
    of the estimator's data term, the KL estimate's, the region's prior's and the
    parametrization's; None where a region's codes are not a row of ``table.SERVED``."""
    regions = prior.regions(size) if hasattr(prior, "regions") else [(0, size, prior)]
    calls = []
    for start, stop, part in regions:
        args = prior_args(part)
        codes = (code(estimator), code(kl), args and args[0], code(parametrization))
        if not table.serves(*codes):
            return None
        calls.append((start, stop, codes, args))
    return calls


def serves(estimator, kl, prior, parametrization):
    """Whether the C kernels implement these objects together: for the prior of each region of
    the parameters, a row of ``table.SERVED``."""
    return _kernel_calls(estimator, kl, prior, parametrization) is not None


def _at(pointer, start):
    """The address of float32 entry ``start`` of the array at ``pointer`` (None stays None)."""
    return None if pointer is None else ctypes.c_void_p((pointer.value or 0) + 4 * start)


def kl_gradients(mu, rho, eps, w, grad_data_mu, grad_data_sigma, estimator, kl_weight, prior,
                 kl, parametrization, grad_mu, grad_rho, keep=None):
    """The KL term summed over the N entries (a float) and the loss's gradients: fills
    grad_mu = dL/dmu and grad_rho = dL/drho of L = NLL + kl_weight * KL at w = mu +
    softplus(rho) * eps, given the data term's gradients of ``kind`` (an estimator's
    code, ``table.DATA_TERMS``): 0, dNLL/dw as both (weight sampling); 1, dNLL/dmu and the
    coefficient of eps in dNLL/dsigma (Flipout); 2, dNLL/dmu and dNLL/dsigma (the local
    reparametrization)."""
    calls = _kernel_calls(estimator, kl, prior, parametrization, rho.size)
    if calls is None:
        raise ValueError("the native kernels do not serve estimator %s, the %s %s KL, prior %s "
                         "and parametrization %s together (step.choose_backend keeps such a run "
                         "on the ndarray backend)" % (estimator, kl.direction, kl,
                                                      prior.describe(), parametrization.name))
    inputs = [_host_pointer(array) for array in (mu, rho, eps, w, grad_data_mu,
                                                 grad_data_sigma)]
    keep = _optional(keep)
    outputs = [_host_pointer(array, write=True) for array in (grad_mu, grad_rho)]
    total = 0.0
    for start, stop, (kind, kl_code, density, parametrization_code), args in calls:
        _, pi, sigma1, sigma2 = args
        total += library().bbb_kl_gradients(
            stop - start, *(_at(pointer, start) for pointer in inputs), kind, kl_weight,
            kl_code, density, parametrization_code, pi, sigma1, sigma2, _at(keep, start),
            *(_at(pointer, start) for pointer in outputs))
    return total


class Workspace:
    """The (N,) float32 arrays a native step writes, kept on ``ctx`` from step to step: eps, w,
    dNLL/dw, dL/dmu and dL/drho; sigma and the perturbation sigma * eps made on first use, by
    the estimators that need them (``extra_workspace_vectors``), and the means the network
    takes (``drawn_mu``) by a run that removes entries."""

    def __init__(self, size, ctx):
        self._size, self._ctx = size, ctx
        self.eps, self.w, self.grad_w, self.grad_mu, self.grad_rho = (
            self._zeros() for _ in range(5))

    def _zeros(self):
        return mx.nd.zeros((self._size,), ctx=self._ctx, dtype="float32")

    sigma = functools.cached_property(_zeros)
    delta = functools.cached_property(_zeros)
    drawn_mu = functools.cached_property(_zeros)


# the data term of one draw for each estimator the kernels serve: ``(nll, dNLL/dmu,
# dNLL/dsigma or its coefficient of eps, eps, w)``, as its code (``table.DATA_TERMS``) says

def _drawn_mu(mu, keep, ws):
    return mu if keep is None else ws.drawn_mu


def _sampled_weights(estimator, graph, X, targets, mu, rho, noise, ws, kl, parametrization,
                     keep):
    if parametrization == SOFTPLUS and keep is None:  # the draw and the weights in one pass
        sample_weights(mu, rho, noise.key, noise.next_stream(), ws.eps, ws.w)
    else:
        normals_into(ws.eps, noise.key, noise.next_stream())
        perturb(mu, rho, ws.eps, parametrization, keep, w=ws.w)
    nll = graph.nll_and_grad(X, targets, ws.w, ws.grad_w, graph_operators(graph, estimator))[0]
    return nll, ws.grad_w, ws.grad_w, ws.eps, ws.w


def _local_reparametrization(estimator, graph, X, targets, mu, rho, noise, ws, kl,
                             parametrization, keep):
    eps = noise.normal((estimator.noise_size(graph, X.shape[0], kl),))
    split = estimator.data_noise_size(graph, X.shape[0])
    eps_w = eps[split:] if kl.per_draw else ws.eps  # the KL's weight sample (closed form: none)
    drawn_mu = _drawn_mu(mu, keep, ws)
    perturb(mu, rho, eps_w, parametrization, keep,
            drawn_mu=drawn_mu if keep is not None else None, sigma=ws.sigma,
            delta=ws.delta if kl.per_draw else None, w=ws.w if kl.per_draw else None)
    nll, grad_mu, grad_sigma = graph.noisy_nll_and_grads(estimator, X, targets, drawn_mu,
                                                         ws.sigma, eps[:split],
                                                         graph_operators(graph, estimator))
    return nll, grad_mu, grad_sigma, eps_w, ws.w


def graph_operators(graph, estimator=None):
    """What the native backend builds ``graph``'s network graphs from (a ``NetworkGraph``,
    drawn by ``estimator``, None for a graph of given weights): MXNet's symbols, with this
    accelerator's operators beside them (``operators.py``) where the graph takes any and MXNet
    has loaded them."""
    if not takes_graph_operators(estimator, graph.network):
        return mx.sym
    return _accelerated_symbols(graph.DATA_INPUT)


@functools.lru_cache(maxsize=None)
def _accelerated_symbols(data_input):
    """MXNet's symbols with the accelerator's operators beside them where MXNet has loaded
    them, for graphs whose data is the input named ``data_input``."""
    return (operators.Accelerated(mx.sym, data_inputs=[data_input]) if operators.available()
            else mx.sym)


def _flipout(estimator, graph, X, targets, mu, rho, noise, ws, kl, parametrization, keep):
    eps = noise.normal((estimator.noise_size(graph, X.shape[0], kl),))
    eps_w = eps[:graph.layout.size]
    drawn_mu = _drawn_mu(mu, keep, ws)
    perturb(mu, rho, eps_w, parametrization, keep,
            drawn_mu=drawn_mu if keep is not None else None, delta=ws.delta, w=ws.w)
    nll, grad_mu, grad_delta = graph.noisy_nll_and_grads(
        estimator, X, targets, drawn_mu, ws.delta, eps[graph.layout.size:],
        graph_operators(graph, estimator))
    return nll, grad_mu, grad_delta, eps_w, ws.w


# by the estimator's code (table.DATA_TERMS): its data term, and the parameter-sized vectors
# it uses beyond the five every native step holds
DATA_TERMS = {table.DATA_TERMS["sample"]: (_sampled_weights, 0),
              table.DATA_TERMS["lrt"]: (_local_reparametrization, 2),  # sigma, sigma * eps
              table.DATA_TERMS["flipout"]: (_flipout, 1)}  # the perturbation sigma * eps


def takes_graph_operators(estimator, network):
    """Whether a native graph of ``network`` drawn by ``estimator`` (None: of given weights)
    takes ``operators.py``'s operators: the local reparametrization's and Flipout's, or a
    max pooling's."""
    return network.accelerated_poolings or code(estimator) in (
        table.DATA_TERMS["lrt"], table.DATA_TERMS["flipout"])


def extra_workspace_vectors(estimator):
    """The parameter-sized vectors ``estimator``'s native data term uses beyond the five of
    every native step (0 for one the kernels do not serve)."""
    return DATA_TERMS.get(code(estimator), (None, 0))[1]


def loss_gradients(X, targets, mu, rho, noise, num_samples, prior, kl_weight, graph, workspace,
                   kl, estimator, parametrization=SOFTPLUS, keep=None):
    """``learning.step.combined_loss_gradients`` on a CPU context, for a combination of
    ``table.SERVED``, the noise of ``num_samples`` Philox streams of ``noise`` (a
    ``noise.PhiloxNoise``), the same draws as the ndarray backend takes; ``kl`` and
    ``estimator``: ``family/estimators.py`` objects (the estimator's data term is its function of
    ``DATA_TERMS``); ``keep`` (0/1, or None) as there (``Config.remove_switched_off``)."""
    ws = workspace
    loss = grad_mu = grad_rho = None
    data_term = DATA_TERMS[code(estimator)][0]
    for sample in range(num_samples):
        nll, data_mu, data_sigma, eps, w = data_term(estimator, graph, X, targets, mu, rho,
                                                     noise, ws, kl, parametrization, keep)
        sample_loss = _plus(nll, kl_weight * kl_gradients(
            mu, rho, eps, w, data_mu, data_sigma, estimator, kl_weight, prior, kl,
            parametrization, ws.grad_mu, ws.grad_rho, keep))
        if num_samples == 1:
            return sample_loss, ws.grad_mu, ws.grad_rho
        if sample == 0:
            loss, grad_mu, grad_rho = sample_loss, ws.grad_mu.copy(), ws.grad_rho.copy()
        else:
            loss = loss + sample_loss
            grad_mu, grad_rho = grad_mu + ws.grad_mu, grad_rho + ws.grad_rho
    return loss / num_samples, grad_mu / num_samples, grad_rho / num_samples


def _plus(array, value):
    """``array + value`` for a float ``value``."""
    if math.isfinite(value):
        return array + value
    return array + mx.nd.array([value], ctx=array.context, dtype=array.dtype)


def optimizer_update(optimizer, index, weight, grad, state):
    """``optimizer.update(index, weight, grad, state)`` by a native kernel: ``mx.optimizer`` SGD
    without momentum or Adam, no gradient clipping, float32 arrays on a CPU context (else by
    ``optimizer.update`` itself)."""
    is_sgd = type(optimizer) is mx.optimizer.SGD and optimizer.momentum == 0.0
    is_adam = type(optimizer) is mx.optimizer.Adam
    if (not available() or not (is_sgd or is_adam) or optimizer.clip_gradient is not None
            or weight.context.device_type != "cpu" or weight.dtype != np.float32
            or grad.dtype != np.float32):
        return optimizer.update(index, weight, grad, state)
    optimizer._update_count(index)
    lr, wd = optimizer._get_lr(index), optimizer._get_wd(index)
    if is_sgd:
        library().bbb_sgd_update(weight.size, _host_pointer(weight, write=True),
                                 _host_pointer(grad), lr, wd, optimizer.rescale_grad)
        return None
    count = optimizer._index_update_count[index]
    lr *= math.sqrt(1.0 - optimizer.beta2 ** count) / (1.0 - optimizer.beta1 ** count)
    mean, var = state
    library().bbb_adam_update(
        weight.size, _host_pointer(weight, write=True), _host_pointer(grad),
        _host_pointer(mean, write=True), _host_pointer(var, write=True), lr, wd,
        optimizer.rescale_grad, optimizer.beta1, optimizer.beta2, optimizer.epsilon)
    return None


def prior_terms(prior, x, scale, with_precision=False):
    """The prior's terms at ``x`` by the kernel (``bbb_prior_terms``): (the sum of log P(x) as
    a float, scale x p(x) = the gradient of -scale log P, and scale p(x) with
    ``with_precision``, else None), p(x) = -(d log P / dx) / x the prior's precision at x
    (``Prior.gradient_precision``)."""
    args = prior_args(prior)
    if args is None or args[0] not in table.DENSITIES or scale < 0 \
            or not serves_arrays(x):
        return None
    gradient = mx.nd.empty(x.shape, ctx=x.context)
    precision = mx.nd.empty(x.shape, ctx=x.context) if with_precision else None
    code, pi, s1, s2 = args
    total = library().bbb_prior_terms(x.size, _host_pointer(x), code, pi, s1, s2, scale,
                                      _host_pointer(gradient, write=True),
                                      _optional(precision, write=True))
    return total, gradient, precision


def serves_arrays(*arrays):
    """Whether the kernels can take these arrays: built and loaded, each a float32 NDArray on a
    CPU context (None: an array not given)."""
    return available() and all(a is None or (a.context.device_type == "cpu"
                                             and a.dtype == np.float32) for a in arrays)


def _optional(array, write=False):
    return None if array is None else _host_pointer(array, write)


def ivon_draw(mean, hessian, prior_precision, ess, weight_decay, floor, key, stream, noise,
              weights):
    """IVON's draw: fills ``noise`` with z / sqrt(ess max(h + wd + p, floor)), z the normals
    of Philox ``stream`` under ``key`` (those of ``normals``), and ``weights`` with mean +
    noise (``prior_precision`` p: None for none)."""
    library().bbb_ivon_draw(mean.size, _host_pointer(mean), _host_pointer(hessian),
                            _optional(prior_precision), ess, weight_decay, floor, int(key[0]),
                            int(key[1]), stream, _host_pointer(noise, write=True),
                            _host_pointer(weights, write=True))


def ivon_update(mean, momentum, hessian, grad, noise, prior_gradient, prior_precision, rescale,
                ess, weight_decay, floor, beta1, beta2, bias_correction, step_size,
                clip_radius, log_variance):
    """IVON's update of ``mean``, ``momentum`` and ``hessian`` in place from one draw: ``grad``
    at mean + ``noise``, times ``rescale``; the prior's terms at the means (both None: none);
    ``log_variance`` filled with log sigma^2 of the new state without the prior's precision
    (the log-variance itself where there is no prior)."""
    if (prior_gradient is None) != (prior_precision is None):
        raise ValueError("ivon_update takes both of the prior's terms or neither")
    library().bbb_ivon_update(
        mean.size, _host_pointer(mean, write=True), _host_pointer(momentum, write=True),
        _host_pointer(hessian, write=True), _host_pointer(grad), _host_pointer(noise),
        _optional(prior_gradient), _optional(prior_precision), rescale, ess, weight_decay,
        floor, beta1, beta2, 0.5 * (1.0 - beta2) ** 2, bias_correction, step_size,
        min(clip_radius, FLOAT32_MAX), _host_pointer(log_variance, write=True))


def ivon_log_variance(hessian, prior_precision, ess, weight_decay, floor, log_variance):
    """Fill ``log_variance`` with -log(ess max(h + wd + p, floor)): IVON's log sigma^2 with the
    prior's precision p. All (N,) float32 NDArrays on a CPU context."""
    library().bbb_ivon_log_variance(hessian.size, _host_pointer(hessian),
                                    _host_pointer(prior_precision), ess, weight_decay, floor,
                                    _host_pointer(log_variance, write=True))


def conv_maxpool(h, W, b, pool, relu=False, widest=16):
    """``networks.layers.Conv2D``'s convolution (stride 1, no padding) of ``h`` (N, C, H, W)
    with ``W`` (OC, C, K, K) and ``b`` (OC,), then ``MaxPool2D``'s pooling of ``pool`` x
    ``pool`` windows at stride ``pool`` (and, with ``relu``, ``ReLU``), in one pass
    (``bbb_conv_maxpool``); forward only."""
    N, C, height, width = h.shape
    channels, _, kernel, _ = W.shape
    out = mx.nd.empty((N, channels, (height - kernel + 1) // pool, (width - kernel + 1) // pool),
                      ctx=h.context)
    if library().bbb_conv_maxpool(N, C, height, width, channels, kernel, pool, _host_pointer(h),
                                  _host_pointer(W), _host_pointer(b),
                                  _host_pointer(out, write=True), bool(relu), widest):
        raise MemoryError("bbb_conv_maxpool: no memory for an image's patches")
    return out


class _ConvolutionMaxPool:
    """MXNet's NDArray operators ``F`` with ``ConvolutionMaxPool``, the name the networks'
    forward pass takes a convolution and its max pooling by (``Network.run``)."""

    def __init__(self, F):
        self._F, self.__name__ = F, F.__name__

    def __getattr__(self, name):
        return getattr(self._F, name)

    @staticmethod
    def ConvolutionMaxPool(h, W, b, num_filter, kernel, pool, relu=False):
        return conv_maxpool(h, W, b, pool, relu)


def with_convolution_max_pool(F, arrays):
    """``F`` (MXNet's NDArray operators) with the kernel's ``ConvolutionMaxPool`` where the
    kernels can take ``arrays`` (``serves_arrays``), else ``F`` itself."""
    return _ConvolutionMaxPool(F) if serves_arrays(*arrays) else F

"""The native backend of the training step: the C kernels of ``_fused.c``, loaded with ctypes.

On a CPU context ``combined_loss_gradients`` computes what
``ndarray_backend.combined_loss_gradients`` computes, for every estimator, with the
parameter-side work in two passes over the flat vectors: draw eps and form w = mu +
softplus(rho) * eps (or sigma and the perturbation for the other estimators), then, after the
network's forward and backward pass, the KL term and both gradients. ``optimizer_update`` runs
MXNet's SGD and Adam updates in place.

The library is built at install time (``setup.py``; it needs a C compiler). It is used only if
it loads, was built from the ``_fused.c`` beside it (not older than it) and reports the
``ABI_VERSION`` below; otherwise ``available()`` is False, ``unavailable_reason()`` says why
and training uses the NDArray backend.
"""
import ctypes
import functools
import glob
import math
import os
import sys

import mxnet as mx
import numpy as np


ABI_VERSION = 5           # must match ABI_VERSION in _fused.c

_P, _I64, _U64, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float
_SIGNATURES = {
    "bbb_abi_version": ([], ctypes.c_int),
    "bbb_philox_words": ([_I64, _U64, _U64, _U64, _U64, _P], None),
    "bbb_normals": ([_I64, _U64, _U64, _U64, _P], None),
    "bbb_sample_weights": ([_I64, _P, _P, _U64, _U64, _U64, _P, _P], None),
    "bbb_kl_gradients": ([_I64, _P, _P, _P, _P, _P, _P, ctypes.c_int, _F32, ctypes.c_int,
                          ctypes.c_int, _F32, _F32, _F32, _P, _P], ctypes.c_double),
    "bbb_serves": ([ctypes.c_int] * 3, ctypes.c_int),
    "bbb_perturb": ([_I64, _P, _P, _P, _P, _P, _P], None),
    "bbb_sgd_update": ([_I64, _P, _P, _F32, _F32, _F32], None),
    "bbb_adam_update": ([_I64, _P, _P, _P, _P] + [_F32] * 6, None),
}


@functools.lru_cache(maxsize=None)
def _load():
    """(library or None, why not) for the built ``_fused`` shared object. A library that is
    there but does not match this source is reported once, on one line of stderr."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = sorted(glob.glob(os.path.join(here, "_fused*.so")))
    if not paths:
        return None, ("the native kernels are not built (reinstall with a C compiler present: "
                      "pip install -e .)")
    source = os.path.join(here, "_fused.c")
    problem = None
    if os.path.exists(source) and os.path.getmtime(source) > os.path.getmtime(paths[0]):
        problem = "%s is older than _fused.c (rebuild: pip install -e .)" % paths[0]
    else:
        try:
            lib = ctypes.CDLL(paths[0])
            version = lib.bbb_abi_version() if hasattr(lib, "bbb_abi_version") else None
        except OSError as exc:
            return None, "cannot load %s: %s" % (paths[0], exc)
        if version != ABI_VERSION:
            problem = ("%s has version %s, this gluon_bbb needs %d (rebuild: pip install -e .)"
                       % (paths[0], version, ABI_VERSION))
    if problem:
        sys.stderr.write("gluon_bbb: warning: %s; using the ndarray backend\n" % problem)
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


def perturb(mu, rho, eps, sigma=None, delta=None, w=None):
    """Fill ``sigma`` with softplus(rho) and, where ``delta`` is given, ``delta`` with
    sigma * eps and ``w`` with mu + delta (the estimators that draw their noise in one vector
    beforehand). All (N,) float32 NDArrays on a CPU context."""
    library().bbb_perturb(
        rho.size, _host_pointer(mu), _host_pointer(rho), _host_pointer(eps),
        _host_pointer(sigma, write=True) if sigma is not None else None,
        _host_pointer(delta, write=True) if delta is not None else None,
        _host_pointer(w, write=True) if w is not None else None)


def serves(kind, kl_code, prior_code):
    """Whether the C kernels implement the data term ``kind`` (an estimator's
    ``kernel_data_kind``), the KL estimate ``kl_code`` (``kernel_code``) and the prior
    ``prior_code`` (the first of its ``kernel_args``) together: the C code's own answer
    (``bbb_serves``), so that Python and C cannot disagree about what it serves."""
    if None in (kind, kl_code, prior_code):
        return False
    return bool(library().bbb_serves(kind, kl_code, prior_code))


def kl_gradients(mu, rho, eps, w, grad_data_mu, grad_data_sigma, kind, kl_weight, prior, kl,
                 grad_mu, grad_rho):
    """The KL term summed over the N entries (a float) and the loss's gradients: fills
    grad_mu = dL/dmu and grad_rho = dL/drho of L = NLL + kl_weight * KL at w = mu +
    softplus(rho) * eps, given the data term's gradients of ``kind`` (an estimator's
    ``kernel_data_kind``): 0, dNLL/dw as both (weight sampling); 1, dNLL/dmu and the
    coefficient of eps in dNLL/dsigma (Flipout); 2, dNLL/dmu and dNLL/dsigma (the local
    reparametrization).

    ``prior``: a ``priors.py`` object (its ``kernel_args``); ``kl``: a ``modes.KLEstimate``
    (its ``kernel_code``): the Monte Carlo KL, log q(w) - log P(w), or the closed form. All
    arrays (N,) float32 on a CPU context.
    """
    density, pi, sigma1, sigma2 = prior.kernel_args()
    if not serves(kind, kl.kernel_code, density):
        raise ValueError("the native kernels do not serve data term %r, KL estimate %r and "
                         "prior %r together (step.choose_backend keeps such a run on the "
                         "ndarray backend)" % (kind, kl.kernel_code, density))
    return library().bbb_kl_gradients(
        rho.size, _host_pointer(mu), _host_pointer(rho), _host_pointer(eps), _host_pointer(w),
        _host_pointer(grad_data_mu), _host_pointer(grad_data_sigma), kind,
        kl_weight, kl.kernel_code, density, pi, sigma1, sigma2,
        _host_pointer(grad_mu, write=True), _host_pointer(grad_rho, write=True))


class Workspace:
    """The (N,) float32 arrays a native step writes, kept on ``ctx`` from step to step: eps, w,
    dNLL/dw, dL/dmu and dL/drho; sigma and the perturbation sigma * eps made on first use, by
    the estimators that need them (``modes.Estimator.extra_workspace_vectors``)."""

    def __init__(self, size, ctx):
        self._size, self._ctx = size, ctx
        self.eps, self.w, self.grad_w, self.grad_mu, self.grad_rho = (
            self._zeros() for _ in range(5))

    def _zeros(self):
        return mx.nd.zeros((self._size,), ctx=self._ctx, dtype="float32")

    sigma = functools.cached_property(_zeros)
    delta = functools.cached_property(_zeros)


def combined_loss_gradients(X, y_one_hot, mu, rho, noise, num_samples, prior, kl_weight,
                            graph, workspace, kl, estimator):
    """``ndarray_backend.combined_loss_gradients`` on a CPU context, the noise of
    ``num_samples`` Philox streams of ``noise`` (a ``noise.PhiloxNoise``), the same draws as the
    ndarray backend takes; ``kl`` and ``estimator``: ``modes.py`` objects (the estimator's
    ``native_data_term`` gives the data term). Returns ``(loss (1,), dL/dmu (N,),
    dL/drho (N,))``; with one sample the gradients live in ``workspace`` and are overwritten by
    its next step."""
    ws = workspace
    loss = grad_mu = grad_rho = None
    for sample in range(num_samples):
        nll, data_mu, data_sigma, eps, w = estimator.native_data_term(
            graph, X, y_one_hot, mu, rho, noise, ws, kl)
        sample_loss = nll + kl_weight * kl_gradients(
            mu, rho, eps, w, data_mu, data_sigma, estimator.kernel_data_kind, kl_weight, prior,
            kl, ws.grad_mu, ws.grad_rho)
        if num_samples == 1:
            return sample_loss, ws.grad_mu, ws.grad_rho
        if sample == 0:
            loss, grad_mu, grad_rho = sample_loss, ws.grad_mu.copy(), ws.grad_rho.copy()
        else:
            loss = loss + sample_loss
            grad_mu, grad_rho = grad_mu + ws.grad_mu, grad_rho + ws.grad_rho
    return loss / num_samples, grad_mu / num_samples, grad_rho / num_samples


def optimizer_update(optimizer, index, weight, grad, state):
    """``optimizer.update(index, weight, grad, state)`` by a native kernel: ``mx.optimizer`` SGD
    without momentum or Adam, no gradient clipping, float32 arrays on a CPU context (else by
    ``optimizer.update`` itself). Same formulas, state arrays and update counts as MXNet's, so
    checkpoints and resumed runs do not see the difference; MXNet's own operators take 0.6 ms
    (SGD) and 1.1 ms (Adam) per 478k entries here."""
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

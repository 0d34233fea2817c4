"""ctypes bindings of the fused CPU kernels in ``_fused.c``, and their NumPy reference.

The library is built at install time (``setup.py``; it needs a C compiler). Where it is missing,
``normals`` falls back to ``philox_normals_reference`` (the same draws, to float rounding) and
training uses the NDArray operators of ``step.bbb_gradients``; ``available()`` says which.

Normal draws come from Philox4x64-10 (the counter-based generator NumPy offers as
``np.random.Philox``) by Box-Muller: a 128-bit key derived from the seed and a stream number
fix them, whatever the device or the number of threads. The uniforms have 24 bits, so no
draw exceeds 5.9 in absolute value (a standard normal does with probability 4e-9).
"""
import ctypes
import functools
import glob
import math
import os

import mxnet as mx
import numpy as np

CHUNK = 8192              # entries per chunk of draws; must match _fused.c
BLOCKS_PER_CHUNK = 1024   # Philox blocks (4 words) reserved per chunk
GAUSSIAN, SCALE_MIXTURE, GAUSSIAN_CLOSED_FORM = 0, 1, 2  # the KL terms bbb_kl_gradients knows

_P, _I64, _U64, _F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float


@functools.lru_cache(maxsize=None)
def _load():
    """(library or None, why not) for the built ``_fused`` shared object."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = sorted(glob.glob(os.path.join(here, "_fused*.so")))
    if not paths:
        return None, ("gluon_bbb's native kernels were not built (reinstall with a C compiler "
                      "present: pip install -e .)")
    try:
        lib = ctypes.CDLL(paths[0])
    except OSError as exc:
        return None, "cannot load %s: %s" % (paths[0], exc)
    lib.bbb_philox_words.argtypes = [_I64, _U64, _U64, _U64, _U64, _P]
    lib.bbb_philox_words.restype = None
    lib.bbb_normals.argtypes = [_I64, _U64, _U64, _U64, _P]
    lib.bbb_normals.restype = None
    lib.bbb_sample_weights.argtypes = [_I64, _P, _P, _U64, _U64, _U64, _P, _P]
    lib.bbb_sample_weights.restype = None
    lib.bbb_kl_gradients.argtypes = [_I64, _P, _P, _P, _P, _P, _P, _F32, ctypes.c_int, _F32,
                                     _F32, _F32, _P, _P]
    lib.bbb_kl_gradients.restype = ctypes.c_double
    lib.bbb_sample_kl_gradients.argtypes = [_I64, _P, _P, _U64, _U64, _U64, _P, _P, _F32,
                                            ctypes.c_int, _F32, _F32, _F32, _P, _P]
    lib.bbb_sample_kl_gradients.restype = ctypes.c_double
    lib.bbb_softplus.argtypes = [_I64, _P, _P]
    lib.bbb_softplus.restype = None
    lib.bbb_sgd_update.argtypes = [_I64, _P, _P, _F32, _F32, _F32]
    lib.bbb_sgd_update.restype = None
    lib.bbb_adam_update.argtypes = [_I64, _P, _P, _P, _P] + [_F32] * 6
    lib.bbb_adam_update.restype = None
    return lib, None


def available():
    """True where the native kernels are built and loadable."""
    return _load()[0] is not None


def unavailable_reason():
    """Why ``available()`` is False (None when it is True)."""
    return _load()[1]


def _library():
    lib, why = _load()
    if lib is None:
        raise RuntimeError(why)
    return lib


def philox_key(seed):
    """The (2,) uint64 Philox key for ``seed`` (an int, a list of ints, or None for fresh
    entropy), derived with ``np.random.SeedSequence``."""
    return np.random.SeedSequence(seed).generate_state(2, dtype=np.uint64)


def philox_words(count, key, first, stream):
    """``count`` raw uint64 words of Philox4x64-10 for counters (first + 1, stream, 0, 0), ...:
    what ``np.random.Philox(key=key, counter=[first, stream, 0, 0]).random_raw(count)`` gives."""
    words = np.empty(count, dtype=np.uint64)
    _library().bbb_philox_words(count, int(key[0]), int(key[1]), first, stream,
                                words.ctypes.data)
    return words


def philox_normals_reference(size, key, stream):
    """(size,) float32 standard normals of ``stream``, written in NumPy: the definition the
    C kernels follow (and the fallback where they are not built)."""
    out = np.empty(size, dtype=np.float32)
    scale = np.float32(2.0 ** -24)
    for lo in range(0, size, CHUNK):
        length = min(CHUNK, size - lo)
        half = (length + 1) // 2
        words = np.random.Philox(key=key, counter=[lo // CHUNK * BLOCKS_PER_CHUNK, stream, 0, 0]
                                 ).random_raw(half)
        uniforms = np.empty(2 * half, dtype=np.float32)
        uniforms[0::2] = ((words >> np.uint64(40)).astype(np.float32) + 0.5) * scale
        uniforms[1::2] = (((words >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.float32)
                          + 0.5) * scale
        radius = np.sqrt(np.float32(-2.0) * np.log(uniforms[:half]))
        angle = np.float32(2 * np.pi) * uniforms[half:]
        out[lo:lo + half] = radius * np.cos(angle)
        out[lo + half:lo + length] = (radius * np.sin(angle))[:length - half]
    return out


def normals(size, key, stream):
    """(size,) float32 standard normals of ``stream`` as a NumPy array."""
    if not available():
        return philox_normals_reference(size, key, stream)
    out = np.empty(size, dtype=np.float32)
    _library().bbb_normals(size, int(key[0]), int(key[1]), stream, out.ctypes.data)
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
    _library().bbb_sample_weights(mu.size, _host_pointer(mu), _host_pointer(rho),
                                  int(key[0]), int(key[1]), stream,
                                  _host_pointer(eps, write=True), _host_pointer(w, write=True))


def normals_into(out, key, stream):
    """Fill the float32 CPU NDArray ``out`` with the normals of ``stream`` (row-major order)."""
    _library().bbb_normals(out.size, int(key[0]), int(key[1]), stream,
                           _host_pointer(out, write=True))


def softplus(rho, sigma):
    """sigma = softplus(rho) for (N,) float32 NDArrays on a CPU context."""
    _library().bbb_softplus(rho.size, _host_pointer(rho), _host_pointer(sigma, write=True))


def kl_gradients(mu, rho, eps, w, grad_mu_data, grad_sigma_data, kl_weight, prior_args,
                 grad_mu, grad_rho):
    """The KL term summed over the N entries (a float) and the loss's gradients: fills
    grad_mu = dL/dmu and grad_rho = dL/drho of L = NLL + kl_weight * KL.

    ``prior_args``: ``(kind, pi, sigma1, sigma2)``; kind ``GAUSSIAN`` or ``SCALE_MIXTURE`` takes
    the Monte Carlo KL, log q(w) - log P(w) at w = mu + softplus(rho) * eps (``mu`` unused),
    ``GAUSSIAN_CLOSED_FORM`` the closed-form KL to N(0, sigma1^2) (``w`` unused). The data
    term's gradients: ``grad_mu_data`` = dNLL/dw with ``grad_sigma_data`` None (weight
    sampling), or dNLL/dmu and dNLL/dsigma (local reparametrization; ``eps`` then only feeds
    the Monte Carlo KL). All arrays (N,) float32 on a CPU context; unused ones may be None.
    """
    kind, pi, sigma1, sigma2 = prior_args
    pointer = lambda a: None if a is None else _host_pointer(a)
    return _library().bbb_kl_gradients(
        rho.size, pointer(mu), _host_pointer(rho), pointer(eps), pointer(w),
        _host_pointer(grad_mu_data), pointer(grad_sigma_data), kl_weight, kind, pi, sigma1,
        sigma2, _host_pointer(grad_mu, write=True), _host_pointer(grad_rho, write=True))


def sample_kl_gradients(mu, rho, key, stream, grad_mu_data, grad_sigma_data, kl_weight,
                        prior_args, grad_mu, grad_rho):
    """``kl_gradients`` for the local reparametrization with the Monte Carlo KL, its weight
    sample drawn inside the same pass (eps: the normals of ``stream``, those ``sample_weights``
    draws) instead of in arrays of its own; ``prior_args`` of kind ``GAUSSIAN`` or
    ``SCALE_MIXTURE``. Returns the KL term's sum; fills grad_mu and grad_rho."""
    kind, pi, sigma1, sigma2 = prior_args
    if kind not in (GAUSSIAN, SCALE_MIXTURE):
        raise ValueError("sample_kl_gradients takes a Monte Carlo KL, got kind %r" % (kind,))
    return _library().bbb_sample_kl_gradients(
        rho.size, _host_pointer(mu), _host_pointer(rho), int(key[0]), int(key[1]), stream,
        _host_pointer(grad_mu_data), _host_pointer(grad_sigma_data), kl_weight, kind, pi,
        sigma1, sigma2, _host_pointer(grad_mu, write=True), _host_pointer(grad_rho, write=True))


def optimizer_update(optimizer, index, weight, grad, state):
    """``optimizer.update(index, weight, grad, state)``, by a native kernel where one serves:
    ``mx.optimizer`` SGD without momentum or Adam, no gradient clipping, float32 arrays on a
    CPU context (else by ``optimizer.update`` itself). Same formulas, same state arrays and
    update counts as MXNet's, so checkpoints and resumed runs do not see the difference;
    MXNet's own operators take 0.6 ms (SGD) and 1.1 ms (Adam) per 478k entries here."""
    is_sgd = type(optimizer) is mx.optimizer.SGD and optimizer.momentum == 0.0
    is_adam = type(optimizer) is mx.optimizer.Adam
    if (not available() or not (is_sgd or is_adam) or optimizer.clip_gradient is not None
            or weight.context.device_type != "cpu" or weight.dtype != np.float32
            or grad.dtype != np.float32):
        return optimizer.update(index, weight, grad, state)
    optimizer._update_count(index)
    lr, wd = optimizer._get_lr(index), optimizer._get_wd(index)
    if is_sgd:
        _library().bbb_sgd_update(weight.size, _host_pointer(weight, write=True),
                                  _host_pointer(grad), lr, wd, optimizer.rescale_grad)
        return None
    count = optimizer._index_update_count[index]
    lr *= math.sqrt(1.0 - optimizer.beta2 ** count) / (1.0 - optimizer.beta1 ** count)
    mean, var = state
    _library().bbb_adam_update(
        weight.size, _host_pointer(weight, write=True), _host_pointer(grad),
        _host_pointer(mean, write=True), _host_pointer(var, write=True), lr, wd,
        optimizer.rescale_grad, optimizer.beta1, optimizer.beta2, optimizer.epsilon)
    return None

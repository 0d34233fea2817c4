"""The MXNet operators of the C accelerator (``_operators.cc``), loaded into MXNet with
``mx.library.load``, and ``Accelerated``, the operator set through which a network graph of the
native backend takes them."""
import functools

from ..family.elementwise import LRT_VARIANCE_FLOOR
from .built import open_built

ABI_VERSION = 5  # must match OPERATORS_ABI_VERSION in _operators.cc


@functools.lru_cache(maxsize=None)
def _load():
    """(True, None) once MXNet has loaded the operators, else (False, why not)."""
    lib, problem, _ = open_built("_operators", ("_operators.cc", "_conv_tiles.h"),
                                 "bbb_operators_abi_version", ABI_VERSION, "operators")
    if lib is None:
        return False, problem
    import mxnet as mx
    try:
        mx.library.load(lib._name, verbose=False)
    except mx.base.MXNetError as exc:
        return False, "MXNet does not load %s: %s" % (lib._name, str(exc).splitlines()[0])
    return True, None


def available():
    """True where MXNet has the operators (built, current, loaded)."""
    return _load()[0]


def unavailable_reason():
    """Why ``available()`` is False (None when it is True)."""
    return _load()[1]


class Accelerated:
    """MXNet's operator set ``F`` (``mx.sym`` or ``mx.nd``) with the operators of this library
    beside them, for float32 graphs on CPU contexts: what the layers' formulas take as ``F``
    where the native backend builds its graphs."""

    def __init__(self, F, data_inputs=()):
        """``data_inputs``: the names of a symbolic graph's inputs whose gradient no one takes
        (its data): a layer whose input is computed from them alone skips its gradient."""
        if not available():
            raise RuntimeError(unavailable_reason())
        self._F = F
        self._data_inputs = frozenset(data_inputs)
        self.__name__ = F.__name__

    def __getattr__(self, name):
        return getattr(self._F, name)

    def lrt_output(self, mean, variance, noise):
        """mean + sqrt(variance + ``LRT_VARIANCE_FLOOR``) * noise."""
        return self._F.bbb_lrt_output(mean, variance, noise, floor=repr(LRT_VARIANCE_FLOOR))

    def lrt_convolution(self, h, mus, sigmas, noise, widest=16):
        """A convolution layer's local reparametrization (``networks.layers.Conv2D``, stride
        1, no padding) in one operator, ``bbb_lrt_convolution``: conv(h, W_mu) + b_mu +
        sqrt(conv(h^2, W_sigma^2) + b_sigma^2 + ``LRT_VARIANCE_FLOOR``) * noise, for
        ``mus`` [W_mu, b_mu] and ``sigmas`` [W_sigma, b_sigma]; h's gradient is written as
        zeros where h is computed from ``data_inputs`` alone."""
        outputs = self._F.bbb_lrt_convolution(
            h, mus[0], mus[1], sigmas[0], sigmas[1], noise, floor=repr(LRT_VARIANCE_FLOOR),
            input_gradient=str(int(not self._from_data(h))), widest=str(int(widest)))
        return outputs[0]

    def flipout_convolution(self, h, mus, deltas, noise_in, noise_out, widest=16):
        """A convolution layer's Flipout (``networks.layers.Conv2D``, stride 1, no padding) in
        one operator, ``bbb_flipout_convolution``: conv(h, W_mu) + b_mu + (conv(h s,
        W_delta) + b_delta) r, s and r the signs of ``noise_in`` (N, C, 1, 1) and
        ``noise_out`` (N, OC, 1, 1), for ``mus`` [W_mu, b_mu] and ``deltas`` [W_delta,
        b_delta]; h's gradient as ``lrt_convolution``'s."""
        return self._F.bbb_flipout_convolution(
            h, mus[0], mus[1], deltas[0], deltas[1], noise_in, noise_out,
            input_gradient=str(int(not self._from_data(h))), widest=str(int(widest)))

    def scaled(self, x, factors):
        """x times ``factors`` broadcast over x's trailing axes where ``factors`` has size 1, in
        one operator each way, ``bbb_scaled``."""
        return self._F.bbb_scaled(x, factors)

    def max_pool(self, h, size, relu):
        """Max pooling over ``size`` x ``size`` windows at stride ``size`` (MXNet's
        ``Pooling``, ``pool_type="max"``) of h (N, C, H, W), then ``relu`` where True, in one
        operator, ``bbb_max_pool``; a window's gradient goes to its first largest entry."""
        return self._F.bbb_max_pool(h, size=str(int(size)), relu=str(int(bool(relu))))

    def _from_data(self, h):
        """Whether symbol ``h`` is computed from ``data_inputs`` alone."""
        return hasattr(h, "list_arguments") and set(h.list_arguments()) <= self._data_inputs

    def signed(self, x, noise):
        """x times the signs of ``noise``, broadcast over x's trailing axes where ``noise`` has
        size 1."""
        return self._F.bbb_signed(x, noise)

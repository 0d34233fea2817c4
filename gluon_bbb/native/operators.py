"""The MXNet operators of the C accelerator (``_operators.cc``), loaded into MXNet with
``mx.library.load``, and ``Accelerated``, the operator set through which a network graph of the
native backend takes them.

``bbb_lrt_output(mean, variance, noise, floor)`` is ``mean + sqrt(variance + floor) * noise``,
the local reparametrization's last step (``networks.layers.local_reparametrization`` calls it
where its ``F`` has ``lrt_output``, and writes the formula with MXNet's operators otherwise), in
one pass each way: MXNet 1.9.1's ``sqrt`` runs a scalar loop, 6.5 ms over a Bayesian LeNet's
first-layer pre-activations. ``bbb_signed(x, noise)`` is Flipout's ``x * sign(noise)``, the
signs broadcast over x's trailing axes (``networks.layers.flipout``), where MXNet's
``broadcast_mul`` and its backward pass take 28 ms over the same outputs.

The library is built at install time beside ``_fused.c`` (``setup.py``, against the
``lib_api.h`` of MXNet's wheel). It is used only if it is there, was built from the
``_operators.cc`` beside it (not older than it), reports the ``ABI_VERSION`` below and MXNet
loads it; otherwise ``available()`` is False and ``unavailable_reason()`` says why.
"""
import functools

from ..family.elementwise import LRT_VARIANCE_FLOOR
from .built import open_built

ABI_VERSION = 2  # must match OPERATORS_ABI_VERSION in _operators.cc


@functools.lru_cache(maxsize=None)
def _load():
    """(True, None) once MXNet has loaded the operators, else (False, why not)."""
    lib, problem, _ = open_built("_operators", "_operators.cc", "bbb_operators_abi_version",
                                 ABI_VERSION, "operators")
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
    where the native backend builds its graphs. Every other name is ``F``'s own."""

    def __init__(self, F):
        if not available():
            raise RuntimeError(unavailable_reason())
        self._F = F
        self.__name__ = F.__name__

    def __getattr__(self, name):
        return getattr(self._F, name)

    def lrt_output(self, mean, variance, noise):
        """mean + sqrt(variance + ``LRT_VARIANCE_FLOOR``) * noise."""
        return self._F.bbb_lrt_output(mean, variance, noise, floor=repr(LRT_VARIANCE_FLOOR))

    def signed(self, x, noise):
        """x times the signs of ``noise``, broadcast over x's trailing axes where ``noise`` has
        size 1."""
        return self._F.bbb_signed(x, noise)

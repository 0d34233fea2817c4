"""The layers of a network (``network.py`` applies them in order) and the per-example
estimators' formulas on a layer's operator. A new layer type is one class here:
``param_shapes(input_shape)`` gives its parameters' shapes and its output shape per example,
``layer(F, h, params, input_shape)`` its output for a batch ``h`` (a layer without weights
derives from ``_Unweighted``)."""
import math

from ..errors import is_real, is_whole
from ..errors import FLOAT32_TINY
from ..family.elementwise import LRT_VARIANCE_FLOOR


# the estimators that draw per example, for a dense or convolution layer's operator
# ``apply(F, h, W, b)``: the ``Network``'s layers and the Gluon blocks call these

def lrt_parts(layer):
    """The local reparametrization's methods of a dense, convolution or gate layer: (its
    output, its noise arrays' shapes)."""
    return layer.lrt_output, layer.lrt_noise_shapes


def flipout_parts(layer):
    """Flipout's methods of a dense, convolution or gate layer, as ``lrt_parts``."""
    return layer.flipout_output, layer.flipout_noise_shapes


def local_reparametrization(F, apply, h, mus, sigmas, noise=None, drawing=None):
    """The pre-activations drawn from their Gaussian (Kingma et al. 2015): mean
    ``apply(h, mu_W, mu_b)``, variance ``apply(h^2, sigma_W^2, sigma_b^2)`` (plus
    ``LRT_VARIANCE_FLOOR``), times standard normals ``noise`` of the output's shape (None: from
    MXNet's generator); ``drawing``, where given, scales the noise (0: the mean)."""
    mean = apply(F, h, *mus)
    variance = apply(F, F.square(h), F.square(sigmas[0]), F.square(sigmas[1]))
    if noise is not None and drawing is None and hasattr(F, "lrt_output"):
        return F.lrt_output(mean, variance, noise)
    spread = F.sqrt(variance + LRT_VARIANCE_FLOOR) * (
        F.random.normal_like(mean) if noise is None else noise)
    return mean + (spread if drawing is None else F.broadcast_mul(spread, drawing))


def flipout(F, apply, h, mus, deltas, convolution, noise_in=None, noise_out=None):
    """One weight perturbation ``deltas`` for the mini-batch, made example by example
    independent by signs (Wen et al. 2018): ``apply(h, mu) + apply(h * s, delta) * r``, s and r
    of +-1 over the input and output units (a convolution's channels, the same at every
    position), the signs of standard normals ``noise_in`` and ``noise_out`` (None: drawn from
    MXNet's generator)."""
    inputs = h if convolution else F.flatten(h)
    if noise_in is None:
        shaped = F.mean(inputs, axis=(2, 3), keepdims=True) if convolution else inputs
        noise_in = F.random.normal_like(shaped)
    perturbation = apply(F, _signed(F, inputs, noise_in), *deltas)
    if noise_out is None:
        shaped = (F.mean(perturbation, axis=(2, 3), keepdims=True) if convolution
                  else perturbation)
        noise_out = F.random.normal_like(shaped)
    return apply(F, h, *mus) + _signed(F, perturbation, noise_out)


def _signed(F, x, noise):
    """x times the signs of ``noise``, broadcast over x's trailing axes where ``noise`` has size
    1; in one operator where ``F`` has it (``native.operators.Accelerated``)."""
    if hasattr(F, "signed"):
        return F.signed(x, noise)
    return F.broadcast_mul(x, F.sign(noise))


class _Linear:
    """What a dense and a convolution layer share: ``W`` and ``b``, and their outputs under the
    estimators that draw per example, through the layer's own operator."""
    has_weights = True
    num_params = 2  # W and b
    convolution = False

    def _apply(self, input_shape):
        return lambda F, h, W, b: self(F, h, [W, b], input_shape)

    def lrt_noise_shapes(self, batch_size, input_shape, output_shape):
        return [(batch_size,) + tuple(output_shape)]

    def compression_step(self, chain):
        """How compression (``shipping/writer.py``) takes the layer: a layer with weights."""
        chain.add_weights(self)

    def lrt_output(self, F, h, mus, sigmas, noise, input_shape):
        return local_reparametrization(F, self._apply(input_shape), h, mus, sigmas, noise[0])

    def flipout_output(self, F, h, mus, deltas, noise, input_shape):
        return flipout(F, self._apply(input_shape), h, mus, deltas, self.convolution,
                       noise[0], noise[1])


def _whole_number(value, what, layer):
    """``value`` if it is a whole number >= 1; ValueError naming the layer otherwise."""
    if not (is_whole(value) and value >= 1):
        raise ValueError("%s: %s must be a whole number >= 1" % (layer, what))
    return value


class Dense(_Linear):
    """A fully connected layer; takes (batch, ...) and flattens what is past the batch axis."""

    def __init__(self, units):
        self.units = _whole_number(units, "UNITS", "dense:%s" % (units,))

    def param_shapes(self, input_shape):
        return [(self.units, math.prod(input_shape)), (self.units,)], (self.units,)

    def __call__(self, F, h, params, input_shape):
        W, b = params
        return F.FullyConnected(h, W, b, num_hidden=self.units)

    def flipout_noise_shapes(self, batch_size, input_shape, output_shape):
        return [(batch_size, math.prod(input_shape)), (batch_size, self.units)]

    def multiply_adds(self, input_shape, output_shape):
        return math.prod(input_shape) * self.units

    def input_columns(self, previous_units, inputs):
        """For each of the ``previous_units`` of the layer before, the indices of this layer's
        ``inputs`` (W's axis 1) that read it, as a (units, k) array."""
        import numpy as np
        per_unit = inputs // previous_units
        return np.arange(previous_units * per_unit).reshape(previous_units, per_unit)

    def described_with(self, units):
        return "dense:%d" % units

    def __str__(self):
        return "dense:%d" % self.units


class Conv2D(_Linear):
    """A 2-D convolution, stride 1, no padding; takes (batch, channels, height, width)."""
    convolution = True

    def __init__(self, channels, kernel):
        layer = "conv:%s:%s" % (channels, kernel)
        self.channels = _whole_number(channels, "CHANNELS", layer)
        self.kernel = _whole_number(kernel, "KERNEL", layer)

    def param_shapes(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError("conv:%d:%d takes images (channels, height, width), not %s"
                             % (self.channels, self.kernel, input_shape))
        channels, height, width = input_shape
        if min(height, width) < self.kernel:
            raise ValueError("conv:%d:%d does not fit %dx%d inputs" % (
                self.channels, self.kernel, height, width))
        side = (height - self.kernel + 1, width - self.kernel + 1)
        return ([(self.channels, channels, self.kernel, self.kernel), (self.channels,)],
                (self.channels,) + side)

    def __call__(self, F, h, params, input_shape):
        W, b = params
        return convolution(F, h, W, b, self.channels, (self.kernel, self.kernel),
                           in_channels=input_shape[0])

    # Where F has them (``native.operators.Accelerated``), in one operator each: the
    # accelerators of ``local_reparametrization`` and ``flipout`` for this exact class's
    # convolution (a subclass's formulas and noise shapes may be others)
    def lrt_output(self, F, h, mus, sigmas, noise, input_shape):
        if type(self) is Conv2D and hasattr(F, "lrt_convolution"):
            return F.lrt_convolution(h, mus, sigmas, noise[0])
        return super().lrt_output(F, h, mus, sigmas, noise, input_shape)

    def flipout_output(self, F, h, mus, deltas, noise, input_shape):
        if type(self) is Conv2D and hasattr(F, "flipout_convolution"):
            return F.flipout_convolution(h, mus, deltas, noise[0], noise[1])
        return super().flipout_output(F, h, mus, deltas, noise, input_shape)

    def flipout_noise_shapes(self, batch_size, input_shape, output_shape):
        return [(batch_size, input_shape[0], 1, 1), (batch_size, self.channels, 1, 1)]

    def multiply_adds(self, input_shape, output_shape):
        return math.prod(output_shape) * input_shape[0] * self.kernel ** 2

    def input_columns(self, previous_units, inputs):
        import numpy as np
        return np.arange(previous_units)[:, None]  # one input channel a unit

    def described_with(self, units):
        return "conv:%d:%d" % (units, self.kernel)

    def __str__(self):
        return "conv:%d:%d" % (self.channels, self.kernel)


def convolution(F, h, W, b, num_filter, kernel, in_channels, stride=(1, 1), pad=(0, 0),
                dilate=(1, 1)):
    """MXNet's ``Convolution`` of NCHW inputs ``h`` with W (num_filter, in_channels, kh, kw)
    and b (num_filter,)."""
    options = dict(kernel=kernel, stride=stride, pad=pad, dilate=dilate)
    if in_channels != 1 or not _differentiated(F):
        if _imperative(F):
            # MXNet's oneDNN convolution, outside training, reorders its weight array in place
            # into a blocked layout: on a view of a flat vector that rewrites the whole vector
            W = W.copy()
        return F.Convolution(h, W, b, num_filter=num_filter, **options)
    # the output's height and width: those of a pooling window of the kernel's extent over
    # one example (a pooling over the whole batch would cost a fifth of a LeNet step)
    extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilate))
    sides = F.BlockGrad(F.Pooling(F.slice_axis(h, axis=0, begin=0, end=1), kernel=extent,
                                  stride=stride, pad=pad, pool_type="max"))
    # a convolution, NCHW in and out: its backward pass takes a gradient in a oneDNN blocked
    # layout, which no reshape to (N, channels, positions) can
    patches = F.reshape_like(F.im2col(h, **options), sides, lhs_begin=2, rhs_begin=2)
    return F.Convolution(patches, F.reshape(W, shape=(num_filter, -1, 1, 1)), b,
                         num_filter=num_filter, kernel=(1, 1))


def _imperative(F):
    """True for MXNet's NDArray operators (not its symbols, not NumPy's)."""
    return F.__name__.startswith("mxnet.ndarray")


def _differentiated(F):
    """True for operators whose result may be differentiated: symbols, or NDArrays while
    autograd records (never NumPy's operators, ``model_file.NumPyOperators``)."""
    if F.__name__.startswith("mxnet.symbol"):
        return True
    if not F.__name__.startswith("mxnet"):
        return False
    from mxnet import autograd
    return autograd.is_recording()


class _Unweighted:
    """What a layer without weights shares: its output has its input's shape, compression
    keeps it after the layer before, and a constant input comes out unchanged."""
    has_weights = False

    def param_shapes(self, input_shape):
        return [], input_shape

    def compression_step(self, chain):
        chain.add_after(self)

    def constant_through(self, value):
        """What a constant input ``value`` comes out as."""
        return value


class MaxPool2D(_Unweighted):
    """Max pooling over size x size windows with stride size."""

    def __init__(self, size):
        self.size = _whole_number(size, "SIZE", "pool:%s" % (size,))

    def param_shapes(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError("pool:%d pools images (channels, height, width), a conv layer's "
                             "output; its input here is flat, %s: put a conv layer before it"
                             % (self.size, input_shape))
        if min(input_shape[1:]) < self.size:
            raise ValueError("pool:%d takes images of at least %dx%d, not %s"
                             % (self.size, self.size, self.size, input_shape))
        return [], (input_shape[0],) + tuple(side // self.size for side in input_shape[1:])

    def __call__(self, F, h, params, input_shape):
        return F.Pooling(h, kernel=(self.size, self.size), stride=(self.size, self.size),
                         pool_type="max")

    def __str__(self):
        return "pool:%d" % self.size


class ReLU(_Unweighted):
    def __call__(self, F, h, params, input_shape):
        return F.relu(h)

    def constant_through(self, value):
        return max(value, 0.0)

    def __str__(self):
        return "relu"


class Flatten(_Unweighted):
    def param_shapes(self, input_shape):
        return [], (math.prod(input_shape),)

    def __call__(self, F, h, params, input_shape):
        return F.flatten(h)

    def __str__(self):
        return "flatten"


class Dropout(_Unweighted):
    """Inverted dropout at ``rate``, on in training and in Monte Carlo prediction alike (each
    call draws a new mask from MXNet's generator); ``Network.without_dropout`` drops it for
    the deterministic prediction with all units."""
    RATES = (FLOAT32_TINY, 1.0 - 2.0 ** -24)

    def __init__(self, rate):
        if not (is_real(rate) and self.RATES[0] <= rate <= self.RATES[1]):
            raise ValueError("dropout:%s: RATE must be in (0, 1) (from %.3g to 1 - 2^-24)"
                             % (rate, self.RATES[0]))
        self.rate = rate

    def __call__(self, F, h, params, input_shape):
        return F.Dropout(h, p=self.rate, mode="always")

    def compression_step(self, chain):
        pass  # the compressed file predicts with every unit kept

    def __str__(self):
        return "dropout:%g" % self.rate


class Gate:
    """One learned factor per unit of a dense layer or channel of a convolution, multiplying the
    layer's outputs (batch, units) or (batch, channels, height, width): placed right after the
    layer, before its activation, it is the unit's switch."""
    has_weights = True
    num_params = 1  # the factors

    def param_shapes(self, input_shape):
        return [(input_shape[0],)], input_shape

    def __call__(self, F, h, params, input_shape):
        gate, = params
        return F.broadcast_mul(h, F.reshape(gate, shape=self._per_unit((1,), input_shape)))

    def noise_shape(self, batch_size, input_shape):
        """The shape of one draw of the gates for a mini-batch: (batch, units) or (batch,
        channels, 1, 1)."""
        return self._per_unit((batch_size,), input_shape, input_shape[0])

    def lrt_noise_shapes(self, batch_size, input_shape, output_shape):
        return [self.noise_shape(batch_size, input_shape)]

    flipout_noise_shapes = lrt_noise_shapes

    def lrt_output(self, F, h, mus, sigmas, noise, input_shape):
        return self.perturbed(F, h, mus[0], sigmas[0], noise[0], input_shape)

    def flipout_output(self, F, h, mus, deltas, noise, input_shape):
        return self.perturbed(F, h, mus[0], deltas[0], F.sign(noise[0]), input_shape)

    def multiply_adds(self, input_shape, output_shape):
        return 0  # folded into the layer before it by compression

    def compression_step(self, chain):
        chain.add_gate(self)

    def perturbed(self, F, h, mu, scale, noise, input_shape):
        """``h * (mu + scale * noise)``: gates drawn per example (``noise`` of ``noise_shape``),
        mean ``mu`` and ``scale`` (sigma, with standard normals; a flipout perturbation, with
        signs) per unit."""
        shape = self._per_unit((1,), input_shape)
        gates = F.broadcast_add(F.reshape(mu, shape=shape),
                                F.broadcast_mul(F.reshape(scale, shape=shape), noise))
        if hasattr(F, "scaled"):  # in one operator each way (``native.operators.Accelerated``)
            return F.scaled(h, gates)
        return F.broadcast_mul(h, gates)

    @staticmethod
    def _per_unit(lead, input_shape, units=-1):
        return lead + (units,) + (1,) * (len(input_shape) - 1)

    def __str__(self):
        return "gate"


class LogVariance:
    """Appends one learned log variance per output, the same for every input, to the outputs
    (batch, D) -> (batch, 2D): a Gaussian likelihood's noise learned as a scalar."""
    has_weights = True

    def param_shapes(self, input_shape):
        if len(input_shape) != 1:
            raise ValueError("logvar takes the outputs of a dense layer, not %s"
                             % (input_shape,))
        return [input_shape], (2 * input_shape[0],)

    def __call__(self, F, h, params, input_shape):
        log_variance, = params
        return F.concat(h, F.broadcast_like(F.reshape(log_variance, shape=(1, -1)), h), dim=1)

    def __str__(self):
        return "logvar"


LAYERS = {"dense": Dense, "conv": Conv2D, "pool": MaxPool2D, "relu": ReLU, "flatten": Flatten,
          "dropout": Dropout, "gate": Gate}
# the numbers each layer of a description takes, as SPEC_HELP names them
LAYER_NUMBERS = {"dense": ("UNITS",), "conv": ("CHANNELS", "KERNEL"), "pool": ("SIZE",),
                 "relu": (), "flatten": (), "dropout": ("RATE",), "gate": ()}
# the layers whose outputs the estimators that draw per example perturb: each draws its own
NOISY_LAYERS = (Dense, Conv2D, Gate)

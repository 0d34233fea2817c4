"""Network descriptions: an ordered list of layers, from which the parameter shapes and the
forward pass (``net``) follow. A new layer type is one class here: ``param_shapes(input_shape)``
gives its parameters' shapes and its output shape per example, ``layer(F, h, params,
input_shape)`` its output for a batch ``h``."""
import math

from ..errors import ConfigError, is_real, is_whole
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


def _pooled_with(layer, kind):
    """Whether ``layer`` is exactly a ``kind`` (a subclass may compute another formula): what
    ``Network`` may reorder or compute with a pooling."""
    return type(layer) is kind


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


class MaxPool2D:
    """Max pooling over size x size windows with stride size."""
    has_weights = False

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

    def compression_step(self, chain):
        chain.add_after(self)

    def constant_through(self, value):
        return value

    def __str__(self):
        return "pool:%d" % self.size


class ReLU:
    has_weights = False

    def param_shapes(self, input_shape):
        return [], input_shape

    def __call__(self, F, h, params, input_shape):
        return F.relu(h)

    def compression_step(self, chain):
        chain.add_after(self)

    def constant_through(self, value):
        """What a constant input ``value`` comes out as."""
        return max(value, 0.0)

    def __str__(self):
        return "relu"


class Flatten:
    has_weights = False

    def param_shapes(self, input_shape):
        return [], (math.prod(input_shape),)

    def __call__(self, F, h, params, input_shape):
        return F.flatten(h)

    def compression_step(self, chain):
        chain.add_after(self)

    def constant_through(self, value):
        return value

    def __str__(self):
        return "flatten"


class Dropout:
    """Inverted dropout at ``rate``, on in training and in Monte Carlo prediction alike (each
    call draws a new mask from MXNet's generator); ``Network.without_dropout`` drops it for
    the deterministic prediction with all units."""
    has_weights = False
    RATES = (FLOAT32_TINY, 1.0 - 2.0 ** -24)

    def __init__(self, rate):
        if not (is_real(rate) and self.RATES[0] <= rate <= self.RATES[1]):
            raise ValueError("dropout:%s: RATE must be in (0, 1) (from %.3g to 1 - 2^-24)"
                             % (rate, self.RATES[0]))
        self.rate = rate

    def param_shapes(self, input_shape):
        return [], input_shape

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


class Network:
    """``layers`` applied in order to inputs of ``input_shape`` (per example); called as
    ``network(X, params, F=mx.nd)`` it gives the logits."""

    def __init__(self, layers, input_shape=(784,)):
        self.layers, self.input_shape = list(layers), tuple(input_shape)
        shapes, self.output_shapes, self._param_counts, shape = [], [], [], self.input_shape
        for layer in self.layers:
            layer_shapes, shape = layer.param_shapes(shape)
            shapes += layer_shapes
            self.output_shapes.append(shape)
            self._param_counts.append(len(layer_shapes))
        self._param_shapes = shapes
        # each layer's first parameter's position in the parameter list
        self._param_offsets = [sum(self._param_counts[:i]) for i in range(len(self.layers))]
        self._order = self._computing_order()
        # the convolutions ``run`` computes with the max pooling (and ReLU) after them where it is
        # handed ``pooled``, by position; layers of exactly those classes
        self._pooled_convolutions = {}
        following = lambda step, kind: (  # noqa: E731
            step < len(self._order) and _pooled_with(self.layers[self._order[step]], kind))
        for step, position in enumerate(self._order):
            if following(step, Conv2D) and following(step + 1, MaxPool2D):
                fused = 3 if following(step + 2, ReLU) else 2
                self._pooled_convolutions[position] = self._order[step + 1:step + fused]
        # the max poolings (and ReLUs after them) ``run`` computes by an operator set's
        # ``max_pool``, by position; layers of exactly those classes
        self._accelerated_poolings = {
            position: (self._order[step + 1],) if following(step + 1, ReLU) else ()
            for step, position in enumerate(self._order) if following(step, MaxPool2D)}

    def param_shapes(self):
        """``[W1, b1, W2, b2, ...]`` shapes, in layer order."""
        return list(self._param_shapes)

    @property
    def num_outputs(self):
        return math.prod(self.output_shapes[-1]) if self.layers else math.prod(self.input_shape)

    @property
    def activation_size(self):
        """Floats one example's forward pass holds (every layer's output)."""
        return sum(math.prod(shape) for shape in self.output_shapes)

    @property
    def pooled_activation_size(self):
        """Floats one example's forward pass holds where ``run`` computes each convolution
        that a max pooling follows with the pooling, and a ReLU right after it (``pooled``):
        each step's output in the computing order, but for the convolutions' own and those
        ReLUs'."""
        computed_with = {p for fused in self._pooled_convolutions.values() for p in fused[1:]}
        size, shape = 0, self.input_shape
        for position in self._order:
            shape = self.layers[position].param_shapes(shape)[1]
            if position not in self._pooled_convolutions and position not in computed_with:
                size += math.prod(shape)
        return size

    @property
    def convolutions_pooled(self):
        """Whether ``run`` computes some convolution with the max pooling after it where it is
        handed ``pooled`` (``__call__`` by default: the C kernel's ``ConvolutionMaxPool``)."""
        return bool(self._pooled_convolutions)

    @property
    def accelerated_poolings(self):
        """Whether ``run`` computes a max pooling by an operator set's ``max_pool`` where it
        has one."""
        return bool(self._accelerated_poolings)

    @property
    def linear_layers_only(self):
        """True where every layer with weights is dense, a convolution or a gate (what the
        estimators that draw per example take)."""
        return all(isinstance(layer, NOISY_LAYERS) or not layer.has_weights
                   for layer in self.layers)

    def __call__(self, X, params, F=None):
        """The logits for X with ``params``."""
        if F is None:
            from mxnet import nd as F
            if not _differentiated(F) and self.convolutions_pooled:
                from ..native import library
                F = library.with_convolution_max_pool(F, [X] + list(params))
        pooled = None
        if getattr(F, "ConvolutionMaxPool", None) is not None:
            def pooled(conv, pool, h, index, relu):
                W, b = params[index:index + conv.num_params]
                return F.ConvolutionMaxPool(h, W, b, num_filter=conv.channels,
                                            kernel=(conv.kernel, conv.kernel), pool=pool.size,
                                            relu=relu)
        return self.run(X, lambda layer, h, k, index, shape: layer(
            F, h, params[index:index + layer.num_params], shape), F,
            weightless=lambda layer, h, index, count, shape: layer(
                F, h, params[index:index + count], shape), pooled=pooled)

    def run(self, X, weighted, F=None, weightless=None, pooled=None):
        """The network's output for X, each dense, convolution or gate layer computed by
        ``weighted(layer, h, k, index, input_shape)`` (``k``: the k-th such layer; ``index``: its
        first parameter's position in the parameter list: W and b, or a gate's one vector);
        other layers as they are, or by ``weightless(layer, h, index, count, input_shape)``
        where given; a convolution that the computing order puts right before a max pooling,
        with the pooling and a ReLU right after it (``relu`` True), by ``pooled(conv, pool,
        h, index, relu)`` where given (and where no layer's class changes the formula,
        ``__call__``, that ``pooled`` computes: ``_pooled_convolutions``)."""
        if F is None:
            from mxnet import nd as F
        max_pool = getattr(F, "max_pool", None)
        h = X
        if len(self.input_shape) > 1:
            h = F.reshape(h, shape=(-1,) + self.input_shape)
        k, skip = 0, ()
        for position in self._order:
            if position in skip:
                continue
            layer, index = self.layers[position], self._param_offsets[position]
            shape = self.input_shapes[position]
            if pooled is not None and position in self._pooled_convolutions:
                skip = self._pooled_convolutions[position]
                h = pooled(layer, self.layers[skip[0]], h, index, len(skip) == 2)
                k += 1
            elif max_pool is not None and position in self._accelerated_poolings:
                skip = self._accelerated_poolings[position]
                h = max_pool(h, layer.size, bool(skip))
            elif isinstance(layer, NOISY_LAYERS):
                h = weighted(layer, h, k, index, shape)
                k += 1
            elif weightless is not None:
                h = weightless(layer, h, index, self._param_counts[position], shape)
            else:
                h = layer(F, h, [], shape)
        return h

    def _computing_order(self):
        """The order ``run`` computes the layers in: as listed, but for a ReLU right before a
        max pooling, which comes after it."""
        order = list(range(len(self.layers)))
        for i in range(len(order) - 1):
            if (_pooled_with(self.layers[order[i]], ReLU)
                    and _pooled_with(self.layers[order[i + 1]], MaxPool2D)):
                order[i], order[i + 1] = order[i + 1], order[i]
        return order

    def linear_layers(self):
        """(layer, input shape, output shape), shapes per example, of each dense, convolution
        or gate layer (the layers ``run`` hands to ``weighted``)."""
        return [(layer, shape, out) for layer, shape, out in zip(self.layers, self.input_shapes,
                                                                self.output_shapes)
                if isinstance(layer, NOISY_LAYERS)]

    def gate_positions(self):
        """The positions of the gates' vectors in the parameter list."""
        positions, index = [], 0
        for layer, count in zip(self.layers, self._param_counts):
            if isinstance(layer, Gate):
                positions.append(index)
            index += count
        return positions

    def initial_means(self, mus, ones_like):
        """``mus`` with each gate's vector replaced by ones (``ones_like(array)``): a gate
        starts as the network without it."""
        gates = set(self.gate_positions())
        return [ones_like(mu) if i in gates else mu for i, mu in enumerate(mus)]

    def multiply_adds(self):
        """Multiply-adds of one example's forward pass through the dense and convolution
        layers (a gate's are folded into the layer before it by compression)."""
        return sum(layer.multiply_adds(inp, out) for layer, inp, out in self.linear_layers())

    def noisy_run(self, X, parts, mus, seconds, noise, F):
        """The output for X under an estimator that draws per example, whose methods of each
        layer ``parts(layer)`` gives (``lrt_parts``, ``flipout_parts``): each dense, convolution
        or gate layer's output with its means, its second parameters (sigma, or the
        perturbation sigma * eps) and its noise arrays, in layer order."""
        outputs, arrays, start = [], [], 0
        for layer, inp, out in self.linear_layers():
            output, noise_shapes = parts(layer)
            count = len(noise_shapes(1, inp, out))
            outputs.append(output)
            arrays.append(noise[start:start + count])
            start += count
        return self.run(X, lambda layer, h, k, i, shape: outputs[k](
            F, h, mus[i:i + layer.num_params], seconds[i:i + layer.num_params], arrays[k],
            shape), F)

    @property
    def input_shapes(self):
        """Each layer's input shape per example, in layer order."""
        return [self.input_shape] + self.output_shapes[:-1]

    @property
    def has_convolution(self):
        return any(isinstance(layer, Conv2D) for layer in self.layers)

    @property
    def has_dropout(self):
        return any(isinstance(layer, Dropout) for layer in self.layers)

    def without_dropout(self):
        """This network with every unit kept (inverted dropout's deterministic prediction);
        the same parameters."""
        if not self.has_dropout:
            return self
        return Network([layer for layer in self.layers if not isinstance(layer, Dropout)],
                       self.input_shape)

    def without_gates(self, params):
        """This network without its gates, and ``params`` without the gates' vectors: the dense
        network a gated one was grown from (the baseline group sparsity's speed is measured
        against)."""
        gates = set(self.gate_positions())
        return (Network([layer for layer in self.layers if not isinstance(layer, Gate)],
                        self.input_shape),
                [param for i, param in enumerate(params) if i not in gates])

    def with_dropout(self, rate):
        """This network with dropout at ``rate`` after every ReLU, the hidden units (Monte
        Carlo dropout, Gal and Ghahramani 2016); unchanged where it has dropout already."""
        if self.has_dropout:
            return self
        layers = []
        for layer in self.layers:
            layers += [layer, Dropout(rate)] if isinstance(layer, ReLU) else [layer]
        return Network(layers, self.input_shape)

    def __str__(self):
        return ",".join(str(layer) for layer in self.layers)


def mlp(num_inputs=784, num_hidden=400, num_layers=2, num_outputs=10):
    """The tutorial's MLP: ``num_layers`` ReLU layers of ``num_hidden`` units, then a linear
    output layer."""
    layers = []
    for _ in range(num_layers):
        layers += [Dense(num_hidden), ReLU()]
    return Network(layers + [Dense(num_outputs)], input_shape=(num_inputs,))


def mlp_of(layer_params):
    """The MLP whose parameters are ``layer_params`` ``[W1, b1, ...]`` (weights (outputs,
    inputs); arrays, symbols or shapes), as the tutorial's ``net`` takes them: a ReLU after
    every layer but the last."""
    layers = []
    for i in range(0, len(layer_params), 2):
        layers += [Dense(rows_of(layer_params[i])), ReLU()]
    return Network(layers[:-1], input_shape=(_columns(layer_params[0]),))


def _shape(weight):
    """The shape of a weight: a shape itself, an NDArray, or a symbol whose shape is known."""
    if isinstance(weight, tuple):
        return weight
    if hasattr(weight, "infer_shape"):  # a symbol
        return weight.infer_shape()[1][0]
    return weight.shape


def rows_of(weight):
    """Rows (outputs) of a weight: a shape, an NDArray or a symbol whose shape is known."""
    return _shape(weight)[0]


def _columns(weight):
    return _shape(weight)[1]


def lenet(num_inputs=784, num_outputs=10):
    """LeNet-5 as Caffe's MNIST example has it: conv 5x5x20, pool, conv 5x5x50, pool, dense 500,
    dense 10, ReLUs after the convolutions and the hidden dense layer, on 1 x 28 x 28 images."""
    side = _image_side(num_inputs)
    return Network([Conv2D(20, 5), ReLU(), MaxPool2D(2), Conv2D(50, 5), ReLU(), MaxPool2D(2),
                    Dense(500), ReLU(), Dense(num_outputs)], input_shape=(1, side, side))


def _image_side(num_inputs):
    side = math.isqrt(num_inputs)
    if side * side != num_inputs:
        raise ValueError("a convolutional network takes square one-channel images; %d inputs "
                         "are not" % num_inputs)
    return side


NETWORKS = {"lenet": lenet}
SPEC_HELP = ("mlp, lenet, or layers such as conv:20:5,relu,pool:2,dense:500,relu,dense:10 "
             "(conv:CHANNELS:KERNEL, pool:SIZE, dense:UNITS, relu, flatten, dropout:RATE, gate)")


# the most layers a description names (500 dense layers with their ReLUs)
MAX_LAYERS = 1000


def parse_network(spec, num_inputs=784, num_outputs=10):
    """The ``Network`` a description names (not ``mlp``, which the config's sizes shape):
    ``lenet`` or a comma-separated list of layers; ConfigError naming ``network`` otherwise.
    A network with convolutions takes square one-channel images."""
    if spec in NETWORKS:
        return NETWORKS[spec](num_inputs, num_outputs)
    count = str(spec).count(",") + 1
    if count > MAX_LAYERS:
        raise ConfigError("network", "a description of %d layers" % count, "at most %d layers"
                          % MAX_LAYERS)
    try:
        layers = [_parse_layer(item.strip()) for item in str(spec).split(",")]
        for before, layer in zip([None] + layers, layers):
            if isinstance(layer, Gate) and not isinstance(before, (Dense, Conv2D)):
                # compression folds a gate into the layer it scales
                raise ValueError("a gate comes right after a dense or conv layer, whose units "
                                 "it scales")
        if any(isinstance(layer, Conv2D) for layer in layers):
            side = _image_side(num_inputs)
            input_shape = (1, side, side)
        else:
            input_shape = (num_inputs,)
        network = Network(layers, input_shape)
    except ValueError as exc:
        raise ConfigError("network", spec, "%s; %s" % (SPEC_HELP, exc)) from None
    if not layers or not isinstance(layers[-1], Dense) or network.num_outputs != num_outputs:
        raise ConfigError("network", spec, "a description ending in dense:%d (the %d outputs "
                          "the likelihood takes)"
                          % (num_outputs, num_outputs))
    return network


def _parse_layer(item):
    """One layer of a description, ``NAME[:NUMBER...]``; ValueError saying what is wrong."""
    name, *numbers = item.split(":")
    if name not in LAYERS:
        raise ValueError("unknown layer %r" % item)
    wanted = LAYER_NUMBERS[name]
    if len(numbers) != len(wanted):
        raise ValueError("%s takes %s" % (name, ":".join([name] + list(wanted))))
    values = []
    for number, what in zip(numbers, wanted):
        try:
            values.append(float(number) if name == "dropout" else int(number))
        except ValueError:
            raise ValueError("%s: %s must be %s" % (
                item, what, "a number" if name == "dropout" else "a whole number >= 1")) from None
    return LAYERS[name](*values)

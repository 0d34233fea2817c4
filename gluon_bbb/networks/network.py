"""The network a run trains: its layers (``layers.py``) applied in order, from which the
parameter shapes, the forward pass (``net``) and the estimators' per-example passes follow; the
tutorial's MLP, LeNet-5, and the descriptions ``--network`` takes (``parse_network``)."""
import math

from ..errors import ConfigError
from .layers import (LAYER_NUMBERS, LAYERS, NOISY_LAYERS, Conv2D, Dense, Dropout, Gate,
                     MaxPool2D, ReLU, _differentiated)


def _pooled_with(layer, kind):
    """Whether ``layer`` is exactly a ``kind`` (a subclass may compute another formula): what
    ``Network`` may reorder or compute with a pooling."""
    return type(layer) is kind



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

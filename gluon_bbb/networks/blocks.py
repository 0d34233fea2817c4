"""Gluon blocks for Bayes by Backprop: ``BayesianDense`` and ``BayesianConv2D``, the KL term of
a block tree, ``to_bayesian`` (a user's ``nn.Dense``/``nn.Conv2D`` network made Bayesian in one
call), and the predictive and SNR pruning of such a network."""
import mxnet as mx
from mxnet import autograd, nd
from mxnet.gluon import HybridBlock, nn

from ..errors import MAX_PREDICTIVE_SAMPLES, require_positive, require_real, require_whole
from ..family.priors import Prior
from ..family.estimators import estimator as estimator_named
from ..tutorial import (GaussianPrior, sample_epsilons, sampled_kl, total,
                        transform_gaussian_samples)
from .layers import convolution
from ..family.parametrizations import SOFTPLUS, parametrization as parametrization_named
from ..analysis.snr import prune_weights


# the blocks' default initial rho: sigma = softplus(-5) = 0.0067, small beside the weights a
# Gluon initializer gives (docs/NETWORKS.md)
DEFAULT_RHO = -5.0


class BayesianLayer(HybridBlock):
    """What the Bayesian layers share: mu, rho and eps of a weight and a bias, drawn as the
    tutorial draws them; subclasses say which operator applies them (``_apply``), the estimator
    (``family/estimators.py``: ``sample``, ``lrt``, ``flipout``) how the draw reaches the output."""

    def __init__(self, weight_shape, bias_shape, activation=None, mu_scale=None,
                 rho_offset=DEFAULT_RHO, estimator="sample", prior=None,
                 parametrization=SOFTPLUS, **kwargs):
        super().__init__(**kwargs)
        self._fresh = False
        self._sample = True
        self.estimator = estimator_named(estimator)
        mu_scale, rho_offset = _checked(mu_scale, rho_offset, prior)
        self.prior = prior
        self.parametrization = parametrization_named(parametrization)
        # the state of the eps in use: None until a forward pass draws them, then whether they
        # were drawn while autograd recorded, and whether kl_term has taken them since
        self._drawn_recording = None
        self._kl_taken = False
        mu_init = {"weight": None, "bias": "zeros"} if mu_scale is None else dict.fromkeys(
            ("weight", "bias"), mx.init.Normal(mu_scale))
        with self.name_scope():
            for name, shape in (("weight", weight_shape), ("bias", bias_shape)):
                setattr(self, name + "_mu", self.params.get(
                    name + "_mu", shape=shape, init=mu_init[name], allow_deferred_init=True))
                setattr(self, name + "_rho", self.params.get(
                    name + "_rho", shape=shape, init=mx.init.Constant(rho_offset),
                    allow_deferred_init=True))
                setattr(self, name + "_eps", self.params.get(
                    name + "_eps", shape=shape, init=mx.init.Zero(), grad_req="null",
                    differentiable=False, allow_deferred_init=True))
            self.act = nn.Activation(activation) if activation else None

    def deferred(self):
        """True until the layer's input size is known and its parameters made."""
        return any(p._data is None and p._deferred_init for p in self.params.values())

    def resample(self):
        """Draw new eps (zeros while ``use_mean_weights`` is on) for the next forward pass;
        a layer still waiting for its input size draws when its own forward pass comes."""
        if self.deferred():
            return
        self._drawn_recording, self._kl_taken = autograd.is_recording(), False
        with autograd.pause():  # eps is data of the graph, not a node of it
            for eps in (self.weight_eps, self.bias_eps):
                for array in eps.list_data():
                    array[:] = (sample_epsilons([array.shape], array.context)[0]
                                if self._sample else 0.0)
        self._fresh = True

    def forward(self, x, *args):
        if isinstance(x, nd.NDArray):  # symbols come while a hybridized parent builds its graph
            self._check_input(x)
            if self.deferred():
                finish_deferred_init(self, x, *args)
            if not self._fresh:
                self.resample()
            self._fresh = False
        return super().forward(x, *args)

    def hybrid_forward(self, F, x, weight_mu, weight_rho, weight_eps, bias_mu, bias_rho,
                       bias_eps):
        out = self.estimator.block_output(F, self._apply, x, [weight_mu, bias_mu],
                                          self.parametrization.sigmas([weight_rho, bias_rho], F),
                                          [weight_eps, bias_eps], self._is_convolution)
        return self.act(out) if self.act is not None else out

    def variational_arrays(self):
        """(mus, rhos, epsilons) of the weight and the bias, NDArrays on the first context."""
        return ([self.weight_mu.data(), self.bias_mu.data()],
                [self.weight_rho.data(), self.bias_rho.data()],
                [self.weight_eps.data(), self.bias_eps.data()])

    def _check_input(self, x):
        """ValueError where ``x`` cannot be this layer's input (before MXNet's operators see
        it)."""

    def _inputs_known(self):
        """Called once the input size is known (after a deferred initialization)."""


class BayesianDense(BayesianLayer):
    """``nn.Dense`` with a Gaussian posterior over its weight (units, in_units) and bias
    (units,): MXNet's ``FullyConnected`` layout; ``in_units=0`` infers the input size on the
    first call."""
    _is_convolution = False

    def __init__(self, units, in_units=0, activation=None, flatten=True, **kwargs):
        units, in_units = require_whole("units", units, 1), require_whole("in_units", in_units)
        self._units, self._flatten = units, flatten
        super().__init__((units, in_units), (units,), activation, **kwargs)

    def _apply(self, F, x, weight, bias):
        return F.FullyConnected(x, weight, bias, num_hidden=self._units, flatten=self._flatten)


class BayesianConv2D(BayesianLayer):
    """``nn.Conv2D`` (NCHW) with a Gaussian posterior over its weight (channels, in_channels,
    kh, kw) and bias (channels,): MXNet's ``Convolution`` layout; ``in_channels=0`` infers the
    input channels on the first call."""
    _is_convolution = True

    def __init__(self, channels, kernel_size, in_channels=0, strides=(1, 1), padding=(0, 0),
                 dilation=(1, 1), activation=None, **kwargs):
        kernel = _pair(kernel_size, "kernel_size", 1)
        channels = require_whole("channels", channels, 1)
        in_channels = require_whole("in_channels", in_channels)
        self._conv = dict(num_filter=channels, kernel=kernel, in_channels=in_channels,
                          stride=_pair(strides, "strides", 1), pad=_pair(padding, "padding", 0),
                          dilate=_pair(dilation, "dilation", 1))
        super().__init__((channels, in_channels) + kernel, (channels,), activation, **kwargs)

    def _apply(self, F, x, weight, bias):
        return convolution(F, x, weight, bias, **self._conv)

    def _check_input(self, x):
        if x.ndim != 4:
            raise ValueError("%s takes 4-D input (batch, channels, height, width), as nn.Conv2D "
                             "does, got shape %s" % (self.name, x.shape))

    def _inputs_known(self):
        self._conv["in_channels"] = self.weight_mu.shape[1]


def finish_deferred_init(block, *args):
    """Infer the shapes of ``block``'s parameters from its inputs ``args`` and make them, as
    Gluon does on a block's first call; the Bayesian layers then know their input sizes."""
    block.infer_shape(*args)
    for param in block.collect_params().values():
        if param._data is None and param._deferred_init:
            param._finish_deferred_init()
    for layer in bayesian_layers(block):
        layer._inputs_known()
    if isinstance(block, HybridBlock):
        block._clear_cached_op()


def _checked(mu_scale, rho_offset, prior):
    """``(mu_scale, rho_offset)`` by their numbers' rules; ValueError for a prior that is not a
    ``Prior``."""
    if not (prior is None or isinstance(prior, Prior)):
        raise ValueError("prior must be a Prior (gluon_bbb.family.priors) or None (N(0, 1)), "
                         "got %r" % (prior,))
    return (None if mu_scale is None else require_positive("mu_scale", mu_scale),
            require_real("rho_offset", rho_offset))


def _pair(value, name, low):
    """``value`` (one whole number >= ``low``, or two) as a pair of ints."""
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2:
        raise ValueError("%s must be a whole number or two, got %r" % (name, value))
    return tuple(require_whole(name, side, low) for side in pair)


def bayesian_layers(net):
    """The ``BayesianLayer``s of a block tree, in the order their parameters are collected."""
    found = [net] if isinstance(net, BayesianLayer) else []
    for child in net._children.values():
        found += bayesian_layers(child)
    return found


def resample(net):
    """Draw new eps for every Bayesian layer of ``net``."""
    for layer in bayesian_layers(net):
        layer.resample()


def sample_on_call(net):
    """Make ``net`` draw new eps for all its Bayesian layers whenever it is called (what a
    hybridized network needs); returns ``net``."""
    if not getattr(net, "_gluon_bbb_samples_on_call", False):
        forward = net.forward

        def forward_with_new_weights(*args):
            layers = bayesian_layers(net)
            if (isinstance(net, HybridBlock) and args and isinstance(args[0], nd.NDArray)
                    and any(layer.deferred() for layer in layers)):
                finish_deferred_init(net, *args)  # the first call: sizes, then a draw
            resample(net)
            return forward(*args)
        # in place of a forward pre-hook, which MXNet warns about at every hybridize()
        net.forward = forward_with_new_weights
        net._gluon_bbb_samples_on_call = True
    return net


def kl_term(net, log_prior=None):
    """sum log q(w | mu, sigma) - sum log P(w) over the weights the last forward pass of
    ``net`` drew, shape (1,); recorded by autograd like the network's output."""
    layers = bayesian_layers(net)
    if not layers:
        raise ValueError("kl_term: %s has no Bayesian layer (BayesianDense, BayesianConv2D); "
                         "to_bayesian(net) makes its Dense and Conv2D layers Bayesian"
                         % getattr(net, "name", net))
    if any(layer._drawn_recording is None for layer in layers):
        raise RuntimeError("kl_term(net) before any forward pass of net: the KL term is that of "
                           "the weights a forward pass drew; call output = net(X) first, then "
                           "kl_term(net)")
    if autograd.is_recording():
        if not all(layer._drawn_recording and not layer._kl_taken for layer in layers):
            raise RuntimeError("kl_term(net) would pair this loss with the weights of an earlier "
                               "forward pass (no forward pass of net has been recorded since "
                               "the last kl_term): call output = net(X) first, then "
                               "kl_term(net), in the same autograd.record() block")
        for layer in layers:
            layer._kl_taken = True
    terms = []
    for layer in layers:
        mus, rhos, epsilons = layer.variational_arrays()
        sigmas = layer.parametrization.sigmas(rhos)
        prior = log_prior or layer.prior or GaussianPrior(1.0)
        if getattr(prior, "has_log_density", True):
            terms.append(sampled_kl(transform_gaussian_samples(mus, sigmas, epsilons), mus,
                                    sigmas, prior))
        else:  # an improper prior (log-uniform) gives its KL in closed form alone
            terms += [total(prior.kl(mu, sigma)) for mu, sigma in zip(mus, sigmas)]
    return nd.add_n(*terms)


def variational_parameters(net):
    """(mus, sigmas): the per-array means and standard deviations of ``net``'s Bayesian layers,
    weight then bias of each, as the functional code takes them (``prune``, ``uncertainty``)."""
    mus, sigmas = [], []
    for layer in bayesian_layers(net):
        layer_mus, rhos, _ = layer.variational_arrays()
        mus += layer_mus
        sigmas += layer.parametrization.sigmas(rhos)
    return mus, sigmas


class use_mean_weights:
    """``with use_mean_weights(net):`` forward passes use w = mu (eps = 0)."""

    def __init__(self, net):
        self.layers = bayesian_layers(net)

    def __enter__(self):
        for layer in self.layers:
            layer._sample = False
        return self

    def __exit__(self, *exc):
        for layer in self.layers:
            layer._sample = True


def predict_probabilities(net, X, num_samples=10):
    """Mean over ``num_samples`` forward passes (each with new weights) of softmax(net(X));
    ``num_samples=0`` uses the mean weights. X on the network's context; returns (N, classes)."""
    num_samples = require_whole("num_samples", num_samples, 0, MAX_PREDICTIVE_SAMPLES)
    with autograd.predict_mode():
        if num_samples == 0:
            with use_mean_weights(net):
                return nd.softmax(sample_on_call(net)(X), axis=1)
        sample_on_call(net)
        return nd.add_n(*[nd.softmax(net(X), axis=1) for _ in range(num_samples)]) / num_samples


def prune_by_snr(net, proportion):
    """Set the means of the lowest-|mu|/sigma ``proportion`` of ``net``'s Bayesian parameters to
    0, in place, as ``snr.prune_weights`` does for the functional parameters."""
    mus, sigmas = variational_parameters(net)
    for mu, pruned in zip(mus, prune_weights(mus, sigmas, proportion)):
        mu[:] = pruned


def to_bayesian(net, mu_scale=None, rho_offset=DEFAULT_RHO, estimator="sample", prior=None,
                parametrization=SOFTPLUS):
    """Replace every ``nn.Dense`` and ``nn.Conv2D`` of the block tree ``net`` by a
    ``BayesianDense`` or ``BayesianConv2D`` of the same shape drawing with ``estimator``, with
    ``prior`` and ``parametrization`` (as ``BayesianLayer`` takes them), in place, and make
    ``net`` draw its weights whenever it is called (``sample_on_call``); returns ``net``."""
    mu_scale, rho_offset = _checked(mu_scale, rho_offset, prior)
    settings = dict(mu_scale=mu_scale, rho_offset=rho_offset,
                    estimator=estimator_named(estimator), prior=prior,
                    parametrization=parametrization_named(parametrization))
    for key, child in list(net._children.items()):
        replacement = _bayesian_twin(child, settings)
        if replacement is None:
            to_bayesian(child, **settings)
            continue
        if getattr(net, key, None) is child:
            setattr(net, key, replacement)
        else:
            net._children[key] = replacement
    if isinstance(net, HybridBlock):
        net._clear_cached_op()
    return sample_on_call(net)


def _bayesian_twin(layer, settings):
    """The Bayesian layer standing in for ``layer``, made with ``settings`` (``BayesianLayer``'s
    keyword arguments), its means set from ``layer``'s weights where they are initialized; None
    for any other block."""
    if not isinstance(layer, (nn.Dense, nn.Conv2D)):
        return None
    if layer.bias is None:
        raise ValueError("%s has no bias: a Bayesian layer has one" % layer.name)
    in_size = layer.weight.shape[1]  # input units or channels; 0 until known
    kwargs = dict(settings, activation=layer.act._act_type if layer.act is not None else None)
    if isinstance(layer, nn.Dense):
        twin = BayesianDense(layer._units, in_size, flatten=layer._flatten, **kwargs)
    else:
        conv = layer._kwargs
        if conv["layout"] != "NCHW" or conv["num_group"] != 1:
            raise ValueError("%s: only NCHW convolutions of one group can be made Bayesian"
                             % layer.name)
        twin = BayesianConv2D(conv["num_filter"], conv["kernel"], in_size, conv["stride"],
                              conv["pad"], conv["dilate"], **kwargs)
    if layer.weight._data is not None:  # initialized: the means start where it is
        ctx = layer.weight.list_ctx()
        twin.initialize(ctx=ctx)
        twin.weight_mu.set_data(layer.weight.data())
        twin.bias_mu.set_data(layer.bias.data())
    elif layer.weight._deferred_init:
        # initialized before its input size was known: the twin waits for the first call
        # too, on the same contexts, mu from the same initializer
        _, ctx, initializer, _ = layer.weight._deferred_init
        twin.initialize(init=initializer, ctx=ctx)
    return twin

"""The weight estimator: how one draw of the noise gives the network's output. Weight sampling
(the tutorial's), the local reparametrization (pre-activations, Kingma et al. 2015) or Flipout
(one perturbation with random signs per example, Wen et al. 2018)."""
import math

from ..errors import ConfigError
from .choices import Choice, named
from ..networks.layers import flipout_parts, lrt_parts
from .choices import Registry

KNOWN = Registry("estimator")


class Estimator(Choice):
    """How a step draws the network's noise."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        KNOWN.add(cls)

    def check(self, network):
        pass

    def noise_size(self, graph, batch_size, kl):
        """Standard normals one draw takes for a mini-batch of ``batch_size``."""
        raise NotImplementedError

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        """``(nll, dNLL/dmu, dNLL/dsigma or None, w, eps_w)`` of one draw ``eps`` on the flat
        mu and sigma: ``w = mu + sigma * eps_w`` are the weights the KL estimate takes (None
        where ``kl`` needs none); None for dNLL/dsigma: it is dNLL/dw * eps_w, with the KL's
        gradient added to dNLL/dw first."""
        raise NotImplementedError

    def block_output(self, F, apply, x, mus, sigmas, epsilons, convolution):
        """A Gluon block's output (``blocks.py``): ``apply(F, x, weight, bias)`` its operator,
        ``epsilons`` its weight sample (all zeros while it uses its mean weights); per-example
        noise, where the estimator needs any, comes from MXNet's generator."""
        raise NotImplementedError


class WeightSampling(Estimator):
    """w = mu + sigma * eps for every weight, the tutorial's estimator."""
    name = "sample"

    def noise_size(self, graph, batch_size, kl):
        return graph.layout.size

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        w = mu + sigma * eps
        nll, grad_w = graph.nll_and_grad(X, y, w)
        return nll, grad_w, None, w, eps

    def block_output(self, F, apply, x, mus, sigmas, epsilons, convolution):
        from ..tutorial import transform_gaussian_samples
        return apply(F, x, *transform_gaussian_samples(mus, sigmas, epsilons))


class _NoisyNetwork(Estimator):
    """An estimator whose network takes noise of its own beside the parameters (graph inputs:
    mu, a second array of each parameter's shape, and ``noise_shapes``)."""

    def check(self, network):
        if not network.linear_layers_only:
            raise ConfigError("estimator", self.name, "sample for a network with layers of "
                              "weights other than dense, conv and gate (%s draws those "
                              "layers' outputs)" % self.name)

    layer_parts = None  # a layer's methods this estimator draws with (``layers.lrt_parts``)

    def noise_shapes(self, network, batch_size):
        return [shape for layer, inp, out in network.linear_layers()
                for shape in self.layer_parts(layer)[1](batch_size, inp, out)]

    def data_noise_size(self, graph, batch_size):
        return sum(math.prod(shape) for shape in self.noise_shapes(graph.network, batch_size))


class LocalReparametrization(_NoisyNetwork):
    """Each dense or convolution layer's pre-activations drawn from their Gaussian (Kingma et
    al. 2015): per example and unit, so examples share no noise."""
    name = "lrt"

    @property
    def net(self):
        from ..tutorial import lrt_net
        return lrt_net

    layer_parts = staticmethod(lrt_parts)

    def noise_size(self, graph, batch_size, kl):
        return self.data_noise_size(graph, batch_size) + (graph.layout.size if kl.per_draw else 0)

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        split = self.data_noise_size(graph, X.shape[0])
        nll, grad_mu, grad_sigma = graph.noisy_nll_and_grads(self, X, y, mu, sigma, eps[:split])
        eps_w = eps[split:]
        return nll, grad_mu, grad_sigma, mu + sigma * eps_w if kl.per_draw else None, eps_w

    def block_output(self, F, apply, x, mus, sigmas, epsilons, convolution):
        from ..networks.layers import local_reparametrization
        # no noise while the block uses its mean weights (its weight sample all zeros); the
        # products with ones tie the samples' shapes to the means' (deferred initialization)
        drawing = F.sign(sum(F.sum(F.abs(eps * F.ones_like(mu)))
                             for eps, mu in zip(epsilons, mus)))
        return local_reparametrization(F, apply, x, mus, sigmas, drawing=drawing)


class Flipout(_NoisyNetwork):
    """One weight perturbation sigma * eps for the mini-batch, decorrelated example by example
    by random signs on each layer's inputs and outputs (Wen et al. 2018); the perturbed weights
    mu + sigma * eps are the KL's weight sample."""
    name = "flipout"

    @property
    def net(self):
        from ..tutorial import flipout_net
        return flipout_net

    layer_parts = staticmethod(flipout_parts)

    def noise_size(self, graph, batch_size, kl):
        return graph.layout.size + self.data_noise_size(graph, batch_size)

    def draw(self, graph, X, y, mu, sigma, eps, kl):
        eps_w = eps[:graph.layout.size]
        delta = sigma * eps_w
        nll, grad_mu, grad_delta = graph.noisy_nll_and_grads(
            self, X, y, mu, delta, eps[graph.layout.size:])
        return nll, grad_mu, grad_delta * eps_w, mu + delta, eps_w

    def block_output(self, F, apply, x, mus, sigmas, epsilons, convolution):
        from ..networks.layers import flipout
        return flipout(F, apply, x, mus, [sigma * eps for sigma, eps in zip(sigmas, epsilons)],
                       convolution)


ESTIMATORS = (WeightSampling(), LocalReparametrization(), Flipout())


def estimator(name):
    """The estimator ``name`` names (a built-in one, or a user's subclass defined in this
    process), or the object itself."""
    return named(Estimator, [kind() for kind in KNOWN.values()], name, "estimator")


# The KL estimate: its direction and how it is estimated.

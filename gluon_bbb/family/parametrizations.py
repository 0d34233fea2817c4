"""How the posterior's standard deviation sigma > 0 comes from an unconstrained parameter rho,
one object per parametrization: ``Softplus``, sigma = softplus(rho) (the tutorial's and the
paper's), and ``LogVariance``, rho = log sigma^2 (sparse variational dropout's, Molchanov et al.
2017, where sigma spans many orders of magnitude)."""
import math

from .elementwise import SOFTPLUS_FLOOR, operators, sigmoid, softplus
from .choices import Registry

KNOWN = Registry("parametrization")


class Parametrization:
    """sigma = f(rho) with f > 0, smooth and increasing."""
    name = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        KNOWN.add(cls)

    def sigma(self, rho, F=None):
        raise NotImplementedError

    def sigma_gradient(self, rho, sigma, F=None):
        """d sigma / d rho elementwise, given ``sigma = self.sigma(rho)``: by autograd of
        ``sigma`` (NDArrays), where a subclass writes no closed form for its own ``sigma``."""
        from mxnet import autograd
        rho = rho.copy()
        rho.attach_grad()
        with autograd.record():
            value = self.sigma(rho)
        value.backward()
        return rho.grad

    def rho_for(self, sigma):
        """The rho whose sigma is ``sigma`` (a float > 0)."""
        raise NotImplementedError

    def sigmas(self, rhos, F=None):
        """``sigma`` of each array of ``rhos``."""
        return [self.sigma(rho, F) for rho in rhos]

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return "<parametrization %s>" % self.name


class Softplus(Parametrization):
    """sigma = softplus(rho) = log(1 + exp(rho)), rho floored at ``SOFTPLUS_FLOOR`` as in the C
    kernels: d sigma / d rho = sigmoid(rho)."""
    name = "softplus"

    def sigma(self, rho, F=None):
        return softplus(rho, F)

    def sigma_gradient(self, rho, sigma, F=None):
        if type(self) is not Softplus:  # a subclass's sigma may be another
            return super().sigma_gradient(rho, sigma, F)
        return sigmoid(operators(F).maximum(rho, SOFTPLUS_FLOOR), F)

    def rho_for(self, sigma):
        if type(self) is not Softplus:
            return super().rho_for(sigma)
        return math.log(math.expm1(sigma))


class LogVariance(Parametrization):
    """rho = log sigma^2: sigma = exp(rho / 2), d sigma / d rho = sigma / 2. rho is floored at
    ``2 * SOFTPLUS_FLOOR`` (sigma = exp(-80), where softplus's floor also leaves it), so that
    log sigma and 1 / sigma stay finite."""
    name = "log_variance"

    def sigma(self, rho, F=None):
        F = operators(F)
        return F.exp(F.maximum(rho, 2.0 * SOFTPLUS_FLOOR) * 0.5)

    def sigma_gradient(self, rho, sigma, F=None):
        if type(self) is not LogVariance:
            return super().sigma_gradient(rho, sigma, F)
        # zero below the floor, as the floor's own derivative is
        return sigma * 0.5 * (rho >= 2.0 * SOFTPLUS_FLOOR)

    def rho_for(self, sigma):
        if type(self) is not LogVariance:
            return super().rho_for(sigma)
        return 2.0 * math.log(sigma)


SOFTPLUS = Softplus()


def parametrization(name):
    """The parametrization object config.json's ``parametrization`` names (or the object
    itself); ConfigError otherwise."""
    if isinstance(name, Parametrization):
        return name
    return KNOWN.kind(name)()

"""The tutorial's autograd formulation of the loss: the reference every backend is checked
against. Test-only: training computes the same loss with its gradient written out."""
from mxnet import autograd

from gluon_bbb import (combined_loss, log_softmax_likelihood, net, sample_epsilons,
                       transform_gaussian_samples, transform_rhos)


def tutorial_loss(X, y_one_hot, mus, rhos, log_prior, kl_weight, num_samples=1, epsilons=None,
                  network=None, log_likelihood=log_softmax_likelihood):
    """``combined_loss`` of one mini-batch on per-layer arrays, averaged over ``num_samples``
    weight samples (``epsilons``: one list of per-layer draws per sample; default: drawn with
    ``sample_epsilons``), exactly as the tutorial writes it, for ``network`` (default: the MLP
    the arrays shape). Call inside ``autograd.record()``."""
    sigmas = transform_rhos(rhos)
    shapes = [mu.shape for mu in mus]
    epsilons = epsilons or [sample_epsilons(shapes, X.context) for _ in range(num_samples)]
    total = None
    for eps in epsilons:
        weights = transform_gaussian_samples(mus, sigmas, eps)
        loss = combined_loss(net(X, weights, network=network), y_one_hot, weights, mus, sigmas,
                             log_prior, log_likelihood, 1, kl_weight=kl_weight)
        total = loss if total is None else total + loss
    return total / len(epsilons)


def tutorial_gradients(X, y_one_hot, mus, rhos, log_prior, kl_weight, epsilons, network=None,
                       log_likelihood=log_softmax_likelihood):
    """(loss, [d/dmu], [d/drho]) of ``tutorial_loss`` by autograd."""
    for param in mus + rhos:
        param.attach_grad()
    with autograd.record():
        loss = tutorial_loss(X, y_one_hot, mus, rhos, log_prior, kl_weight, epsilons=epsilons,
                             network=network, log_likelihood=log_likelihood)
    loss.backward()
    return loss, [m.grad for m in mus], [r.grad for r in rhos]

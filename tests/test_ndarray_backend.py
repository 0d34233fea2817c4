"""learning/ndarray_backend.py: the step's loss and gradients on MXNet's operators against autograd
of the tutorial's loss, for an MLP and a convolutional network; the flat layout's views."""

import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, combined_loss_gradients
from gluon_bbb.learning.ndarray_backend import FlatLayout, NetworkGraph
from tutorial_reference import tutorial_gradients

from test_step import CONV, assert_matches, small_problem


@pytest.mark.parametrize("prior,num_samples", [("gaussian", 1), ("scale_mixture", 1),
                                                ("gaussian", 3), ("scale_mixture", 2)])
def test_ndarray_backend_equals_autograd_of_combined_loss(ctx, prior, num_samples):
    config = Config.from_dict(dict(num_inputs=12, num_hidden_units=9, num_outputs=4, prior=prior,
                                   sigma_p1=1.0, sigma_p2=0.05))
    layout, mu, rho, X, y, rng = small_problem(ctx, config)
    epsilons = [nd.array(rng.normal(size=layout.size), ctx=ctx, dtype="float64")
                for _ in range(num_samples)]
    got = combined_loss_gradients(X, y, mu, rho, epsilons, config.build_prior(), 0.3,
                                  NetworkGraph(layout.shapes))
    assert all(a.context == ctx for a in got) and got[1].shape == (layout.size,)
    reference = tutorial_gradients(X, y, layout.views(mu.copy()), layout.views(rho.copy()),
                                   config.build_prior(), 0.3, [layout.views(e) for e in epsilons])
    assert_matches(got, reference, layout, rtol=1e-9)


def test_layout_views_share_memory(ctx):
    layout = FlatLayout([(3, 2), (3,)])
    W = nd.array([[0, 1], [2, 3], [4, 5]], ctx=ctx)
    b = nd.array([6, 7, 8], ctx=ctx)
    flat = layout.flatten([W, b])
    np.testing.assert_array_equal(flat.asnumpy(), np.arange(9))
    views = layout.views(flat)
    assert [v.shape for v in views] == [(3, 2), (3,)] and views[0].context == ctx
    flat[:] = flat * 2
    np.testing.assert_array_equal(views[1].asnumpy(), [12, 14, 16])
    np.testing.assert_array_equal(views[0].asnumpy(), 2 * W.asnumpy())


@pytest.mark.parametrize("prior", ["gaussian", "scale_mixture"])
def test_ndarray_backend_equals_autograd_for_a_convolutional_network(ctx, prior):
    config = Config.from_dict(dict(prior=prior, sigma_p1=1.0, sigma_p2=0.05, **CONV))
    assert [tuple(s) for s in config.layer_shapes()] == [(3, 1, 3, 3), (3,), (2, 3, 2, 2), (2,),
                                                          (5, 2 * 2 * 2), (5,), (4, 5), (4,)]
    layout, mu, rho, X, y, rng = small_problem(ctx, config)
    epsilons = [nd.array(rng.normal(size=layout.size), ctx=ctx, dtype="float64")]
    network = config.build_network()
    got = combined_loss_gradients(X, y, mu, rho, epsilons, config.build_prior(), 0.3,
                                  NetworkGraph(network))
    reference = tutorial_gradients(X, y, layout.views(mu.copy()), layout.views(rho.copy()),
                                   config.build_prior(), 0.3, [layout.views(e) for e in epsilons],
                                   network=network)
    assert_matches(got, reference, layout, rtol=1e-9)

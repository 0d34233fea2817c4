"""networks/layers.py: a description's parameter shapes and output shape against the
arithmetic of its layers, and descriptions that are not one refused."""

import pytest

from gluon_bbb import Config, ConfigError
from gluon_bbb.networks.layers import parse_network


def test_network_descriptions_that_are_not_one_are_refused():
    for bad, detail in (("conv:3:3,relu,dense:7", "ending in dense:10"),
                        ("conv:3", "conv takes conv:CHANNELS:KERNEL"),
                        ("spline:4", "unknown layer .spline:4."),
                        ("conv:3:40,dense:10", "does not fit 28x28 inputs")):
        with pytest.raises(ConfigError, match="network must be .*%s" % detail):
            Config(network=bad)


def test_a_lenets_shapes_follow_its_layers_arithmetic():
    network = parse_network("conv:20:5,relu,pool:2,conv:50:5,relu,pool:2,dense:500,relu,dense:10")
    # 28 - 5 + 1 = 24, pooled 12; 12 - 5 + 1 = 8, pooled 4: 50 * 4 * 4 inputs to the dense layer
    assert network.param_shapes() == [(20, 1, 5, 5), (20,), (50, 20, 5, 5), (50,),
                                      (500, 50 * 4 * 4), (500,), (10, 500), (10,)]
    assert network.output_shapes[-1] == (10,)

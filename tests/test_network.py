"""networks/network.py: descriptions read into the networks they name, and descriptions that
are not one refused (the forward passes against the tutorial's: test_tutorial.py,
test_estimators.py)."""
import pytest

from gluon_bbb import Config, ConfigError
from gluon_bbb.networks.network import lenet, parse_network

LENET = "conv:20:5,relu,pool:2,conv:50:5,relu,pool:2,dense:500,relu,dense:10"


def test_a_description_is_the_network_it_names():
    network = parse_network(LENET)
    assert str(network) == LENET and str(parse_network("lenet")) == LENET
    assert network.param_shapes() == lenet().param_shapes()
    assert network.input_shape == (1, 28, 28) and network.output_shapes[-1] == (10,)


def test_network_descriptions_that_are_not_one_are_refused():
    for bad, detail in (("conv:3:3,relu,dense:7", "ending in dense:10"),
                        ("conv:3", "conv takes conv:CHANNELS:KERNEL"),
                        ("spline:4", "unknown layer .spline:4."),
                        ("conv:3:40,dense:10", "does not fit 28x28 inputs")):
        with pytest.raises(ConfigError, match="network must be .*%s" % detail):
            Config(network=bad)

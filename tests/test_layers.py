"""networks/layers.py: each layer's parameter shapes and output shape against its arithmetic
(the layers' formulas against autograd and the kernels: test_estimators.py, test_operators.py)."""
from gluon_bbb.networks.layers import Conv2D, Dense, MaxPool2D, ReLU


def test_a_lenets_shapes_follow_its_layers_arithmetic():
    shape, shapes = (1, 28, 28), []
    for layer in (Conv2D(20, 5), ReLU(), MaxPool2D(2), Conv2D(50, 5), ReLU(), MaxPool2D(2),
                  Dense(500), ReLU(), Dense(10)):
        params, shape = layer.param_shapes(shape)
        shapes += params
    # 28 - 5 + 1 = 24, pooled 12; 12 - 5 + 1 = 8, pooled 4: 50 * 4 * 4 inputs to the dense layer
    assert shapes == [(20, 1, 5, 5), (20,), (50, 20, 5, 5), (50,), (500, 50 * 4 * 4), (500,),
                      (10, 500), (10,)]
    assert shape == (10,)

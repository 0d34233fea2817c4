"""native/operators.py and _operators.cc: each MXNet operator of the C library against its
formula and autograd of the plain operators, over randomized shapes, and taken only for the
formulas it computes."""
import mxnet as mx
import numpy as np
import pytest
from hypothesis import given, strategies as st
from mxnet import nd

from gluon_bbb import Config, combined_loss_gradients
from gluon_bbb.native import library as native
from gluon_bbb.family.estimators import estimator
from gluon_bbb.family.priors import GaussianPrior

# every test here needs the built library: skipped without it, failed in CI (conftest.py)
pytestmark = pytest.mark.usefixtures("native_kernels")


@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.integers(0, 2 ** 32 - 1))
def test_the_lrt_output_operator_follows_the_formula(native_operators, shape, seed):
    """``bbb_lrt_output`` (``native/operators.py``) against mean + sqrt(variance + floor) *
    noise and its gradients written in NumPy, over shapes and variances from 0 (the floor's
    case) to 10, as ``Accelerated`` hands it to the layers: symbol and NDArray alike."""
    from mxnet import autograd, sym
    from gluon_bbb.family.elementwise import LRT_VARIANCE_FLOOR
    rng = np.random.default_rng(seed)
    mean, noise, g = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    variance = (rng.random(shape) * 10.0 ** rng.uniform(-9, 1, size=shape)).astype(np.float32)
    variance[rng.random(shape) < 0.2] = 0.0
    spread = np.sqrt(variance.astype(np.float64) + LRT_VARIANCE_FLOOR)
    expected = mean + spread * noise
    arrays = [nd.array(a) for a in (mean, variance, noise)]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        out = native_operators.Accelerated(nd).lrt_output(*arrays)
    out.backward(nd.array(g))
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=2e-6, atol=1e-6)
    for array, gradient in zip(arrays, (g, g * noise * 0.5 / spread, g * spread)):
        np.testing.assert_allclose(array.grad.asnumpy(), gradient, rtol=2e-6,
                                   atol=1e-6 * np.abs(gradient).max())
    # in a graph, as the native backend builds it
    names = ("m", "v", "z")
    graph = native_operators.Accelerated(sym).lrt_output(*[sym.var(n) for n in names])
    bound = graph.bind(mx.cpu(), dict(zip(names, arrays)))
    np.testing.assert_allclose(bound.forward()[0].asnumpy(), out.asnumpy(), rtol=0, atol=0)


@st.composite
def signed_shapes(draw):
    """(x's shape, noise's shape): noise of x's leading axes and 1 on the rest."""
    shape = draw(st.lists(st.integers(1, 7), min_size=1, max_size=4))
    kept = draw(st.integers(0, len(shape)))
    return shape, shape[:kept] + [1] * (len(shape) - kept)


@given(signed_shapes(), st.integers(0, 2 ** 32 - 1))
def test_the_signed_operator_follows_the_formula(native_operators, shapes, seed):
    """``bbb_signed`` (Flipout's x * sign(noise), broadcast) against NumPy, with zeros among
    the noise (sign 0, as MXNet's), and its gradients: g * sign(noise) for x, 0 for the
    noise."""
    from mxnet import autograd
    shape, noise_shape = shapes
    rng = np.random.default_rng(seed)
    x, g = rng.normal(size=shape).astype(np.float32), rng.normal(size=shape).astype(np.float32)
    noise = rng.normal(size=noise_shape).astype(np.float32)
    noise[rng.random(noise_shape) < 0.2] = 0.0
    arrays = [nd.array(x), nd.array(noise)]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        out = native_operators.Accelerated(nd).signed(*arrays)
    out.backward(nd.array(g))
    np.testing.assert_array_equal(out.asnumpy(), x * np.sign(noise))
    np.testing.assert_array_equal(arrays[0].grad.asnumpy(), g * np.sign(noise))
    np.testing.assert_array_equal(arrays[1].grad.asnumpy(), np.zeros(noise_shape))


def test_the_signed_operator_refuses_a_noise_shape_that_is_not_xs_with_trailing_ones(
        native_operators):
    """Checked on a few shapes, not per example of the test above: each MXNetError after a
    library operator's backward pass on other shapes leaks about 1 MB in MXNet 1.9.1 (measured:
    400 examples of that test, 147 -> 481 MB; a few thousand exhausted 24 GiB)."""
    for shape in ([2, 3], [4, 2, 5], [2, 1, 3, 2]):
        with pytest.raises(mx.base.MXNetError, match="trailing axes of size 1"):
            nd.bbb_signed(nd.ones(shape), nd.ones([1] + shape[1:])).wait_to_read()


@given(signed_shapes(), st.integers(0, 2 ** 32 - 1))
def test_the_scaled_operator_follows_the_formula(native_operators, shapes, seed):
    """``bbb_scaled`` (a gate drawn per example: x times factors broadcast over x's trailing
    axes) against autograd of MXNet's ``broadcast_mul`` in float64: the output, x's gradient
    and each factor's, the sum over its block; in a graph, the same output."""
    from mxnet import sym
    shape, factor_shape = shapes
    rng = np.random.default_rng(seed)
    arrays = [rng.normal(size=shape).astype(np.float32),
              rng.normal(size=factor_shape).astype(np.float32)]
    got = check_operator_against_autograd(native_operators.Accelerated(nd).scaled,
                                          nd.broadcast_mul, arrays, rng.normal(size=shape))
    graph = native_operators.Accelerated(sym).scaled(sym.var("x"), sym.var("f"))
    bound = graph.bind(mx.cpu(), {"x": nd.array(arrays[0]), "f": nd.array(arrays[1])})
    np.testing.assert_array_equal(bound.forward()[0].asnumpy(), got[0])


@st.composite
def convolution_layers(draw):
    """A convolution layer's arrays (h, W, b, outputs' shape): 1-4 images of 1-5 channels of
    any side from the kernel's to 9 more, 1-13 output channels (tiles of 6, 5 and 4 rows with
    the last one partial), kernels of 1-5."""
    n, c, oc, k = (draw(st.integers(1, top)) for top in (4, 5, 13, 5))
    height, width = (k + draw(st.integers(0, 9)) for _ in range(2))
    return (n, c, height, width), (oc, c, k, k), (oc,), (n, oc, height - k + 1, width - k + 1)


def plain_convolution(x, W, b):
    return nd.Convolution(x, W, b, num_filter=W.shape[0], kernel=W.shape[2:])


def check_operator_against_autograd(operator, reference, arrays, g):
    """``operator`` (on float32 NDArrays of ``arrays``) against autograd of ``reference`` in
    float64, the output and every input's gradient for the output's gradient ``g``."""
    from mxnet import autograd
    results = []
    for dtype, formula in (("float32", operator), ("float64", reference)):
        inputs = [nd.array(a, dtype=dtype) for a in arrays]
        for a in inputs:
            a.attach_grad()
        with autograd.record():
            out = formula(*inputs)
        out.backward(nd.array(g, dtype=dtype))
        results.append([out.asnumpy()] + [a.grad.asnumpy() for a in inputs])
    for ours, theirs in zip(*results):
        assert ours.dtype == np.float32 and ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5 * (np.abs(theirs).max() + 1))
    return results[0]


@given(convolution_layers(), st.sampled_from([4, 8, 16]), st.integers(0, 2 ** 32 - 1))
def test_the_lrt_convolution_operator_follows_the_formula(native_operators, layer, widest,
                                                          seed):
    """``bbb_lrt_convolution`` (a convolution layer's local reparametrization in one operator)
    at each vector width the CPU has, against autograd of ``local_reparametrization`` on
    MXNet's convolution in float64: the output and the gradients of h, W_mu, b_mu, W_sigma,
    b_sigma and the noise. In a graph whose input is the data, h's gradient is zeros and the
    others the same."""
    from mxnet import sym
    from gluon_bbb.networks.layers import local_reparametrization
    rng = np.random.default_rng(seed)
    h, W, b, out = layer
    arrays = [rng.normal(size=shape).astype(np.float32) for shape in (h, W, b, W, b, out)]
    arrays[3][rng.random(W) < 0.2] = 0.0  # sigma 0: the variance's floor
    accelerated = native_operators.Accelerated(nd)
    head = rng.normal(size=out)
    got = check_operator_against_autograd(
        lambda h, *p: accelerated.lrt_convolution(h, p[0:2], p[2:4], p[4], widest=widest),
        lambda h, *p: local_reparametrization(
            nd, lambda F, h, W, b: plain_convolution(h, W, b), h, p[0:2], p[2:4], p[4]),
        arrays, head)
    names = ["h", "wm", "bm", "ws", "bs", "z"]
    graph = native_operators.Accelerated(sym, data_inputs=["h"]).lrt_convolution(
        sym.reshape(sym.var("h"), shape=h), [sym.var(n) for n in names[1:3]],
        [sym.var(n) for n in names[3:5]], sym.var("z"), widest=widest)
    gradients = {n: nd.zeros(a.shape) for n, a in zip(names, arrays)}
    bound = graph.bind(mx.cpu(), {n: nd.array(a) for n, a in zip(names, arrays)},
                       args_grad=gradients)
    bound.forward(is_train=True)
    bound.backward(nd.array(head))
    assert not gradients["h"].asnumpy().any()
    for name, expected in zip(names[1:], got[2:]):
        np.testing.assert_allclose(gradients[name].asnumpy(), expected, rtol=1e-5, atol=1e-6)


@given(convolution_layers(), st.sampled_from([4, 8, 16]), st.integers(0, 2 ** 32 - 1))
def test_the_flipout_convolution_operator_follows_the_formula(native_operators, layer, widest,
                                                              seed):
    """``bbb_flipout_convolution`` (a convolution layer's Flipout in one operator, each image
    one convolution with its own kernels) at each vector width the CPU has, against autograd
    of ``flipout`` on MXNet's convolution in float64, zeros among the noise (sign 0); the
    noise's gradients are zeros (the signs')."""
    from gluon_bbb.networks.layers import flipout
    rng = np.random.default_rng(seed)
    h, W, b, out = layer
    shapes = (h, W, b, W, b, (h[0], h[1], 1, 1), (h[0], W[0], 1, 1))
    arrays = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
    for noise in arrays[5:]:
        noise[rng.random(noise.shape) < 0.2] = 0.0
    accelerated = native_operators.Accelerated(nd)
    got = check_operator_against_autograd(
        lambda h, *p: accelerated.flipout_convolution(h, p[0:2], p[2:4], p[4], p[5],
                                                      widest=widest),
        lambda h, *p: flipout(nd, lambda F, h, W, b: plain_convolution(h, W, b), h, p[0:2],
                              p[2:4], True, p[4], p[5]),
        arrays, rng.normal(size=out))
    assert not got[6].any() and not got[7].any()


@st.composite
def pooled_images(draw):
    """(x's shape, size): 1-4 images of 1-6 channels, sides from the window's to 13, windows
    of 1-4 (sides not a multiple of the window's among them)."""
    size = draw(st.integers(1, 4))
    n, c = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    return (n, c, draw(st.integers(size, 13)), draw(st.integers(size, 13))), size


@given(pooled_images(), st.booleans(), st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_the_max_pool_operator_follows_the_formula(native_operators, images, relu, ties, seed):
    """``bbb_max_pool`` against autograd of ``MaxPool2D``'s formula (MXNet's max ``Pooling``)
    and, with ``relu``, ``ReLU``'s after it, in float64: the output and the input's gradient
    (each window's to its first largest entry; none where the ReLU cut it), with ``ties``
    inputs of five values (windows with several largest entries, zeros at the ReLU's kink).
    In a graph as the native backend builds it: the same output."""
    from mxnet import sym
    from gluon_bbb.networks.layers import MaxPool2D, ReLU
    shape, size = images
    pool = MaxPool2D(size)
    out_shape = (shape[0],) + pool.param_shapes(shape[1:])[1]
    rng = np.random.default_rng(seed)
    x = (rng.integers(-2, 3, size=shape) if ties else rng.normal(size=shape)).astype(np.float32)

    def plain(h):
        pooled = pool(nd, h, [], shape[1:])
        return ReLU()(nd, pooled, [], out_shape[1:]) if relu else pooled
    got = check_operator_against_autograd(
        lambda h: native_operators.Accelerated(nd).max_pool(h, size, relu), plain, [x],
        rng.normal(size=out_shape))
    if relu:
        assert (got[0] >= 0).all()
    graph = native_operators.Accelerated(sym).max_pool(sym.var("x"), size, relu)
    bound = graph.bind(mx.cpu(), {"x": nd.array(x)})
    np.testing.assert_array_equal(bound.forward()[0].asnumpy(), got[0])


def test_a_pooling_takes_its_operator_only_for_the_formulas_it_computes(native_operators,
                                                                        monkeypatch):
    """A max pooling and the ReLU next to it take ``bbb_max_pool`` in one call where the
    operators have it, the ReLU with it only where it is ``ReLU``'s formula (moved after the
    pooling where it came first); a user's pooling with a formula of its own, or a user's
    activation, keeps its formula on MXNet's operators. Output and gradients as the layers'
    own, one by one."""
    from mxnet import autograd
    from gluon_bbb.networks.layers import Conv2D, Dense, Flatten, MaxPool2D, ReLU
    from gluon_bbb.networks.network import Network
    calls = []
    fused = native_operators.Accelerated.max_pool
    monkeypatch.setattr(native_operators.Accelerated, "max_pool",
                        lambda self, h, size, relu: calls.append(relu) or fused(self, h, size,
                                                                                relu))

    class MeanPool(MaxPool2D):
        def __call__(self, F, h, params, input_shape):
            return F.Pooling(h, kernel=(self.size,) * 2, stride=(self.size,) * 2,
                             pool_type="avg")

    class Absolute(ReLU):
        def __call__(self, F, h, params, input_shape):
            return F.abs(h)

    rng = np.random.default_rng(2)
    # the operator's calls, by whether each computed the ReLU too
    for layers, expected in (([ReLU(), MaxPool2D(2)], [True]), ([MaxPool2D(2), ReLU()], [True]),
                             ([MaxPool2D(3)], [False]), ([MeanPool(2), ReLU()], []),
                             ([Absolute(), MaxPool2D(2)], [False]),
                             ([MaxPool2D(2), Absolute()], [False])):
        network = Network([Conv2D(4, 3)] + layers + [Flatten(), Dense(3)],
                          input_shape=(2, 9, 9))
        X, results = nd.array(rng.normal(size=(5, 162))), []
        for F in (native_operators.Accelerated(nd), nd):
            params = [nd.array(np.random.default_rng(i).normal(size=s))
                      for i, s in enumerate(network.param_shapes())]
            for p in params:
                p.attach_grad()
            del calls[:]
            with autograd.record():
                out = network(X, params, F=F)
            out.backward()
            results.append((out.asnumpy(), [p.grad.asnumpy() for p in params], list(calls)))
        assert results[0][2] == expected and results[1][2] == []
        np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5, atol=1e-6)
        for ours, theirs in zip(results[0][1], results[1][1]):
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("estimator_name", ["lrt", "flipout"])
def test_a_convolution_takes_its_operator_only_for_the_formula_it_computes(
        native_operators, monkeypatch, estimator_name):
    """A user's convolution that changes the layer's formula (``__call__``) or the estimator's
    noise (here Flipout's signs per position) draws through its own formulas under the native
    backend's operators, not through the built-in convolution's operator; the built-in one
    takes its operator and gives its formula's output."""
    from gluon_bbb.networks.layers import Conv2D, Dense, Flatten, MaxPool2D, ReLU
    from gluon_bbb.networks.network import Network
    operator = estimator_name + "_convolution"
    calls = []
    fused = getattr(native_operators.Accelerated, operator)
    monkeypatch.setattr(native_operators.Accelerated, operator,
                        lambda self, *args: calls.append(1) or fused(self, *args))

    class Doubled(Conv2D):
        def __call__(self, F, h, params, input_shape):
            return 2 * super().__call__(F, h, params, input_shape)

    class OwnNoise(Conv2D):
        def lrt_noise_shapes(self, batch_size, input_shape, output_shape):
            return super().lrt_noise_shapes(batch_size, input_shape, output_shape)

        def flipout_noise_shapes(self, batch_size, input_shape, output_shape):
            return [(batch_size,) + tuple(input_shape), (batch_size,) + tuple(output_shape)]

    rng = np.random.default_rng(0)
    parts = estimator(estimator_name).layer_parts
    for conv, taken in ((Conv2D(5, 3), True), (Doubled(5, 3), False), (OwnNoise(5, 3), False)):
        network = Network([conv, ReLU(), MaxPool2D(2), Flatten(), Dense(3)],
                          input_shape=(2, 9, 9))
        shapes = network.param_shapes()
        mus = [nd.array(rng.normal(size=s)) for s in shapes]
        seconds = [nd.array(rng.random(size=s)) for s in shapes]
        noise = [nd.array(rng.normal(size=s)) for layer, inp, out in network.linear_layers()
                 for s in parts(layer)[1](4, inp, out)]
        X = nd.array(rng.normal(size=(4, 162)))
        del calls[:]
        ours = network.noisy_run(X, parts, mus, seconds, noise,
                                 native_operators.Accelerated(nd))
        assert len(calls) == (1 if taken else 0)
        plain = network.noisy_run(X, parts, mus, seconds, noise, nd)
        np.testing.assert_allclose(ours.asnumpy(), plain.asnumpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("estimator_name,operators", [
    ("lrt", {"lrt_output": 2, "lrt_convolution": 2, "max_pool": 2}),
    ("flipout", {"signed": 4, "flipout_convolution": 2, "max_pool": 2}),
    ("sample", {"max_pool": 2})])
def test_the_native_graphs_take_the_operators_and_the_ndarray_ones_do_not(
        ctx, mnist, native_operators, estimator_name, operators):
    """The native backend's local reparametrization runs ``bbb_lrt_output`` for each dense
    layer and ``bbb_lrt_convolution`` for each convolution, its Flipout ``bbb_signed`` twice
    for each dense layer (the input's signs and the output's) and
    ``bbb_flipout_convolution`` for each convolution, and every estimator's graph
    ``bbb_max_pool`` for each max pooling (with the ReLU after it); the ndarray backend's
    graphs, which any context and float64 take, the formulas on MXNet's operators; both give
    the same loss and gradients."""
    from gluon_bbb.learning.step import NetworkGraph
    from gluon_bbb.learning.noise import PhiloxNoise
    config = Config(network="lenet", estimator=estimator_name, kl="analytic")
    network = config.build_network()
    graph = NetworkGraph(network)
    rng = np.random.default_rng(0)
    mu = nd.array(rng.normal(size=graph.layout.size) * 0.1, ctx=ctx)
    rho = nd.array(rng.normal(-4, 1, size=graph.layout.size), ctx=ctx)
    X = nd.array(mnist.train_images[:16], ctx=ctx)
    y = nd.one_hot(nd.array(mnist.train_labels[:16], ctx=ctx), 10)
    calls = []

    def counted(operator):
        fused = getattr(native_operators.Accelerated, operator)

        def count(self, *args):
            calls.append((operator, self._F.__name__))
            return fused(self, *args)
        return count
    with pytest.MonkeyPatch.context() as patch:
        for operator in operators:
            patch.setattr(native_operators.Accelerated, operator, counted(operator))
        got = native.loss_gradients(X, y, mu, rho, PhiloxNoise(ctx, seed=3), 1,
                                    GaussianPrior(1.0), 0.01, graph,
                                    native.Workspace(graph.layout.size, ctx), config.kl_kind,
                                    config.estimator_kind)
    # two convolutions, two dense layers, in the symbol graph
    assert {operator: [name for name, _ in calls].count(operator)
            for operator in operators} == operators
    assert all(F.startswith("mxnet.symbol") for _, F in calls)
    plain = NetworkGraph(network)
    noise = PhiloxNoise(ctx, seed=3)
    size = config.estimator_kind.noise_size(plain, 16, config.kl_kind)
    eps = noise.normal((size,))
    reference = combined_loss_gradients(X, y, mu, rho, [eps], GaussianPrior(1.0), 0.01, plain,
                                        config.estimator_kind, config.kl_kind)
    if estimator_name == "sample":
        assert list(plain._nll_ops) == [False] and list(graph._nll_ops) == [True]
    else:
        assert list(plain._noisy_ops) == [(estimator_name, False)]
    np.testing.assert_allclose(got[0].asnumpy(), reference[0].asnumpy(), rtol=1e-5)
    for ours, theirs in zip(got[1:], reference[1:]):
        theirs = theirs.asnumpy()
        np.testing.assert_allclose(ours.asnumpy(), theirs, rtol=1e-4,
                                   atol=1e-5 * np.abs(theirs).max())

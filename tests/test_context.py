import mxnet as mx
import pytest
from mxnet import autograd

from gluon_bbb import ContextError, context_name, parse_context
from gluon_bbb.model import init_variational_params, layer_param_shapes
from tutorial_reference import tutorial_loss

NUM_GPUS = mx.context.num_gpus()


def test_parse_cpu():
    assert parse_context("cpu") == mx.cpu(0)
    assert parse_context("cpu:1") == mx.cpu(1)
    assert context_name(mx.gpu(2)) == "gpu:2"


@pytest.mark.parametrize("spec", ["tpu", "gpu:", "gpu:x", "cpu:-1", ""])
def test_unparseable(spec):
    with pytest.raises(ContextError, match="not understood"):
        parse_context(spec)


def test_missing_gpu_is_refused_with_a_clear_message():
    with pytest.raises(ContextError, match="asked for GPU %d but MXNet sees %d GPU" % (
            NUM_GPUS, NUM_GPUS)):
        parse_context("gpu:%d" % NUM_GPUS)


@pytest.mark.skipif(NUM_GPUS == 0, reason="needs a CUDA GPU and a CUDA build of MXNet; "
                                          "this machine has none")
def test_training_step_on_gpu():
    ctx = parse_context("gpu")
    shapes = layer_param_shapes(784, 50, 1, 10)
    mus, rhos = init_variational_params(shapes, ctx, seed=0)
    X = mx.nd.random.uniform(shape=(8, 784), ctx=ctx)
    y = mx.nd.one_hot(mx.nd.array([1] * 8, ctx=ctx), 10)
    with autograd.record():
        loss = tutorial_loss(X, y, mus, rhos, lambda w: mx.nd.sum(w * 0), 0.1)
    loss.backward()
    assert loss.context == ctx and mus[0].grad.context == ctx

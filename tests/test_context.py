import os
import sys

import mxnet as mx
import numpy as np
import pytest

from commands import ROOT, run
from gluon_bbb import Config, ContextError, TrainingStep, context_name, parse_context
from gluon_bbb.learning import context
from gluon_bbb.commands.cli import flag_for, run_main

NUM_GPUS = mx.context.num_gpus()


def test_parse_cpu():
    assert parse_context("cpu") == mx.cpu(0)
    assert parse_context("cpu:1") == mx.cpu(1)
    assert context_name(mx.gpu(2)) == "gpu:2"


@pytest.mark.parametrize("spec", ["tpu", "gpu:", "gpu:x", "cpu:-1", ""])
def test_unparseable(spec):
    with pytest.raises(ContextError, match="not understood"):
        parse_context(spec)


def test_the_largest_cpu_number_is_taken_and_a_larger_is_one_line():
    # MXNet keeps state per device id in arrays as long as the id: cpu:2^30 hung on a 24 GiB
    # machine and cpu:10^20 ended in MXNet's traceback; a larger number than MAX_CPU_ID (or one
    # past int64) is refused before MXNet sees it
    assert parse_context("cpu:%d" % context.MAX_CPU_ID) == mx.cpu(context.MAX_CPU_ID)
    for index in (context.MAX_CPU_ID + 1, 2 ** 30, 10 ** 20):
        with pytest.raises(ContextError, match="at most %d" % context.MAX_CPU_ID):
            parse_context("cpu:%d" % index)


def test_missing_gpu_is_refused_with_a_clear_message():
    with pytest.raises(ContextError, match="asked for GPU %d but MXNet sees %d GPU" % (
            NUM_GPUS, NUM_GPUS)):
        parse_context("gpu:%d" % NUM_GPUS)


def gpu_or_skip():
    if NUM_GPUS == 0:
        pytest.skip("needs a CUDA GPU and a CUDA build of MXNet; this machine has none")
    return parse_context("gpu")


@pytest.mark.parametrize("device", ["cpu:1", "gpu"])
def test_the_gpu_path_of_the_training_step_stays_on_its_context(device):
    # what --ctx gpu runs: the ndarray backend and the device's own sampler; on cpu(1), a
    # context MXNet tells from the default cpu(0), everything must stay there too
    ctx = gpu_or_skip() if device == "gpu" else mx.cpu(1)
    config = Config(num_hidden_units=50, num_hidden_layers=1, seed=0, optimizer="adam")
    step = TrainingStep(config.build_plan(), ctx, backend="ndarray", noise="device")
    before = step.mu.asnumpy()
    X = mx.nd.random.uniform(shape=(8, 784), ctx=ctx)
    y = mx.nd.one_hot(mx.nd.array([1] * 8, ctx=ctx), 10)
    loss = step(X, y, 0.1)
    assert np.isfinite(loss.asscalar()) and loss.context == ctx
    assert step.mu.context == ctx and step.rho.context == ctx
    assert all(array.context == ctx for state in step.state_arrays() for array in state)
    assert np.abs(step.mu.asnumpy() - before).max() > 0


# The GPU probe is tested with test doubles: no GPU that MXNet 1.9.1 can run on is available
# here. The doubles stand in for a GPU that MXNet sees (num_gpus) and for the probe's first
# operation on it, raising the errors MXNet raises there.
KERNEL_IMAGE_ERROR = ("[12:00:01] ../src/operator/nn/./fully_connected-inl.h:89: Check failed: "
                      "e == cudaSuccess (209 vs. 0) : CUDA: no kernel image is available for "
                      "execution on the device\nStack trace:\n  [bt] (0) libmxnet.so(+0x1)")


def failing_probe(message):
    def probe(ctx):
        raise mx.base.MXNetError(message)
    return probe


@pytest.mark.parametrize("message,cause", [
    (KERNEL_IMAGE_ERROR, "no kernels for this GPU .*compute capability 5.0-8.6"),
    ("[12:00:01] src/storage/gpu_device_storage.h:39: Check failed: e == cudaSuccess: "
     "out of memory\nStack trace:", "the GPU has no memory left"),
    ("[12:00:01] src/engine/x.cc:12: CUDA driver version is insufficient\nStack trace:\n  [bt]",
     "gpu\\(0\\) cannot run MXNet: CUDA driver version is insufficient; use ctx cpu$"),
])
def test_gpu_that_fails_its_probe_is_refused_in_one_line(monkeypatch, message, cause):
    monkeypatch.setattr(mx.context, "num_gpus", lambda: 1)
    monkeypatch.setattr(context, "gpu_probe", failing_probe(message))
    with pytest.raises(ContextError, match=cause) as info:
        parse_context("gpu")
    # the library names the field, the command line its flag
    assert "\n" not in str(info.value) and str(info.value).startswith("ctx gpu: gpu(0)")
    assert info.value.describe(flag_for).startswith("--ctx gpu: gpu(0)")
    assert info.value.describe(flag_for).endswith("; use --ctx cpu")


def test_gpu_probe_failure_through_the_command_line_entry(monkeypatch, capsys):
    monkeypatch.setattr(mx.context, "num_gpus", lambda: 1)
    monkeypatch.setattr(context, "gpu_probe", failing_probe(KERNEL_IMAGE_ERROR))
    status = run_main(lambda argv: parse_context("gpu:0") and 0, [], prog="train_mnist.py")
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert err.startswith("train_mnist.py: error: --ctx gpu:0: gpu(0) cannot run MXNet: this "
                          "MXNet build has no kernels for this GPU")


def test_gpu_probe_runs_one_operation_on_its_context():
    # the real probe on a CPU context: a product whose value and context are known
    np.testing.assert_array_equal(context.gpu_probe(mx.cpu(1)), np.full((4, 2), 8.0))
    context.check_gpu(mx.cpu(1), "cpu:1")  # passes without error


@pytest.mark.parametrize("command, prog", [
    (["train_mnist.py", "--epochs", "1"], "train_mnist.py"),
    (["-mgluon_bbb.commands.evaluate", "--checkpoint", "run"], "gluon-bbb evaluate"),
    (["-m", "gluon_bbb", "prune", "--checkpoint", "run"], "gluon-bbb prune"),
])
def test_mxnet_that_cannot_load_its_libraries_is_one_line(tmp_path, command, prog):
    # a stand-in mxnet package that fails to import as a CUDA build without its CUDA libraries
    # does: libmxnet.so's loader raises OSError
    fake = tmp_path / "mxnet"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "raise OSError('libcudart.so.11.0: cannot open shared object file: No such file or "
        "directory')\n")
    if not command[0].startswith("-m"):
        command = [os.path.join(ROOT, command[0])] + command[1:]
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT])}
    proc = run([sys.executable] + command, cwd=str(tmp_path), timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("%s: error: MXNet's library cannot be loaded: libcudart.so.11.0"
                                  % prog)
    # its flags are checked, and its help given, without MXNet; the sweep needs none at all
    assert run([sys.executable] + command + ["--help"], cwd=str(tmp_path), env=env,
               timeout=60).returncode == 0
    assert run([sys.executable, "-m", "gluon_bbb.commands.sweep", "--help"], cwd=str(tmp_path), env=env,
               timeout=60).returncode == 0
    assert "cuDNN 8" in proc.stderr

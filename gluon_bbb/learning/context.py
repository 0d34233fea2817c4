"""Turn a ``--ctx`` string into an MXNet context, refusing devices that do not exist or
cannot run MXNet's kernels."""
import re

import mxnet as mx

from ..errors import ContextError

_CTX_PATTERN = re.compile(r"^(cpu|gpu)(?::(\d+))?$")
# every cpu(N) runs on the same cores, but MXNet keeps state per device id in arrays as long as
# the id (16 bytes each: cpu:2^30 exhausts the memory and hangs)
MAX_CPU_ID = 1023


def parse_context(spec):
    """``"cpu"``, ``"cpu:N"``, ``"gpu"`` or ``"gpu:N"`` -> ``mx.cpu(N)`` / ``mx.gpu(N)``."""
    match = _CTX_PATTERN.match(str(spec).strip().lower())
    if not match:
        raise ContextError("{ctx} %r not understood: use cpu, gpu or gpu:N", spec)
    kind, index = match.group(1), int(match.group(2) or 0)
    if kind == "cpu":
        if index > MAX_CPU_ID:
            raise ContextError("{ctx} %s: a CPU context's number is at most %d (each cpu:N runs "
                               "on the same cores)", spec, MAX_CPU_ID)
        return mx.cpu(index)
    available = mx.context.num_gpus()
    if index >= available:
        raise ContextError(
            "{ctx} %s asked for GPU %d but MXNet sees %d GPU(s)%s; use {ctx} cpu",
            spec, index, available,
            " (this MXNet build or machine has no CUDA GPU; a CUDA build such as "
            "mxnet-cu117 and a GPU it supports are needed)" if available == 0 else "")
    ctx = mx.gpu(index)
    check_gpu(ctx, spec)
    return ctx


# what the CUDA runtime says when a GPU cannot run the library's code (MXNet's newest CUDA
# build holds kernels for compute capability 5.0-8.6 and no PTX)
_CAUSES = (
    ("no kernel image is available",
     "this MXNet build has no kernels for this GPU (mxnet-cu117 1.9.1 covers compute "
     "capability 5.0-8.6, Maxwell to Ampere; Hopper GPUs such as the H100 and newer ones "
     "cannot run it)"),
    ("cannot open shared object",
     "a CUDA library that this MXNet build needs is missing (CUDA 11 runtime, cuBLAS, "
     "cuDNN 8, NCCL 2)"),
    ("out of memory", "the GPU has no memory left"),
)


def gpu_probe(ctx):
    """One small matrix product on ``ctx``, waited for: the first operation that touches a GPU
    is where MXNet reports a GPU it cannot use."""
    x = mx.nd.ones((4, 8), ctx=ctx)
    return mx.nd.FullyConnected(x, mx.nd.ones((2, 8), ctx=ctx), no_bias=True,
                                num_hidden=2).asnumpy()


def check_gpu(ctx, spec=None):
    """Run ``gpu_probe(ctx)`` before any work; a failure becomes a one-line ContextError naming
    the cause (the full CUDA message is several lines with a stack trace)."""
    try:
        gpu_probe(ctx)
    except (mx.base.MXNetError, OSError) as exc:
        text = str(exc)
        cause = next((meaning for marker, meaning in _CAUSES if marker in text), None)
        if cause is None:  # MXNet's first line, "[time] file:line: message", then a stack trace
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            cause = re.sub(r"^\[[\d:]+\] \S+:\d+: ", "", lines[0]) if lines else repr(exc)
        raise ContextError("{ctx} %s: %s cannot run MXNet: %s; use {ctx} cpu",
                           spec or context_name(ctx), ctx, cause) from None


def context_name(ctx):
    """``mx.gpu(1)`` -> ``"gpu:1"``: the inverse of ``parse_context``."""
    return "%s:%d" % (ctx.device_type, ctx.device_id)

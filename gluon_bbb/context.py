"""Turn a ``--ctx`` string into an MXNet context, refusing devices that do not exist."""
import re

import mxnet as mx

from .errors import ContextError

_CTX_PATTERN = re.compile(r"^(cpu|gpu)(?::(\d+))?$")


def parse_context(spec):
    """``"cpu"``, ``"cpu:N"``, ``"gpu"`` or ``"gpu:N"`` -> ``mx.cpu(N)`` / ``mx.gpu(N)``.

    Raises ContextError before any work if the GPU asked for is not visible to MXNet.
    """
    match = _CTX_PATTERN.match(str(spec).strip().lower())
    if not match:
        raise ContextError("--ctx %r not understood: use cpu, gpu or gpu:N" % (spec,))
    kind, index = match.group(1), int(match.group(2) or 0)
    if kind == "cpu":
        return mx.cpu(index)
    available = mx.context.num_gpus()
    if index >= available:
        raise ContextError(
            "--ctx %s asked for GPU %d but MXNet sees %d GPU(s)%s; use --ctx cpu"
            % (spec, index, available,
               " (this MXNet build or machine has no CUDA GPU; a CUDA build such as "
               "mxnet-cu112 and a GPU are needed)" if available == 0 else ""))
    return mx.gpu(index)


def context_name(ctx):
    """``mx.gpu(1)`` -> ``"gpu:1"``: the inverse of ``parse_context``."""
    return "%s:%d" % (ctx.device_type, ctx.device_id)

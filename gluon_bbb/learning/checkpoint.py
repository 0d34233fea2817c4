"""The parameter files of a run in ``nd.save`` format: what they hold and how they are read."""
import os
import zlib

import mxnet as mx
import numpy as np
from mxnet import nd

from ..errors import CheckpointError, ConfigError
from ..outputs import PARAMETERS, path_problem, write_atomically
from ..family.parametrizations import SOFTPLUS, parametrization

LAYOUT_OUTPUTS_INPUTS = 1
# the key of the CRC-32 of a file's other arrays (files written before it have none)
CHECKSUM = "checksum"


def save_checkpoint(path, mus, rhos, optimizer_states, num_update, epoch,
                    sigma_parametrization=SOFTPLUS, trained_as=None):
    """Write a checkpoint atomically."""
    arrays = {"epoch": nd.array([epoch], dtype="int64"),
              "num_update": nd.array([num_update], dtype="int64"),
              "layout": nd.array([LAYOUT_OUTPUTS_INPUTS], dtype="int64"),
              "parametrization": _ascii(sigma_parametrization.name)}
    if trained_as is not None:
        arrays["trained_as"] = _ascii(trained_as)
    for i, (mu, rho) in enumerate(zip(mus, rhos)):
        arrays["mu:%d" % i] = mu
        arrays["rho:%d" % i] = rho
    for i, state in enumerate(optimizer_states):
        for j, array in enumerate(state):
            arrays["opt:%d:%d" % (i, j)] = array
    arrays[CHECKSUM] = nd.array([_checksum(arrays)], dtype="int64")
    write_atomically(path, lambda tmp: nd.save(tmp, arrays), PARAMETERS)


def _checksum(arrays):
    """CRC-32 of every array of a checkpoint but its checksum: keys, dtypes, shapes and bytes."""
    crc = 0
    for key in sorted(k for k in arrays if k != CHECKSUM):
        values = arrays[key].asnumpy()
        crc = zlib.crc32(("%s %s %s" % (key, values.dtype, values.shape)).encode(), crc)
        crc = zlib.crc32(np.ascontiguousarray(values).tobytes(), crc)
    return crc


def read_checkpoint(path, ctx=None):
    """Read a checkpoint file; returns dict with ``mus``, ``rhos``, ``optimizer_states``
    (list of lists of NDArrays), ``num_update``, ``epoch`` and ``parametrization`` (the object
    that turns its rhos into sigmas)."""
    ctx = ctx or mx.cpu()
    problem = path_problem(path)
    if problem:
        raise CheckpointError("%s is %s, not a checkpoint file", path, problem)
    if not os.path.isfile(path):
        raise CheckpointError("checkpoint %s does not exist", path)
    if not PARAMETERS.holds(path):  # told by its first bytes, before MXNet's C++ message
        raise CheckpointError("checkpoint %s is not %s: it does not begin as MXNet's nd.save "
                              "files do", path, PARAMETERS.words)
    try:
        arrays = nd.load(path)
    except mx.base.MXNetError as exc:
        # MXNet's message carries a C++ traceback; its last line says what is wrong (a damaged
        # length reads as "Failed to allocate CPU Memory")
        reason = str(exc).strip().splitlines()[-1].replace("MXNetError: ", "")
        raise CheckpointError("checkpoint %s is damaged or cut short: MXNet cannot read its "
                              "arrays (%s)", path, reason[:200]) from None
    if not isinstance(arrays, dict) or "mu:0" not in arrays or "epoch" not in arrays:
        raise CheckpointError("checkpoint %s does not hold gluon_bbb parameters", path)
    if "num_update" not in arrays:
        raise CheckpointError("checkpoint %s lacks 'num_update'", path)
    if CHECKSUM in arrays and int(arrays[CHECKSUM].asscalar()) != _checksum(arrays):
        raise CheckpointError("checkpoint %s is damaged: its arrays do not match the checksum "
                              "it was written with", path)
    count = sum(1 for key in arrays if key.startswith("mu:"))
    try:
        mus = [arrays["mu:%d" % i].as_in_context(ctx) for i in range(count)]
        rhos = [arrays["rho:%d" % i].as_in_context(ctx) for i in range(count)]
    except KeyError as exc:
        raise CheckpointError("checkpoint %s lacks %s", path, exc) from None
    opt_keys = [k for k in arrays if k.startswith("opt:")]
    states = [[] for _ in range(1 + max([int(k.split(":")[1]) for k in opt_keys], default=-1))]
    for key in opt_keys:
        _, i, j = key.split(":")
        states[int(i)].append((int(j), arrays[key].as_in_context(ctx)))
    states = [[a for _, a in sorted(s, key=lambda t: t[0])] for s in states]
    check_finite_parameters(path, mus, rhos)
    if "layout" not in arrays:
        mus, rhos, states = _from_inputs_outputs(mus, rhos, states)
    return {"mus": mus, "rhos": rhos, "optimizer_states": states,
            "num_update": int(arrays["num_update"].asscalar()),
            "epoch": int(arrays["epoch"].asscalar()),
            "parametrization": _parametrization_of(path, arrays),
            "trained_as": _text(arrays["trained_as"]) if "trained_as" in arrays else None}


def _ascii(text):
    return nd.array(list(text.encode("ascii")), dtype="uint8")


def _text(array):
    return bytes(array.asnumpy().astype(np.uint8).tolist()).decode("ascii", "replace")


def _parametrization_of(path, arrays):
    """The parametrization a file's ``parametrization`` key names (softplus without one)."""
    if "parametrization" not in arrays:
        return SOFTPLUS
    name = _text(arrays["parametrization"])
    try:
        return parametrization(name)
    except ConfigError:
        raise CheckpointError("checkpoint %s holds rhos of parametrization %r, which this "
                              "process does not define (a parametrization of the user's own: "
                              "define that class first)", path, name) from None


def first_non_finite(mus, rhos):
    """Where ``mus`` and ``rhos`` (NDArrays) first hold NaN or infinity: ``(name, count, size,
    value)``, the array by its key here (``mu:i``, ``rho:i``), how many of its entries, of how
    many, and the first such value; None where all are finite."""
    named = [("mu:%d" % i, m) for i, m in enumerate(mus)] + [
        ("rho:%d" % i, r) for i, r in enumerate(rhos)]
    for name, array in named:
        values = array.asnumpy()
        bad = ~np.isfinite(values)
        if bad.any():
            return name, int(bad.sum()), values.size, values[bad][0]
    return None


def check_finite_parameters(path, mus, rhos):
    """CheckpointError naming the first array of ``mus`` and ``rhos`` holding NaN or infinity:
    nothing is pruned, evaluated, compressed or resumed from such a file."""
    found = first_non_finite(mus, rhos)
    if found:
        raise CheckpointError("%s holds non-finite parameters: %d of the %d entries of %s are "
                              "NaN or infinite; nothing is computed on them", path, found[1],
                              found[2], found[0])


def _from_inputs_outputs(mus, rhos, states):
    """Parameters and flat optimizer state with weights (inputs, outputs) turned to (outputs,
    inputs)."""
    shapes = [m.shape for m in mus]

    def turn_flat(flat):
        blocks, offset = [], 0
        for shape in shapes:
            size = int(shape[0] * (shape[1] if len(shape) == 2 else 1))
            block = flat[offset:offset + size].reshape(shape)
            blocks.append((block.T if len(shape) == 2 else block).reshape((-1,)))
            offset += size
        return nd.concat(*blocks, dim=0)
    turn = lambda arrays: [a.T.copy() if a.ndim == 2 else a for a in arrays]
    return turn(mus), turn(rhos), [[turn_flat(a) for a in state] for state in states]

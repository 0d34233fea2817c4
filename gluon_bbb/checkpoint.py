"""Checkpoints of a run in ``nd.save`` format, and the atomic, durable writes of a run's files.

One file holds everything, keyed ``mu:i``, ``rho:i`` (parameter i, weights (outputs, inputs)),
``opt:i:j`` (the j-th flat state array of the optimizer's parameter i: 0 for mu, 1 for rho, in
the order of ``FlatLayout``), ``num_update`` (optimizer steps taken), ``epoch`` (epochs
completed) and ``layout``, so that ``nd.load`` reads it without this package. Checkpoints without
``layout`` hold weights as (inputs, outputs); ``load_checkpoint`` turns them around.

A run directory holds ``checkpoint.params`` (the last epoch) and, when the run holds out a
validation set, ``best.params``: the same keys without ``opt:``, at the epoch of the highest
validation accuracy so far (the earliest of equals).
"""
import json
import os

import mxnet as mx
from mxnet import nd

from .errors import CheckpointError

CHECKPOINT_FILE = "checkpoint.params"
BEST_CHECKPOINT_FILE = "best.params"
LAYOUT_OUTPUTS_INPUTS = 1


def write_atomically(path, write):
    """Call ``write(tmp_path)``, flush it to disk, then rename it onto ``path`` and flush the
    directory: readers see the old file or the new one, never half, even after a power cut."""
    tmp_path = path + ".tmp"
    write(tmp_path)
    _fsync(tmp_path)
    os.replace(tmp_path, path)
    _fsync(os.path.dirname(os.path.abspath(path)))


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path, value):
    """Write ``value`` as indented JSON to ``path`` atomically."""
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(value, f, indent=2)
            f.write("\n")
    write_atomically(path, write)


def resolve_checkpoint(path):
    """(run directory, parameter file) named by ``path``: a run directory, read at its
    checkpoint.params, or a parameter file in one (checkpoint.params, best.params)."""
    if os.path.isdir(path):
        return path, os.path.join(path, CHECKPOINT_FILE)
    if os.path.isfile(path):
        return os.path.dirname(path) or ".", path
    raise CheckpointError("checkpoint %s does not exist" % path)


def report_prefix(params_path):
    """Prefix of the report files written about ``params_path``: none for a run's
    checkpoint.params, else the file's stem and a dash (``best-pruning.json`` for best.params),
    so that reports on the best epoch sit beside those on the last without replacing them."""
    name = os.path.basename(params_path)
    return "" if name == CHECKPOINT_FILE else os.path.splitext(name)[0] + "-"


def save_checkpoint(path, mus, rhos, optimizer_states, num_update, epoch):
    """Write a checkpoint atomically. ``optimizer_states[i]``: the list of flat state arrays of
    parameter i (``TrainingStep.state_arrays()``)."""
    arrays = {"epoch": nd.array([epoch], dtype="int64"),
              "num_update": nd.array([num_update], dtype="int64"),
              "layout": nd.array([LAYOUT_OUTPUTS_INPUTS], dtype="int64")}
    for i, (mu, rho) in enumerate(zip(mus, rhos)):
        arrays["mu:%d" % i] = mu
        arrays["rho:%d" % i] = rho
    for i, state in enumerate(optimizer_states):
        for j, array in enumerate(state):
            arrays["opt:%d:%d" % (i, j)] = array
    write_atomically(path, lambda tmp: nd.save(tmp, arrays))


def load_checkpoint(path, ctx=None):
    """Read a checkpoint; returns dict with ``mus``, ``rhos``, ``optimizer_states``
    (list of lists of NDArrays), ``num_update`` and ``epoch``. Arrays land on ``ctx``
    (default cpu). Raises CheckpointError if the file is missing or unreadable.
    """
    ctx = ctx or mx.cpu()
    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT_FILE)
    if not os.path.isfile(path):
        raise CheckpointError("checkpoint %s does not exist" % path)
    try:
        arrays = nd.load(path)
    except mx.base.MXNetError as exc:
        # MXNet's message carries a C++ traceback; its last line says what is wrong
        reason = str(exc).strip().splitlines()[-1].replace("MXNetError: ", "")
        raise CheckpointError("checkpoint %s is unreadable: %s" % (path, reason[:200])) from None
    if not isinstance(arrays, dict) or "mu:0" not in arrays or "epoch" not in arrays:
        raise CheckpointError("checkpoint %s does not hold gluon_bbb parameters" % path)
    count = sum(1 for key in arrays if key.startswith("mu:"))
    try:
        mus = [arrays["mu:%d" % i].as_in_context(ctx) for i in range(count)]
        rhos = [arrays["rho:%d" % i].as_in_context(ctx) for i in range(count)]
    except KeyError as exc:
        raise CheckpointError("checkpoint %s lacks %s" % (path, exc)) from None
    opt_keys = [k for k in arrays if k.startswith("opt:")]
    states = [[] for _ in range(1 + max([int(k.split(":")[1]) for k in opt_keys], default=-1))]
    for key in opt_keys:
        _, i, j = key.split(":")
        states[int(i)].append((int(j), arrays[key].as_in_context(ctx)))
    states = [[a for _, a in sorted(s, key=lambda t: t[0])] for s in states]
    if "layout" not in arrays:
        mus, rhos, states = _from_inputs_outputs(mus, rhos, states)
    return {"mus": mus, "rhos": rhos, "optimizer_states": states,
            "num_update": int(arrays["num_update"].asscalar()),
            "epoch": int(arrays["epoch"].asscalar())}


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

"""Atomic checkpoints of the variational parameters and optimizer state in ``nd.save`` format.

One file holds everything, keyed ``mu:i``, ``rho:i``, ``opt:i:j`` (the j-th state array of
the optimizer's parameter i; training keeps ``mu`` (i = 0) and ``rho`` (i = 1) as flat vectors) and ``num_update`` (optimizer steps taken) and ``epoch`` (epochs completed),
so ``nd.load`` reads it without this package.
"""
import json
import os

import mxnet as mx
from mxnet import nd

from .errors import CheckpointError

CHECKPOINT_FILE = "checkpoint.params"


def write_atomically(path, write):
    """Call ``write(tmp_path)`` then rename onto ``path``, so readers see old or new, never half."""
    tmp_path = path + ".tmp"
    write(tmp_path)
    os.replace(tmp_path, path)


def write_json(path, value):
    """Write ``value`` as indented JSON to ``path`` atomically."""
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(value, f, indent=2)
            f.write("\n")
    write_atomically(path, write)


def save_checkpoint(path, mus, rhos, optimizer_states, num_update, epoch):
    """Write a checkpoint atomically. ``optimizer_states[i]`` is None, an NDArray or a tuple."""
    arrays = {"epoch": nd.array([epoch], dtype="int64"),
              "num_update": nd.array([num_update], dtype="int64")}
    for i, (mu, rho) in enumerate(zip(mus, rhos)):
        arrays["mu:%d" % i] = mu
        arrays["rho:%d" % i] = rho
    for i, state in enumerate(optimizer_states):
        for j, array in enumerate(state_arrays(state)):
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
    return {"mus": mus, "rhos": rhos, "optimizer_states": states,
            "num_update": int(arrays["num_update"].asscalar()),
            "epoch": int(arrays["epoch"].asscalar())}


def state_arrays(state):
    """The NDArrays of one optimizer state (None, an NDArray or nested tuples), in order."""
    if state is None:
        return []
    if isinstance(state, (tuple, list)):
        return [a for s in state for a in state_arrays(s)]
    return [state]

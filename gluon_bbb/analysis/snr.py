"""Pruning by signal-to-noise ratio |mu| / sigma (paper section 5.1, Table 2), vectorized."""
import math
import os

import numpy as np
from mxnet import nd

from ..errors import check_proportion
from ..outputs import PARAMETERS, write_atomically
from ..tutorial import evaluate_accuracy


def signal_to_noise_ratio(mus, sigmas):
    """|mu| / sigma for each parameter array (same shapes and contexts as ``mus``)."""
    return [nd.abs(mu) / sigma for mu, sigma in zip(mus, sigmas)]


def prior_rule_proportion(config, state):
    """The share of the parameters of a run's parameter file (``state``, as
    ``rundir.read_checkpoint`` gives it) that the run's prior has switched off while
    training (its ``switched_off``: sparse variational dropout's log alpha > 3), or None where
    the prior has no such rule, the model learns no sigma, or the prior's class is not defined
    here."""
    mus = state["mus"]
    sigmas = config.model_kind.prediction_sigmas(state["rhos"], state["parametrization"])
    if sigmas is None or not config.prior_defined:
        return None
    prior = config.build_prior()
    masks = [prior.switched_off(mu, sigma) for mu, sigma in zip(mus, sigmas)]
    if masks[0] is None:
        return None
    return float(sum(mask.sum().asscalar() for mask in masks)) / sum(mu.size for mu in mus)


def num_pruned(proportion, num_params):
    """floor(proportion * num_params), robust to float error (0.29 * 100 is 28.999...)."""
    check_proportion(proportion)
    return min(num_params, int(math.floor(proportion * num_params + 1e-7)))


def snr_ranks(mus, sigmas):
    """Rank (0 = lowest SNR) of every parameter in the flat concatenation of all arrays."""
    return _ranks(np.concatenate([s.asnumpy().ravel()
                                  for s in signal_to_noise_ratio(mus, sigmas)]))


def _ranks(values):
    order = np.argsort(values, kind="stable")
    ranks = np.empty_like(order)
    ranks[order] = np.arange(order.size)
    return ranks


def keep_masks(mus, sigmas, proportion):
    """For NumPy arrays ``mus`` and ``sigmas``: a boolean array per parameter array, False for
    the floor(proportion * N) lowest |mu| / sigma of all N entries (float32, as ``snr_ranks``
    computes it: the same entries as ``prune_weights``)."""
    snr = np.concatenate([(np.abs(np.float32(1) * m) / s).astype(np.float32).ravel()
                          for m, s in zip(mus, sigmas)])
    keep = _ranks(snr) >= num_pruned(proportion, snr.size)
    masks, start = [], 0
    for mu in mus:
        masks.append(keep[start:start + mu.size].reshape(mu.shape))
        start += mu.size
    return masks


def _masked(mus, keep_flat):
    pruned, start = [], 0
    for mu in mus:
        keep = keep_flat[start:start + mu.size].reshape(mu.shape)
        pruned.append(mu * nd.array(keep, ctx=mu.context, dtype=mu.dtype))
        start += mu.size
    return pruned


def prune_weights(mus, sigmas, proportion, ranks=None):
    """Copies of ``mus`` with the floor(proportion * N) lowest-SNR entries of all N set to 0."""
    ranks = snr_ranks(mus, sigmas) if ranks is None else ranks
    return _masked(mus, ranks >= num_pruned(proportion, ranks.size))


def pruning_table(mus, sigmas, proportions, test_images, test_labels, network=None):
    """One row per proportion: ``proportion``, ``weights_remaining`` (parameters left, biases
    included), ``test_accuracy`` and ``test_error`` (fractions) of the pruned mean weights of
    ``network`` (default: the MLP the parameters shape)."""
    for p in proportions:
        check_proportion(p)
    ranks = snr_ranks(mus, sigmas)
    ctx = mus[0].context
    X = nd.array(test_images, ctx=ctx, dtype="float32")
    y = nd.array(test_labels, ctx=ctx, dtype="float32")
    rows = []
    for p in proportions:
        removed = num_pruned(p, ranks.size)
        accuracy = evaluate_accuracy(X, y, _masked(mus, ranks >= removed), network=network)
        rows.append({"proportion": p, "weights_remaining": int(ranks.size - removed),
                     "test_accuracy": accuracy, "test_error": 1.0 - accuracy})
    return rows


def snr_thresholds_db(mus, sigmas, proportions):
    """SNR in decibels (10 log10) of every parameter, and the cut-off of each proportion."""
    snr = np.concatenate([s.asnumpy().ravel() for s in signal_to_noise_ratio(mus, sigmas)])
    with np.errstate(divide="ignore"):
        snr_db = 10.0 * np.log10(snr.astype(np.float64))
    ordered = np.sort(snr_db)
    cuts = {}
    for p in proportions:
        k = num_pruned(p, ordered.size)
        if 0 < k < ordered.size:
            cuts[p] = float(ordered[k - 1])
    return snr_db, cuts


def save_pruned(path, pruned_mus):
    """Write the non-zero entries of each array as flat int32 indices and float32 values
    (``nd.save`` keys ``indices:i``, ``values:i``, ``shape:i``). Returns bytes written."""
    arrays = {}
    for i, mu in enumerate(pruned_mus):
        flat = mu.asnumpy().ravel()
        nonzero = np.flatnonzero(flat)
        arrays["indices:%d" % i] = nd.array(nonzero, dtype="int32")
        arrays["values:%d" % i] = nd.array(flat[nonzero], dtype="float32")
        arrays["shape:%d" % i] = nd.array(mu.shape, dtype="int64")
    write_atomically(path, lambda tmp: nd.save(tmp, arrays), PARAMETERS)
    return os.path.getsize(path)


def dense_size(mus):
    """Bytes of ``mus`` in ``nd.save`` format under the keys ``mu:i``, without writing them: a
    32-byte file header, and per array 32 bytes of header, 8 per dimension, its float32 data and
    its key (checked against nd.save in the tests)."""
    return 32 + sum(32 + 8 * mu.ndim + 4 * mu.size + len("mu:%d" % i)
                    for i, mu in enumerate(mus))


def load_pruned(path, ctx=None):
    """Dense mean weights from a file written by ``save_pruned``."""
    arrays = nd.load(path)
    mus = []
    for i in range(sum(1 for k in arrays if k.startswith("shape:"))):
        shape = tuple(int(d) for d in arrays["shape:%d" % i].asnumpy())
        dense = np.zeros(int(np.prod(shape)), dtype=np.float32)
        dense[arrays["indices:%d" % i].asnumpy()] = arrays["values:%d" % i].asnumpy()
        mus.append(nd.array(dense.reshape(shape), ctx=ctx))
    return mus

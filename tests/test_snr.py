"""analysis/snr.py: the signal-to-noise ratio and the pruning by it against NumPy, the pruning
table, the pruned file's round trip."""

import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import Config, evaluate_accuracy
from gluon_bbb.analysis.snr import (load_pruned, prune_weights, pruning_table, save_pruned,
                               signal_to_noise_ratio)

def np_prune(mus, sigmas, proportion):
    """Reference: rank |mu|/sigma over all entries (ties by flat position), zero the lowest."""
    snr = np.concatenate([(np.abs(m) / s).ravel() for m, s in zip(mus, sigmas)])
    k = int(np.floor(proportion * snr.size + 1e-7))
    order = np.lexsort((np.arange(snr.size), snr))
    keep = np.ones(snr.size, dtype=bool)
    keep[order[:k]] = False
    out, start = [], 0
    for m in mus:
        out.append(np.where(keep[start:start + m.size].reshape(m.shape), m, 0))
        start += m.size
    return out


def random_params(rng, shapes, ties=False):
    mus = [rng.normal(size=s).astype(np.float32) for s in shapes]
    sigmas = [rng.uniform(0.1, 1.0, size=s).astype(np.float32) for s in shapes]
    if ties:  # many exactly equal SNRs, across arrays too
        mus = [np.round(m * 2) / 2 + 0.25 for m in mus]  # never 0
        sigmas = [np.full(s, 0.5, dtype=np.float32) for s in shapes]
    return mus, sigmas



def test_signal_to_noise_ratio(ctx):
    mus, sigmas = random_params(np.random.default_rng(0), [(3, 4)])
    got = signal_to_noise_ratio([nd.array(mus[0], ctx=ctx)], [nd.array(sigmas[0], ctx=ctx)])
    assert got[0].context == ctx
    np.testing.assert_allclose(got[0].asnumpy(), np.abs(mus[0]) / sigmas[0], rtol=1e-6)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("proportion", [0.0, 0.1, 0.29, 0.5, 0.95, 0.999, 1.0])
def test_prune_weights_matches_numpy(ctx, ties, proportion):
    shapes = [(20, 7), (7,), (7, 3), (3,)]
    mus, sigmas = random_params(np.random.default_rng(1), shapes, ties)
    got = prune_weights([nd.array(m, ctx=ctx) for m in mus],
                        [nd.array(s, ctx=ctx) for s in sigmas], proportion)
    expected = np_prune(mus, sigmas, proportion)
    total = sum(m.size for m in mus)
    zeros = sum(int((g.asnumpy() == 0).sum()) for g in got)
    assert zeros == int(np.floor(proportion * total + 1e-7))
    for g, e in zip(got, expected):
        assert g.context == ctx
        np.testing.assert_array_equal(g.asnumpy(), e)


def test_prune_rejects_bad_proportions(ctx):
    mus = [nd.ones((2, 2), ctx=ctx)]
    for bad in (-0.1, 1.01):
        with pytest.raises(ValueError, match="proportions must be in"):
            prune_weights(mus, mus, bad)


def test_pruning_table_rows(ctx):
    rng = np.random.default_rng(2)
    shapes = Config(num_inputs=6, num_hidden_units=5, num_outputs=4).layer_shapes()
    mus_np, sigmas_np = random_params(rng, shapes)
    mus = [nd.array(m, ctx=ctx) for m in mus_np]
    sigmas = [nd.array(s, ctx=ctx) for s in sigmas_np]
    X = rng.normal(size=(50, 6)).astype(np.float32)
    y = rng.integers(0, 4, size=50)
    rows = pruning_table(mus, sigmas, [0.0, 0.5, 1.0], X, y)
    total = sum(m.size for m in mus_np)
    assert [r["weights_remaining"] for r in rows] == [total, total - total // 2, 0]
    assert rows[0]["test_accuracy"] == pytest.approx(evaluate_accuracy(X, y, mus))
    half = [nd.array(m) for m in np_prune(mus_np, sigmas_np, 0.5)]
    assert rows[1]["test_accuracy"] == pytest.approx(evaluate_accuracy(X, y, half))
    # all parameters zero: every logit is 0 and argmax picks class 0
    assert rows[2]["test_accuracy"] == pytest.approx(np.mean(y == 0))
    assert all(r["test_error"] == pytest.approx(1 - r["test_accuracy"]) for r in rows)


def test_save_and_load_pruned_round_trip(tmp_path, ctx):
    mus, sigmas = random_params(np.random.default_rng(3), [(400, 300), (300,)])
    pruned = prune_weights([nd.array(m) for m in mus], [nd.array(s) for s in sigmas], 0.9)
    size = save_pruned(str(tmp_path / "p.params"), pruned)
    assert size < 0.25 * sum(m.nbytes for m in mus)
    back = load_pruned(str(tmp_path / "p.params"), ctx)
    for a, b in zip(pruned, back):
        assert b.context == ctx
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())

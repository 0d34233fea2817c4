"""analysis/metrics.py: each metric against a formula or hand-computed cases."""
import numpy as np
import pytest

from gluon_bbb.analysis.metrics import (auroc, brier_score, expected_calibration_error,
                                        negative_log_likelihood, predictive_entropy, reliability,
                                        softmax)


def test_softmax_against_its_formula_and_far_out():
    logits = np.random.default_rng(0).normal(0, 5, (20, 10))
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(softmax(logits), expected, rtol=1e-12)
    # shifted far out, where exp alone overflows, the same distribution
    np.testing.assert_allclose(softmax(logits + 1000.0), expected, rtol=1e-9)


def test_entropy_of_uniform_and_certain():
    probs = np.array([[0.25] * 4, [1.0, 0, 0, 0], [0.5, 0.5, 0, 0]])
    np.testing.assert_allclose(predictive_entropy(probs), [2.0, 0.0, 1.0])
    np.testing.assert_allclose(predictive_entropy(probs, base=np.e), [np.log(4), 0, np.log(2)])


def test_nll():
    probs = np.array([[0.5, 0.5], [0.9, 0.1], [0.0, 1.0]])
    assert negative_log_likelihood(probs, [0, 0, 1]) == pytest.approx(
        -(np.log(0.5) + np.log(0.9) + np.log(1.0)) / 3)
    # a certain mistake is floored, not infinite
    assert negative_log_likelihood(np.array([[1.0, 0.0]]), [1]) == pytest.approx(-np.log(1e-12))


def test_ece_perfectly_calibrated_and_overconfident():
    # confidence 0.8 for 10 examples, 8 right: perfectly calibrated
    probs = np.tile([0.8, 0.2], (10, 1))
    labels = np.array([0] * 8 + [1] * 2)
    assert expected_calibration_error(probs, labels) == pytest.approx(0.0, abs=1e-12)
    # fully confident and right half the time: ECE 0.5
    probs = np.tile([1.0, 0.0], (10, 1))
    assert expected_calibration_error(probs, np.array([0, 1] * 5)) == pytest.approx(0.5)
    # two bins: 4 at 0.6 all right (gap 0.4), 6 at 0.95 with 3 right (gap 0.45)
    probs = np.array([[0.6, 0.4]] * 4 + [[0.95, 0.05]] * 6)
    labels = np.array([0] * 4 + [0, 0, 0, 1, 1, 1])
    assert expected_calibration_error(probs, labels, bins=10) == pytest.approx(
        0.4 * 0.4 + 0.6 * 0.45)
    counts, confidence, accuracy = reliability(probs, labels, bins=10)
    assert counts[5] == 4 and counts[9] == 6 and accuracy[9] == pytest.approx(0.5)


def test_auroc_known_rankings():
    assert auroc([0.1, 0.2, 0.3], [0.4, 0.5]) == 1.0
    assert auroc([0.4, 0.5], [0.1, 0.2, 0.3]) == 0.0
    assert auroc([0.5, 0.5], [0.5, 0.5]) == 0.5
    # pairs (neg, pos): (1,2) right, (1,0) wrong, (3,2) wrong, (3,0) wrong, ties none -> 1/4
    assert auroc([1, 3], [2, 0]) == pytest.approx(0.25)
    assert auroc([1, 2], [2, 3]) == pytest.approx((1 + 1 + 0.5 + 1) / 4)


def test_brier_score_against_its_formula():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(10), size=50)
    labels = rng.integers(0, 10, size=50)
    expected = np.mean([sum((probs[n, k] - (k == labels[n])) ** 2 for k in range(10))
                        for n in range(50)])
    assert brier_score(probs, labels) == pytest.approx(expected, rel=1e-12)
    assert brier_score(np.eye(10)[labels], labels) == 0.0
    assert brier_score(np.eye(10)[(labels + 1) % 10], labels) == 2.0

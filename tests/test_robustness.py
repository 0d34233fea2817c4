"""analysis/robustness.py: the rotations and translations against NumPy's exact ones and
against a plain per-pixel bilinear interpolation, the temperature fit against a formula written
here, the ensemble's average and the shift report."""
import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gluon_bbb.analysis.robustness import (SHIFTS, Ensemble, TemperatureScaled,
                                     fit_temperature, rotate, scale_temperature, shift_report,
                                     translate)
from gluon_bbb.analysis.metrics import brier_score, negative_log_likelihood

EXAMPLES = int(os.environ.get("GLUON_BBB_EXAMPLES", "40"))
images_strategy = st.integers(1, 4).flatmap(lambda n: st.builds(
    lambda seed: np.random.default_rng(seed).uniform(0, 2, size=(n, 784)).astype(np.float32),
    st.integers(0, 2 ** 32 - 1)))


def plain_rotation(image, degrees):
    """One 28x28 image turned counter-clockwise, pixel by pixel, bilinear, zero outside."""
    out = np.zeros((28, 28))
    a = math.radians(degrees)
    c = 13.5
    for i in range(28):
        for j in range(28):
            y, x = i - c, j - c
            sy, sx = math.cos(a) * y + math.sin(a) * x + c, -math.sin(a) * y + math.cos(a) * x + c
            y0, x0 = math.floor(sy), math.floor(sx)
            for yy, wy in ((y0, 1 - (sy - y0)), (y0 + 1, sy - y0)):
                for xx, wx in ((x0, 1 - (sx - x0)), (x0 + 1, sx - x0)):
                    if 0 <= yy < 28 and 0 <= xx < 28:
                        out[i, j] += wy * wx * image[yy, xx]
    return out


@settings(max_examples=EXAMPLES, deadline=None)
@given(images=images_strategy, degrees=st.floats(-360, 360, allow_nan=False))
def test_rotation_is_bilinear_interpolation_pixel_by_pixel(images, degrees):
    got = rotate(images, degrees).reshape(-1, 28, 28)
    for image, rotated in zip(images.reshape(-1, 28, 28), got):
        np.testing.assert_allclose(rotated, plain_rotation(image.astype(np.float64), degrees),
                                   rtol=1e-4, atol=1e-4)


@settings(max_examples=EXAMPLES, deadline=None)
@given(images=images_strategy, quarter_turns=st.integers(-4, 4))
def test_quarter_turns_are_exact(images, quarter_turns):
    stack = images.reshape(-1, 28, 28)
    expected = np.rot90(stack, k=quarter_turns, axes=(1, 2)).reshape(-1, 784)
    np.testing.assert_array_equal(rotate(images, 90 * quarter_turns), expected)


@settings(max_examples=EXAMPLES, deadline=None)
@given(images=images_strategy, pixels=st.integers(0, 28))
def test_translation_moves_right_and_fills_with_zero(images, pixels):
    stack = images.reshape(-1, 28, 28)
    expected = np.roll(stack, pixels, axis=2)
    expected[:, :, :pixels] = 0
    np.testing.assert_array_equal(translate(images, pixels).reshape(-1, 28, 28), expected)


def test_the_shifts_are_ovadias_severities():
    assert SHIFTS["rotation"].severities == [15 * k for k in range(13)]
    assert SHIFTS["translation"].severities == list(range(15))


def test_temperature_scaling_fits_the_temperature_that_made_the_data():
    rng = np.random.default_rng(1)
    logits = rng.normal(scale=4.0, size=(4000, 10))
    # labels drawn from softmax(logits / 2.5): the logits are overconfident by 2.5
    true = np.exp(logits / 2.5)
    true /= true.sum(axis=1, keepdims=True)
    labels = np.array([rng.choice(10, p=p) for p in true])
    overconfident = np.exp(logits - logits.max(axis=1, keepdims=True))
    overconfident /= overconfident.sum(axis=1, keepdims=True)
    temperature = fit_temperature(overconfident, labels)
    assert temperature == pytest.approx(2.5, rel=0.1)
    # the fit is the least NLL: either side of it is worse
    best = negative_log_likelihood(scale_temperature(overconfident, temperature), labels)
    for other in (temperature * 0.9, temperature * 1.1):
        assert negative_log_likelihood(scale_temperature(overconfident, other), labels) > best
    # softmax(logits / T) exactly
    np.testing.assert_allclose(scale_temperature(overconfident, 2.0),
                               np.exp(logits / 2) / np.exp(logits / 2).sum(1, keepdims=True),
                               rtol=1e-10)


class Fixed:
    """A model whose predictive depends on the images' mean pixel alone."""

    def __init__(self, sharpness):
        self.sharpness, self.name, self.num_samples = sharpness, "fixed", 0

    def probabilities(self, images):
        mean = images.mean(axis=1, keepdims=True)
        logits = self.sharpness * np.cos(mean * np.arange(10))
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True)


def test_an_ensemble_averages_and_the_report_scores_each_severity():
    rng = np.random.default_rng(2)
    images = rng.uniform(0, 2, size=(30, 784)).astype(np.float32)
    labels = rng.integers(0, 10, size=30)
    members = [Fixed(1.0), Fixed(3.0)]
    ensemble = Ensemble(members)
    np.testing.assert_allclose(ensemble.probabilities(images),
                               (members[0].probabilities(images)
                                + members[1].probabilities(images)) / 2)
    report = shift_report(ensemble, images, labels, SHIFTS["translation"])
    assert [row["severity"] for row in report["rows"]] == list(range(15))
    first, last = report["rows"][0], report["rows"][-1]
    assert first["auroc"] == 0.5  # the unshifted images against themselves
    shifted = ensemble.probabilities(translate(images, 14))
    assert last["brier"] == pytest.approx(brier_score(shifted, labels), rel=1e-12)
    assert last["nll"] == pytest.approx(negative_log_likelihood(shifted, labels), rel=1e-12)
    scaled = TemperatureScaled(ensemble, 2.0)
    np.testing.assert_allclose(scaled.probabilities(images),
                               scale_temperature(ensemble.probabilities(images), 2.0))


def test_a_non_finite_predictive_stops_the_report():
    from gluon_bbb.errors import CheckpointError

    class Broken(Fixed):
        def probabilities(self, images):
            p = super().probabilities(images)
            p[0, 0] = np.nan
            return p
    with pytest.raises(CheckpointError, match="fixed gives non-finite probabilities on images "
                       "shifted by 0 degrees; nothing is reported"):
        shift_report(Broken(1.0), np.zeros((3, 784), np.float32), np.zeros(3, int),
                     SHIFTS["rotation"])



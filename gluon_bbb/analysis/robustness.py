"""Uncertainty under dataset shift (Ovadia et al. 2019): the test images rotated (0 to 180
degrees in 15-degree steps) or translated (0 to 14 pixels), and at each severity the
predictive's accuracy, NLL, Brier score, ECE, mean entropy and the AUROC of telling the shifted
images from the unshifted ones by entropy (``shift_report``)."""
import math

import numpy as np

from ..errors import MAX_PREDICTIVE_SAMPLES, CheckpointError
from .metrics import auroc, negative_log_likelihood, predictive_entropy, scores, softmax

SIDE = 28  # MNIST's images are SIDE x SIDE


def rotate(images, degrees):
    """``images`` (N, SIDE * SIDE) turned ``degrees`` counter-clockwise about their centre, by
    bilinear interpolation; what falls outside the frame is 0."""
    flat = np.asarray(images, dtype=np.float32).reshape(-1, SIDE * SIDE)
    # one matrix product (BLAS)
    return flat @ rotation_matrix(degrees).T


def rotation_matrix(degrees):
    """The (SIDE^2, SIDE^2) matrix of ``rotate``: row p holds the bilinear weights of output
    pixel p's (at most four) source pixels."""
    angle = math.radians(degrees)
    centre = (SIDE - 1) / 2.0
    rows, cols = np.meshgrid(np.arange(SIDE, dtype=np.float64) - centre,
                             np.arange(SIDE, dtype=np.float64) - centre, indexing="ij")
    # the source of each output pixel: the output's position turned back by the angle (rows
    # point down: with these signs a quarter turn is np.rot90's, counter-clockwise on screen)
    cos, sin = math.cos(angle), math.sin(angle)
    source_rows = (cos * rows + sin * cols + centre).ravel()
    source_cols = (-sin * rows + cos * cols + centre).ravel()
    # round what lies within rounding of a whole pixel, so that quarter turns are exact
    source_rows = np.where(np.abs(source_rows - np.round(source_rows)) < 1e-9,
                           np.round(source_rows), source_rows)
    source_cols = np.where(np.abs(source_cols - np.round(source_cols)) < 1e-9,
                           np.round(source_cols), source_cols)
    top, left = np.floor(source_rows).astype(int), np.floor(source_cols).astype(int)
    down, right = source_rows - top, source_cols - left
    matrix = np.zeros((SIDE * SIDE, SIDE * SIDE), dtype=np.float32)
    outputs = np.arange(SIDE * SIDE)
    for row_step, row_weight in ((0, 1.0 - down), (1, down)):
        for col_step, col_weight in ((0, 1.0 - right), (1, right)):
            r, c = top + row_step, left + col_step
            weight = row_weight * col_weight
            inside = (r >= 0) & (r < SIDE) & (c >= 0) & (c < SIDE) & (weight > 0)
            matrix[outputs[inside], r[inside] * SIDE + c[inside]] += weight[inside]
    return matrix


def translate(images, pixels):
    """``images`` (N, SIDE * SIDE) moved ``pixels`` to the right; the columns it uncovers are
    0."""
    stack = np.asarray(images, dtype=np.float32).reshape(-1, SIDE, SIDE)
    out = np.zeros_like(stack)
    out[:, :, pixels:] = stack[:, :, :SIDE - pixels]
    return out.reshape(-1, SIDE * SIDE)


class Shift:
    """One kind of shift: its ``name``, its severities and the function that applies one."""

    def __init__(self, name, unit, severities, apply):
        self.name, self.unit, self.severities, self.apply = name, unit, severities, apply


SHIFTS = {shift.name: shift for shift in (
    Shift("rotation", "degrees", list(range(0, 181, 15)), rotate),
    Shift("translation", "pixels", list(range(0, 15)), translate))}


def shift_report(model, images, labels, shift):
    """The report of ``model`` on ``images`` shifted at each of ``shift``'s severities: a dict
    with one row a severity (``metrics.scores`` and ``auroc``, the AUROC of the shifted images'
    entropies against the unshifted ones')."""
    rows, unshifted_entropy = [], None
    for severity in shift.severities:
        probs = model.probabilities(shift.apply(images, severity))
        if not np.isfinite(probs).all():
            raise CheckpointError("%s gives non-finite probabilities on images shifted by %s "
                                  "%s; nothing is reported", getattr(model, "name", "the model"),
                                  severity, shift.unit)
        entropy = predictive_entropy(probs)
        if unshifted_entropy is None:
            unshifted_entropy = entropy
        rows.append(dict(severity=severity, **scores(probs, labels),
                         auroc=auroc(unshifted_entropy, entropy)))
    return {"shift": shift.name, "unit": shift.unit, "images": int(len(labels)), "rows": rows}


def ood_report(model, images, ood_images):
    """The mean entropy (bits) of ``model`` on another dataset's images, and the AUROC of
    telling them from ``images`` by entropy."""
    entropy_in = predictive_entropy(model.probabilities(images))
    entropy_ood = predictive_entropy(model.probabilities(ood_images))
    return {"mean_entropy": float(entropy_ood.mean()), "auroc": auroc(entropy_in, entropy_ood)}


# The models: ``probabilities(images)`` of scaled images (N, 784), ``inputs(pixels)`` of raw ones.

class RunModel:
    """A training run's parameter file in MXNet: its Monte Carlo predictive of ``num_samples``
    draws (weights, or dropout masks), or its mean weights for ``num_samples`` 0."""

    def __init__(self, network, mus, sigmas, num_samples, seed=0, name=""):
        self.network, self.mus, self.sigmas = network, mus, sigmas
        self.num_samples, self.seed, self.name = num_samples, seed, name

    def inputs(self, pixels):
        from ..data import PIXEL_SCALE
        return pixels.reshape(pixels.shape[0], -1) / PIXEL_SCALE

    def probabilities(self, images):
        from .uncertainty import predict
        return predict(images, self.mus, self.sigmas, self.num_samples, seed=self.seed,
                       network=self.network).asnumpy()


class CompressedFileModel:
    """A compressed file's predictor (NumPy alone): ``num_samples`` draws of its kept weights,
    or its mean weights for 0."""

    def __init__(self, model, num_samples, seed=0, name=""):
        self.model, self.num_samples, self.seed, self.name = model, num_samples, seed, name

    def inputs(self, pixels):
        return self.model.inputs(pixels)

    def probabilities(self, images):
        return self.model.predict(images, self.num_samples, self.seed)


def load_model(path, samples, field="test_samples"):
    """``(model, (run, config) or None)``: a compressed file's predictor (NumPy alone), or that
    of a run directory or one of its parameter files (MXNet), of ``samples`` draws (None: the
    model's own number); a ConfigError names ``field`` for a number it cannot draw."""
    import os
    from ..errors import ConfigError
    from ..learning.rundir import is_compressed_model, resolve_checkpoint
    if os.path.isfile(path) and (is_compressed_model(path) or not path.endswith(".params")):
        from ..shipping import model_file as compressed
        model = compressed.read(path)
        draws = model.header.get("predictive_samples", 0) if samples is None else samples
        if draws and model.sigmas is None:
            raise ConfigError(field, draws, "0 for %s (it keeps no sigmas to sample)" % path)
        return CompressedFileModel(model, draws, name=path), None
    run, checkpoint = resolve_checkpoint(path)
    config = run.read_classifier_config()
    kind = config.model_kind
    draws = kind.default_test_samples if samples is None else samples
    if draws:  # 0: the mean weights, for every model as for a compressed file
        kind.check_test_samples(draws, MAX_PREDICTIVE_SAMPLES, field)
    state = run.load_predictive(config, None, checkpoint)
    return (RunModel(config.build_network(), state["mus"], state["sigmas"], draws, name=path),
            (run, config))


class Ensemble:
    """Several models as one: the mean of their predictives (a deep ensemble of runs of
    different seeds)."""

    def __init__(self, members):
        self.members = list(members)
        self.name = "ensemble of %d" % len(self.members)

    def probabilities(self, images):
        return np.mean([m.probabilities(images) for m in self.members], axis=0)


class TemperatureScaled:
    """``model``'s predictive raised to 1 / ``temperature`` and normalised: for a deterministic
    network softmax(logits / T), the temperature scaling of Guo et al. (2017)."""

    def __init__(self, model, temperature):
        self.model, self.temperature = model, temperature
        self.name = "%s, temperature %.3g" % (getattr(model, "name", ""), temperature)

    def probabilities(self, images):
        return scale_temperature(self.model.probabilities(images), self.temperature)


def scale_temperature(probs, temperature):
    """softmax(log(probs) / temperature), in float64 (probabilities floored at 1e-300)."""
    return softmax(np.log(np.maximum(np.asarray(probs, dtype=np.float64), 1e-300)) / temperature)


def fit_temperature(probs, labels, low=0.05, high=20.0, steps=60):
    """The temperature in [low, high] whose scaled predictive has the least NLL on ``labels``:
    golden-section search over log T (the NLL is convex in 1 / T)."""
    golden = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = math.log(low), math.log(high)
    nll = lambda log_t: negative_log_likelihood(  # noqa: E731
        scale_temperature(probs, math.exp(log_t)), labels)
    c, d = b - golden * (b - a), a + golden * (b - a)
    fc, fd = nll(c), nll(d)
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - golden * (b - a)
            fc = nll(c)
        else:
            a, c, fc = c, d, fd
            d = a + golden * (b - a)
            fd = nll(d)
    return math.exp((a + b) / 2.0)

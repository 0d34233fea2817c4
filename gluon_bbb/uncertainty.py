"""Monte Carlo predictive distribution and the metrics that say whether it knows what it does
not know: entropy, calibration (ECE), negative log-likelihood and AUROC for OOD detection.

``predict`` works on NDArrays on the parameters' context; the metrics take NumPy arrays
(or NDArrays) of probabilities (N, classes) and labels (N,).
"""
import numpy as np
from mxnet import nd

from .data import PIXEL_SCALE
from .model import net, sample_epsilons, transform_gaussian_samples
from .noise import noise_for, seed_generator


def predict(X, mus, sigmas, num_samples, batch_size=1000, seed=None, network=None):
    """Mean over ``num_samples`` weight draws w ~ N(mu, sigma^2) of softmax(net(X, w)), for
    ``network`` (default: the MLP the parameters shape).

    X: (N, inputs), NumPy or NDArray; returns (N, classes) NDArray on the params' context.
    ``num_samples=0`` gives the deterministic prediction with the mean weights (and every unit
    where the network has dropout). Monte Carlo dropout: ``sigmas`` None and a network with
    dropout, each draw a dropout mask. The draws are those of ``noise.noise_for(ctx, seed)``
    and of MXNet's generator seeded from ``seed``.
    """
    total = None
    for output in sampled_outputs(X, mus, sigmas, num_samples, batch_size, seed, network):
        probs = nd.softmax(output, axis=1)
        total = probs if total is None else total + probs
    return total / max(num_samples, 1)


def sampled_outputs(X, mus, sigmas, num_samples, batch_size=1000, seed=None, network=None):
    """The network's outputs for X under each of ``num_samples`` draws (``predict``'s), one
    NDArray (N, outputs) at a time; the mean weights' alone for ``num_samples=0``."""
    ctx = mus[0].context
    X = X.as_in_context(ctx) if isinstance(X, nd.NDArray) else nd.array(X, ctx=ctx)
    if num_samples == 0:
        network = network.without_dropout() if network is not None else None
        yield _batched(X, mus, batch_size, network)
        return
    noise = noise_for(ctx, seed)
    if network is not None and network.has_dropout:
        seed_generator(ctx, None if seed is None else [seed, 1])
    shapes = [mu.shape for mu in mus]
    for _ in range(num_samples):
        weights = (mus if sigmas is None else
                   transform_gaussian_samples(mus, sigmas, sample_epsilons(shapes, ctx, noise)))
        yield _batched(X, weights, batch_size, network)


def _batched(X, params, batch_size, network=None):
    return nd.concat(*[net(X[i:i + batch_size], params, network=network)
                       for i in range(0, X.shape[0], batch_size)], dim=0)


def _np(array):
    return array.asnumpy() if isinstance(array, nd.NDArray) else np.asarray(array)


def predictive_entropy(probs, base=2.0):
    """Entropy of each predictive distribution, in bits by default; shape (N,)."""
    p = _np(probs).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    return -terms.sum(axis=1) / np.log(base)


def negative_log_likelihood(probs, labels):
    """Mean -log p(label) in nats (probabilities floored at 1e-12 so one certain mistake
    does not make it infinite)."""
    p = _np(probs).astype(np.float64)
    labels = _np(labels).astype(int)
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(labels)), labels], 1e-12))))


def reliability(probs, labels, bins=15):
    """Per confidence bin (equal widths on [0, 1]): count, mean confidence, accuracy."""
    p = _np(probs)
    labels = _np(labels).astype(int)
    confidence = p.max(axis=1)
    correct = p.argmax(axis=1) == labels
    # bin k holds confidences in (k/bins, (k+1)/bins]; confidence 0 cannot occur
    index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
    counts = np.bincount(index, minlength=bins)
    with np.errstate(invalid="ignore"):
        mean_confidence = np.bincount(index, confidence, bins) / counts
        accuracy = np.bincount(index, correct, bins) / counts
    return counts, mean_confidence, accuracy


def expected_calibration_error(probs, labels, bins=15):
    """ECE: sum over confidence bins of (bin share) * |accuracy - mean confidence|."""
    counts, mean_confidence, accuracy = reliability(probs, labels, bins)
    used = counts > 0
    return float(np.sum(counts[used] / counts.sum()
                        * np.abs(accuracy[used] - mean_confidence[used])))


def auroc(scores_negative, scores_positive):
    """Area under the ROC curve of telling positives (e.g. OOD inputs) from negatives by a
    score where higher means positive: P(score_pos > score_neg) + P(tie) / 2."""
    negative = np.asarray(scores_negative, dtype=np.float64)
    positive = np.asarray(scores_positive, dtype=np.float64)
    both = np.concatenate([negative, positive])
    # 1-based ranks, ties sharing their average rank: a group of c equal scores after
    # `before` smaller ones holds ranks before+1 .. before+c
    _, group, counts = np.unique(both, return_inverse=True, return_counts=True)
    before = np.cumsum(counts) - counts
    ranks = (before + (counts + 1) / 2.0)[group]
    positive_rank_sum = ranks[negative.size:].sum()
    return float((positive_rank_sum - positive.size * (positive.size + 1) / 2.0)
                 / (positive.size * negative.size))


def noise_images(count=1000, num_inputs=784, seed=0):
    """Uniform random pixel images in [0, 255] scaled like MNIST (/126); (count, inputs)."""
    rng = np.random.default_rng(seed)
    return (rng.uniform(0, 255, size=(count, num_inputs)) / PIXEL_SCALE).astype(np.float32)

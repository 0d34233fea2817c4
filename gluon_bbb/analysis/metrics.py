"""The metrics that say whether a predictive knows what it does not know, on NumPy alone:
entropy, negative log-likelihood, the Brier score, calibration (reliability, ECE) and the AUROC
of telling two sets apart by a score (``scores`` gathers the reports' figures)."""
import numpy as np


def _np(array):
    """A NumPy array of ``array`` (an MXNet NDArray is copied out by its ``asnumpy``)."""
    return array.asnumpy() if hasattr(array, "asnumpy") else np.asarray(array)


def softmax(logits):
    """softmax over axis 1 of a NumPy array (N, classes)."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def predictive_entropy(probs, base=2.0):
    """Entropy of each predictive distribution, in bits by default; shape (N,)."""
    p = _np(probs).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * (np.log2(p) if base == 2 else np.log(p) / np.log(base)), 0.0)
    return -terms.sum(axis=1)


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


def brier_score(probs, labels):
    """Mean over the images of the squared distance between the predictive and the one-hot
    label, summed over the classes (0 is perfect, 2 the worst)."""
    p = _np(probs).astype(np.float64)
    one_hot = np.zeros_like(p)
    one_hot[np.arange(len(labels)), np.asarray(labels, dtype=int)] = 1.0
    return float(np.mean(np.sum((p - one_hot) ** 2, axis=1)))


def scores(probs, labels):
    """Accuracy, NLL, Brier score, ECE and mean entropy (bits) of one predictive (N, classes)
    of images with ``labels``: the figures of the uncertainty and shift reports."""
    probs, labels = _np(probs), _np(labels)
    return {"accuracy": float(np.mean(probs.argmax(axis=1) == labels)),
            "nll": negative_log_likelihood(probs, labels),
            "brier": brier_score(probs, labels),
            "ece": expected_calibration_error(probs, labels),
            "mean_entropy": float(predictive_entropy(probs).mean())}

"""Uncertainty report of a trained run: ``python -m gluon_bbb.evaluate --checkpoint RUN_DIR``.

Writes ``uncertainty.json`` and ``uncertainty.png`` into the run directory (or ``--out``);
``--checkpoint RUN_DIR/best.params`` reports on the best validation epoch instead, into
``best-uncertainty.json`` and ``best-uncertainty.png``.
"""
import json
import os
import sys

import numpy as np

from .checkpoint import load_checkpoint, report_prefix, resolve_checkpoint, write_json
from .cli import ArgumentParser, run_main
from .context import parse_context
from .data import IMAGE_SHAPE, PIXEL_SCALE, find_idx_file, load_mnist, read_idx
from .errors import ConfigError, DataError
from .rundir import check_output_dir, locked
from .model import evaluate_accuracy, transform_rhos
from .train import check_shapes, load_run_config
from .uncertainty import (auroc, expected_calibration_error, negative_log_likelihood,
                          noise_images, predict, predictive_entropy, reliability)

OOD_IMAGES = "t10k-images-idx3-ubyte"


def load_ood_images(directory):
    """Test images of another MNIST-format dataset (e.g. Fashion-MNIST), scaled like MNIST;
    DataError unless they are 28x28, as the network takes them."""
    path = find_idx_file(directory, OOD_IMAGES)
    if path is None:
        raise DataError("no %s[.gz] in --ood-data-dir %s" % (OOD_IMAGES, directory))
    images = read_idx(path, ndim=3)
    if images.shape[1:] != IMAGE_SHAPE:
        raise DataError("%s: images are %dx%d, the network takes %dx%d" % (
            path, images.shape[1], images.shape[2], *IMAGE_SHAPE))
    return images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(PIXEL_SCALE)


def uncertainty_report(mus, sigmas, test_images, test_labels, num_samples, ood_images=None,
                       seed=0):
    """The ``uncertainty.json`` dict and the entropies behind it. ``num_samples=0`` evaluates
    the mean weights only (the deterministic MLP baseline)."""
    probs = predict(test_images, mus, sigmas, num_samples, seed=seed).asnumpy()
    entropy_in = predictive_entropy(probs)
    report = {"test_samples": num_samples, "entropy_unit": "bits", "in_distribution": {
        "accuracy": float(np.mean(probs.argmax(axis=1) == test_labels)),
        "mean_weights_accuracy": evaluate_accuracy(test_images, test_labels, mus),
        "nll": negative_log_likelihood(probs, test_labels),
        "ece": expected_calibration_error(probs, test_labels),
        "mean_entropy": float(entropy_in.mean())}}
    entropy_noise = predictive_entropy(predict(noise_images(1000, test_images.shape[1]), mus,
                                               sigmas, num_samples, seed=seed + 1))
    report["noise"] = {"mean_entropy": float(entropy_noise.mean()),
                       "auroc": auroc(entropy_in, entropy_noise)}
    entropies = {"MNIST test": entropy_in, "noise": entropy_noise}
    if ood_images is not None:
        entropy_ood = predictive_entropy(predict(ood_images, mus, sigmas, num_samples,
                                                 seed=seed + 2))
        report["ood"] = {"mean_entropy": float(entropy_ood.mean()),
                         "auroc": auroc(entropy_in, entropy_ood)}
        entropies["OOD"] = entropy_ood
    return report, entropies, probs


def plot_uncertainty(entropies, probs, labels, path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2, 1)
    for name, values in entropies.items():
        ax.hist(values, bins=50, range=(0, np.log2(probs.shape[1])), alpha=0.5, density=True,
                label="%s (mean %.2f)" % (name, values.mean()))
    ax.set_xlabel("predictive entropy (bits)")
    ax.set_ylabel("density")
    ax.legend()
    ax = fig.add_subplot(1, 2, 2)
    counts, confidence, accuracy = reliability(probs, labels)
    centers = (np.arange(len(counts)) + 0.5) / len(counts)
    used = counts > 0
    ax.bar(centers[used], accuracy[used], width=1.0 / len(counts), edgecolor="k", alpha=0.7,
           label="accuracy")
    ax.plot([0, 1], [0, 1], "k--", label="perfect calibration")
    ax.plot(centers[used], confidence[used], "r_", ms=14, mew=2, label="mean confidence")
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title("reliability, ECE %.4f" % expected_calibration_error(probs, labels))
    # below the axes: inside them it would cover bars
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def evaluate_run(checkpoint, data, ctx, num_samples=10, ood_images=None, out_dir=None):
    """Write uncertainty.json and uncertainty.png (prefixed as ``report_prefix`` says) for a
    run directory or a parameter file in one; returns the report."""
    run_dir, checkpoint_path = resolve_checkpoint(checkpoint)
    config = load_run_config(run_dir)
    state = load_checkpoint(checkpoint_path, ctx)
    check_shapes(state["mus"], config.layer_shapes(), checkpoint_path)
    if config.model == "mlp":
        num_samples = 0
    report, entropies, probs = uncertainty_report(
        state["mus"], transform_rhos(state["rhos"]), data.test_images, data.test_labels,
        num_samples, ood_images)
    report["model"] = config.model
    out_dir = check_output_dir(out_dir or run_dir)
    prefix = report_prefix(checkpoint_path)
    with locked(out_dir):
        write_json(os.path.join(out_dir, prefix + "uncertainty.json"), report)
        plot_uncertainty(entropies, probs, data.test_labels,
                         os.path.join(out_dir, prefix + "uncertainty.png"))
    return report


def main(argv=None):
    parser = ArgumentParser(prog=PROG,
                            description="Uncertainty report (entropy, ECE, NLL, OOD AUROC).")
    parser.add_argument("--checkpoint", required=True, help="run directory of train_mnist.py "
                        "(its last epoch), or its best.params (the best validation epoch)")
    parser.add_argument("--data-dir", help="directory with the MNIST IDX files")
    parser.add_argument("--ood-data-dir", help="directory with another dataset's "
                        "t10k-images-idx3-ubyte[.gz] (e.g. Fashion-MNIST)")
    parser.add_argument("--test-samples", type=int, default=10,
                        help="weight samples of the Monte Carlo predictive (default 10)")
    parser.add_argument("--out", help="output directory (default: the run directory)")
    parser.add_argument("--ctx", default="cpu", help="cpu, gpu or gpu:N")
    args = parser.parse_args(argv)
    if args.test_samples < 1:
        raise ConfigError("test_samples", args.test_samples, "an integer >= 1")
    run_dir, _ = resolve_checkpoint(args.checkpoint)
    ctx = parse_context(args.ctx)
    out_dir = check_output_dir(args.out or run_dir)
    ood = load_ood_images(args.ood_data_dir) if args.ood_data_dir else None
    data = load_mnist(args.data_dir)
    with locked(out_dir):
        report = evaluate_run(args.checkpoint, data, ctx, args.test_samples, ood, out_dir)
    print(json.dumps(report, indent=2))
    return 0


PROG = "python -m gluon_bbb.evaluate"

if __name__ == "__main__":
    sys.exit(run_main(main, prog=PROG))

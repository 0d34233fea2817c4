"""Uncertainty report of a trained run: ``python -m gluon_bbb.evaluate --checkpoint RUN_DIR``.

Writes ``uncertainty.json`` and ``uncertainty.png`` into the run directory (or ``--out``);
``--checkpoint RUN_DIR/best.params`` reports on the best validation epoch instead, into
``best-uncertainty.json`` and ``best-uncertainty.png``. MNIST is read from ``--data-dir``, else
from the directory the run was trained on, else as ``load_mnist`` finds it.
"""
import json
import os
import sys

if __name__ == "__main__":  # before anything loads MXNet: a broken one is one line
    from . import exit_unless_mxnet_loads
    exit_unless_mxnet_loads("python -m gluon_bbb.evaluate")

import numpy as np  # noqa: E402

from .cli import ArgumentParser, run_main
from .context import parse_context
from .data import IMAGE_SHAPE, PIXEL_SCALE, find_idx_file, load_mnist, read_idx
from .errors import ConfigError, DataError
from .files import save_figure, write_json
from .model import evaluate_accuracy, prediction_sigmas
from .rundir import RunDirectory, report_prefix, resolve_checkpoint
from .uncertainty import (auroc, expected_calibration_error, negative_log_likelihood,
                          noise_images, predict, predictive_entropy, reliability)

OOD_IMAGES = "t10k-images-idx3-ubyte"
# as many weight samples as the predictive may average: each is a pass over the test set
MAX_TEST_SAMPLES = 1000


def load_ood_images(directory):
    """Test images of another MNIST-format dataset (e.g. Fashion-MNIST), scaled like MNIST;
    DataError unless they are 28x28, as the network takes them."""
    path = find_idx_file(directory, OOD_IMAGES)
    if path is None:
        raise DataError("no %s[.gz] in {ood_data_dir} %s", OOD_IMAGES, directory)
    images = read_idx(path, ndim=3)
    if images.shape[1:] != IMAGE_SHAPE:
        raise DataError("%s: images are %dx%d, the network takes %dx%d",
                        path, images.shape[1], images.shape[2], *IMAGE_SHAPE)
    return images.reshape(images.shape[0], -1).astype(np.float32) / np.float32(PIXEL_SCALE)


def uncertainty_report(mus, sigmas, test_images, test_labels, num_samples, ood_images=None,
                       seed=0, network=None):
    """The ``uncertainty.json`` dict and the entropies behind it, for ``network`` (default:
    the MLP the parameters shape). ``num_samples=0`` evaluates the mean weights only (the
    deterministic MLP baseline)."""
    probs = predict(test_images, mus, sigmas, num_samples, seed=seed, network=network).asnumpy()
    entropy_in = predictive_entropy(probs)
    report = {"test_samples": num_samples, "entropy_unit": "bits", "in_distribution": {
        "accuracy": float(np.mean(probs.argmax(axis=1) == test_labels)),
        "mean_weights_accuracy": evaluate_accuracy(test_images, test_labels, mus,
                                                   network=network),
        "nll": negative_log_likelihood(probs, test_labels),
        "ece": expected_calibration_error(probs, test_labels),
        "mean_entropy": float(entropy_in.mean())}}
    entropy_noise = predictive_entropy(predict(noise_images(1000, test_images.shape[1]), mus,
                                               sigmas, num_samples, seed=seed + 1,
                                               network=network))
    report["noise"] = {"mean_entropy": float(entropy_noise.mean()),
                       "auroc": auroc(entropy_in, entropy_noise)}
    entropies = {"MNIST test": entropy_in, "noise": entropy_noise}
    if ood_images is not None:
        entropy_ood = predictive_entropy(predict(ood_images, mus, sigmas, num_samples,
                                                 seed=seed + 2, network=network))
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
    save_figure(fig, path)


def evaluate_run(checkpoint, data, ctx, num_samples=10, ood_images=None, out=None,
                 ood_data_dir=None):
    """Write uncertainty.json and uncertainty.png (prefixed as ``report_prefix`` says) for a
    run directory or a parameter file in one, into ``out`` (a path or a ``RunDirectory``,
    locked here unless its caller holds it; default: the run directory). A deterministic MLP
    run (``model`` ``mlp``) has no weight distribution: it is evaluated with its weights and
    ``num_samples`` must be 0; a Monte Carlo dropout run draws ``num_samples`` dropout masks. Returns ``(report, paths written)``."""
    run, checkpoint_path = resolve_checkpoint(checkpoint)
    config = run.read_classifier_config()
    state = run.load_parameters(config, ctx, checkpoint_path)
    if config.model == "mlp" and num_samples:
        raise ConfigError("test_samples", num_samples, "0 for a deterministic network "
                          "(model mlp has no weight distribution to sample)")
    report, entropies, probs = uncertainty_report(
        state["mus"], prediction_sigmas(config.model, state["rhos"]), data.test_images,
        data.test_labels,
        num_samples, ood_images, network=config.build_network())
    report.update(model=config.model, checkpoint=os.path.abspath(checkpoint_path),
                  epoch=state["epoch"], data_dir=data.directory, ood_data_dir=ood_data_dir)
    if out is None:
        out = run
    elif not isinstance(out, RunDirectory):
        out = RunDirectory(out).create()
    prefix = report_prefix(checkpoint_path)
    paths = [out.file(prefix + name) for name in ("uncertainty.json", "uncertainty.png")]
    with out.locked():
        write_json(paths[0], report)
        plot_uncertainty(entropies, probs, data.test_labels, paths[1])
    return report, paths


def build_parser():
    parser = ArgumentParser(prog=PROG,
                            description="Uncertainty report (entropy, ECE, NLL, OOD AUROC).")
    parser.add_argument("--checkpoint", required=True, help="run directory of train_mnist.py "
                        "(its last epoch), or its best.params (the best validation epoch)")
    parser.add_argument("--data-dir", help="directory with the MNIST IDX files (default: the "
                        "one the run was trained on, else $GLUON_BBB_DATA, else "
                        "~/.mxnet/datasets/mnist)")
    parser.add_argument("--ood-data-dir", help="directory with another dataset's "
                        "t10k-images-idx3-ubyte[.gz] (e.g. Fashion-MNIST) for the "
                        "out-of-distribution part of the report")
    parser.add_argument("--test-samples", type=int,
                        help="weight samples of the Monte Carlo predictive, 1 to %d (default "
                        "10; a --model mlp run takes 0, its weights; a --model mcdropout run draws dropout masks)" % MAX_TEST_SAMPLES)
    parser.add_argument("--out", help="output directory (default: the run directory)")
    parser.add_argument("--ctx", default="cpu", help="device to evaluate on: cpu, gpu or "
                        "gpu:N (default: cpu)")
    return parser


def check_test_samples(num_samples, minimum=1):
    """ConfigError unless ``num_samples`` is an integer in [minimum, MAX_TEST_SAMPLES]."""
    if not minimum <= num_samples <= MAX_TEST_SAMPLES:
        raise ConfigError("test_samples", num_samples, "an integer in [%d, %d]"
                          % (minimum, MAX_TEST_SAMPLES))


def main(argv=None):
    args = build_parser().parse_args(argv)
    run, _ = resolve_checkpoint(args.checkpoint)
    model = run.read_classifier_config().model
    if args.test_samples is None:
        args.test_samples = 0 if model == "mlp" else 10
    elif model != "mlp":
        check_test_samples(args.test_samples)
    ctx = parse_context(args.ctx)
    ood = load_ood_images(args.ood_data_dir) if args.ood_data_dir else None
    data = load_mnist(args.data_dir or run.recorded_data_dir())
    out = RunDirectory(args.out).create() if args.out else run
    with out.locked():
        report, paths = evaluate_run(args.checkpoint, data, ctx, args.test_samples, ood, out,
                                     args.ood_data_dir and os.path.abspath(args.ood_data_dir))
    print(json.dumps(report, indent=2))
    # stdout stays the report's JSON, for a reader such as jq
    sys.stderr.write("wrote %s\n" % ", ".join(paths))
    return 0


PROG = "python -m gluon_bbb.evaluate"

if __name__ == "__main__":
    sys.exit(run_main(main, prog=PROG))

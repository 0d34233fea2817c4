"""The uncertainty report of a trained run: the Monte Carlo predictive's accuracy, NLL,
calibration and entropy on MNIST, on noise and on another dataset's images, written as
``uncertainty.json`` and ``uncertainty.png`` (``evaluate_run``). The command is
``gluon_bbb.commands.evaluate``; training runs the same report at its end."""
import os

import numpy as np

from ..data import IMAGE_SHAPE, PIXEL_SCALE, find_idx_file, read_idx
from ..errors import MAX_PREDICTIVE_SAMPLES, DataError
from .. import outputs
from .metrics import auroc, predictive_entropy, scores
from ..tutorial import evaluate_accuracy
from ..plots import plot_uncertainty
from ..learning.rundir import UNCERTAINTY_FILE, RunDirectory, report_prefix, resolve_checkpoint
from .uncertainty import noise_images, predict

OOD_IMAGES = "t10k-images-idx3-ubyte"


def report_files(checkpoint_path):
    """``{name: outputs.FileKind}`` of the report on ``checkpoint_path``, its names prefixed
    as ``report_prefix`` says."""
    prefix = report_prefix(checkpoint_path)
    return {prefix + UNCERTAINTY_FILE: outputs.REPORT, prefix + "uncertainty.png": outputs.PNG}


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
    the MLP the parameters shape)."""
    probs = predict(test_images, mus, sigmas, num_samples, seed=seed, network=network).asnumpy()
    entropy_in = predictive_entropy(probs)
    report = {"test_samples": num_samples, "entropy_unit": "bits", "in_distribution": dict(
        scores(probs, test_labels),
        mean_weights_accuracy=evaluate_accuracy(test_images, test_labels, mus, network=network))}
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


def evaluate_run(checkpoint, data, ctx, num_samples=10, ood_images=None, out=None,
                 ood_data_dir=None):
    """Write uncertainty.json and uncertainty.png (prefixed as ``report_prefix`` says) for a
    run directory or a parameter file in one, into ``out`` (a path or a ``RunDirectory``,
    locked here unless its caller holds it; default: the run directory)."""
    run, checkpoint_path = resolve_checkpoint(checkpoint)
    config = run.read_classifier_config()
    state = run.load_predictive(config, ctx, checkpoint_path)
    config.model_kind.check_test_samples(num_samples, MAX_PREDICTIVE_SAMPLES)
    sigmas = state["sigmas"]
    report, entropies, probs = uncertainty_report(
        state["mus"], sigmas, data.test_images, data.test_labels, num_samples, ood_images,
        network=config.build_network())
    report.update(model=config.model, checkpoint=os.path.abspath(checkpoint_path),
                  epoch=state["epoch"], data_dir=data.directory, ood_data_dir=ood_data_dir)
    files = report_files(checkpoint_path)
    if out is None:
        out = run
    elif not isinstance(out, RunDirectory):
        out = RunDirectory(out).create("out", files, own_runs=[run.path])
    paths = [out.file(name) for name in files]
    with out.locked():
        outputs.write_json(paths[0], report, outputs.REPORT)
        plot_uncertainty(entropies, probs, data.test_labels, paths[1])
    return report, paths

#!/usr/bin/env python3
"""Measure what compression buys for a trained run, side by side in one process:

  size:        the compressed file (``gluon_bbb.commands.compress``) for each proportion removed and
               quantization precision, against the float32 dense means (4 bytes a parameter)
               and against the pruned means as ``prune.py --save-pruned`` writes them (int32
               index and float32 value a kept entry, nd.save); the test error of the file's
               mean network against the unpruned mean network's; what each step contributes
               (pruning alone, the units removed, the quantized means, the varint indices)
  latency:     one image and a batch of 1,000 through the NumPy predictor and through the dense
               MXNet mean network (``net``), median over repeats, taking turns; the batch
               also with each convolution and max pooling computed apart (the predictor
               computes a convolution and the pooling after it in one product); with
               ``--narrower``, the NumPy predictor of networks of other widths too (random
               weights: a file that removed units down to them predicts with such a network),
               each against the same dense MXNet network, to see what structure a speed-up needs
  uncertainty: with ``--sigma-bits``, the compressed Bayesian model's Monte Carlo predictive
               against the full posterior's (``uncertainty.predict``), the same number of draws:
               test accuracy, ECE, entropy on uniform noise, AUROC of noise and, with
               ``--ood-data-dir``, of another dataset's test images against MNIST's

    python bench/bench_compress.py RUN [--proportions 0.9 0.95 0.97] [--precisions 0 0.5 1 2]
        [--choose P --precision K --sigma-bits 4 | --file MODEL.gbbb] [--ood-data-dir DIR]
        [--plot FILE] [--narrower NETWORK ...]
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gluon_bbb  # noqa: E402  (before MXNet: its thread settings)
mx = gluon_bbb.require_mxnet()  # without the line MXNet's engine writes as it starts
import numpy as np  # noqa: E402
from mxnet import nd  # noqa: E402

from gluon_bbb.native import library  # noqa: E402
from gluon_bbb.shipping import model_file as compressed  # noqa: E402
from gluon_bbb.shipping.writer import compress_parameters, error_rate, run_parameters  # noqa: E402
from gluon_bbb.analysis.report import load_ood_images  # noqa: E402
from gluon_bbb.tutorial import net  # noqa: E402
from gluon_bbb.networks.network import parse_network  # noqa: E402
from gluon_bbb.analysis.snr import keep_masks, save_pruned  # noqa: E402
from gluon_bbb.learning.rundir import resolve_checkpoint  # noqa: E402
from gluon_bbb.analysis.uncertainty import (auroc, expected_calibration_error, noise_images,  # noqa: E402
                                   predict)


def file_size(header, blobs):
    return len(compressed.pack(dict(header, unsure_entropy_bits=0.0), blobs))


def sizes(network, mus, sigmas, ranking, proportions, precisions, test, base_error):
    """One row per (proportion, precision): bytes, ratios and test error."""
    dense_bytes = 4 * sum(m.size for m in mus)
    rows = []
    for proportion in proportions:
        keep = keep_masks(mus, ranking, proportion)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "pruned.params")
            sparse = save_pruned(path, [nd.array(m * k) for m, k in zip(mus, keep)])
        for precision in precisions:
            model, header, blobs, report = compress_parameters(network, mus, sigmas, ranking,
                                                               proportion, precision)
            size = file_size(header, blobs)
            error = error_rate(model, *test)
            rows.append((proportion, precision, size, dense_bytes / size, sparse / size,
                         error, error - base_error, report["network"]))
    return rows


def contributions(network, mus, sigmas, ranking, proportion, precision):
    """Bytes after each step at ``proportion``: the kept entries as float32 values with int32
    positions (pruning), after removing units, with quantized values, with varint gaps
    (the file, LZMA over all)."""
    model, header, blobs, report = compress_parameters(network, mus, sigmas, ranking, proportion,
                                                       0.0)
    structured = report["kept_after_structure"]
    _, qheader, qblobs, _ = compress_parameters(network, mus, sigmas, ranking, proportion,
                                                precision)
    values = sum(t["kept"] * np.dtype(t["value_dtype"]).itemsize for t in qheader["tensors"])
    return [("pruning (int32 index + float32 value per kept entry)",
             8 * report["kept_after_pruning"]),
            ("+ units removed", 8 * structured),
            ("+ means quantized (narrow integers, int32 indices)", 4 * structured + values),
            ("+ varint gap indices", sum(t["index_bytes"] for t in qheader["tensors"]) + values),
            ("+ LZMA over the file (its size)", file_size(qheader, qblobs))]


def latency(model, network, mus, images, repeats=30):
    """Median seconds of one image and of a batch of 1,000 for the NumPy predictor and for the
    dense mean network ``network`` (pass a gated one ``without_gates``: the network as it was
    before group sparsity) on MXNet's operators, taking turns; and of the batch through the
    dense network as ``net`` runs it by default, a convolution and the pooling after it on the
    C kernel (``"kernel"``, where it serves the network)."""
    nd_mus = [nd.array(m) for m in mus]
    one, batch = images[:1], images[:1000]
    cases = {
        ("numpy", 1): lambda: model.predict(one),
        ("numpy", 1000): lambda: model.predict(batch),
        ("numpy apart", 1000): lambda: model.predict(
            batch, operators=compressed.SeparateOperators),
        ("mxnet", 1): lambda: nd.softmax(net(nd.array(one), nd_mus, nd, network)).asnumpy(),
        ("mxnet", 1000): lambda: nd.softmax(net(nd.array(batch), nd_mus, nd,
                                                network)).asnumpy(),
    }
    if network.convolutions_pooled and getattr(
            library.with_convolution_max_pool(nd, [nd.array(batch)] + nd_mus),
            "ConvolutionMaxPool", None) is not None:
        cases["kernel", 1000] = lambda: nd.softmax(net(nd.array(batch), nd_mus,
                                                       network=network)).asnumpy()
    times = {key: [] for key in cases}
    for case in cases.values():  # warm up
        case()
    for _ in range(repeats):
        for key, case in cases.items():
            started = time.perf_counter()
            case()
            times[key].append(time.perf_counter() - started)
    return {key: float(np.median(values)) for key, values in times.items()}


def uncertainty(model, network, mus, sigmas, test, samples, ood):
    """Figures of the file's Monte Carlo predictive and of the full posterior's."""
    images, labels = test
    noise = noise_images(1000)
    full = lambda X: predict(X, [nd.array(m) for m in mus], [nd.array(s) for s in sigmas],  # noqa
                             samples, seed=0, network=network).asnumpy()
    rows = {}
    for name, probs in (("full posterior", full), ("compressed", lambda X: model.predict(
            X, samples, seed=0))):
        p_test = probs(images)
        entropy_test = compressed.entropy_bits(p_test)
        entropy_noise = compressed.entropy_bits(probs(noise))
        row = {"accuracy": float(np.mean(p_test.argmax(1) == labels)),
               "ece": expected_calibration_error(p_test, labels),
               "noise entropy": float(entropy_noise.mean()),
               "noise auroc": auroc(entropy_test, entropy_noise)}
        if ood is not None:
            row["ood auroc"] = auroc(entropy_test, compressed.entropy_bits(probs(ood)))
        rows[name] = row
    return rows


def plot(rows, base_error, path, labelled_precision):
    """Test error against the size ratio, a curve per precision; the proportions written beside
    the points of ``labelled_precision`` only, so that the labels stay legible."""
    from gluon_bbb.plots import new_figure, save, size_error_axes
    fig = new_figure((7, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    for precision in sorted({r[1] for r in rows}):
        points = [r for r in rows if r[1] == precision]
        line, = ax.plot([r[3] for r in points], [100 * r[5] for r in points], "o-", ms=4,
                label="float32 means" if precision == 0 else
                "step %g x median sigma" % precision)
        if precision == labelled_precision:
            for r in points:
                ax.annotate("%g%%" % (100 * r[0]), (r[3], 100 * r[5]), fontsize=7,
                            textcoords="offset points", xytext=(6, -9), ha="left",
                            color=line.get_color())
    ax.axhline(100 * base_error, color="k", ls="--", lw=1, label="unpruned mean network")
    size_error_axes(ax, "times smaller than the float32 means (labels: share of weights "
                    "removed)")
    ax.legend(fontsize=8)
    save(fig, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--proportions", type=float, nargs="+",
                        default=[0.5, 0.8, 0.9, 0.93, 0.95, 0.96, 0.97, 0.98, 0.99])
    parser.add_argument("--precisions", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0])
    parser.add_argument("--choose", type=float, default=0.95,
                        help="the proportion whose steps, latency and uncertainty are measured")
    parser.add_argument("--precision", type=float, default=0.5)
    parser.add_argument("--sigma-bits", type=int, default=4)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--file", help="a compressed file of this run (what compress wrote): "
                        "its latency and uncertainty instead of those at --choose")
    parser.add_argument("--ood-data-dir")
    parser.add_argument("--data-dir")
    parser.add_argument("--plot", help="write the size-error curves to this PNG")
    parser.add_argument("--narrower", nargs="+", default=[], metavar="NETWORK",
                        help="network descriptions (--network's) whose NumPy predictor is timed "
                        "against the run's dense MXNet network too")
    args = parser.parse_args()
    run, checkpoint = resolve_checkpoint(args.run)
    config, network, mus, sigmas, ranking, state = run_parameters(run, checkpoint)
    data = run.load_data(args.data_dir)
    test = (data.test_images, data.test_labels)
    ood = load_ood_images(args.ood_data_dir) if args.ood_data_dir else None
    dense_model = compress_parameters(network, mus, sigmas, ranking, 0.0, 0.0)[0]
    base_error = error_rate(dense_model, *test)
    print("%s, epoch %d: %s, %d parameters, unpruned mean network %.2f%% test error" % (
        checkpoint, state["epoch"], config.network if config.network != "mlp" else
        "mlp %dx%d" % (config.num_hidden_layers, config.num_hidden_units),
        sum(m.size for m in mus), 100 * base_error))
    print("\n| removed | precision | bytes | x smaller than float32 means | x smaller than "
          "--save-pruned | test error | change | network |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    rows = sizes(network, mus, sigmas, ranking, args.proportions, args.precisions, test,
                 base_error)
    for r in rows:
        print("| %g%% | %s | %d | %.1f | %.1f | %.2f%% | %+.2f | %s |" % (
            100 * r[0], "float32" if r[1] == 0 else "%g" % r[1], r[2], r[3], r[4], 100 * r[5],
            100 * r[6], r[7]))
    if args.plot:
        plot(rows, base_error, args.plot, args.precision)
    print("\nbytes after each step at %g%% removed, precision %g:" % (100 * args.choose,
                                                                     args.precision))
    for name, size in contributions(network, mus, sigmas, ranking, args.choose, args.precision):
        print("  %-55s %8d" % (name, size))
    if args.file:
        model = compressed.read(args.file)
        print("\nthe file %s: network %s, %d multiply-adds an image against the run's %d" % (
            args.file, model.header["network"], model.network.multiply_adds(),
            network.multiply_adds()))
    else:
        model = compress_parameters(network, mus, sigmas, ranking, args.choose, args.precision,
                                    args.sigma_bits if sigmas is not None else 0)[0]
    dense_network, dense_mus = network.without_gates(mus)
    times = latency(model, dense_network, dense_mus, data.test_images)
    print("\nlatency (median, %d threads; MXNet dense: %s): one image NumPy %.3f ms, MXNet "
          "dense %.3f ms (MXNet/NumPy = %.2f); 1,000 images NumPy %.1f ms, MXNet dense %.1f ms "
          "(MXNet/NumPy = %.2f)" % (
              int(os.environ.get("OMP_NUM_THREADS", "0")), dense_network,
              1e3 * times["numpy", 1],
              1e3 * times["mxnet", 1], times["mxnet", 1] / times["numpy", 1],
              1e3 * times["numpy", 1000], 1e3 * times["mxnet", 1000],
              times["mxnet", 1000] / times["numpy", 1000]))
    print("  NumPy, each convolution and max pooling computed apart (compressed."
          "SeparateOperators): 1,000 images %.1f ms (apart/one product = %.2f)" % (
              1e3 * times["numpy apart", 1000], times["numpy apart", 1000] / times["numpy", 1000]))
    if ("kernel", 1000) in times:
        print("  MXNet dense with each convolution and max pooling on the package's C kernel "
              "(net's default): 1,000 images %.1f ms (kernel/NumPy = %.2f)" % (
                  1e3 * times["kernel", 1000], times["kernel", 1000] / times["numpy", 1000]))
    rng = np.random.default_rng(0)
    for description in args.narrower:
        narrower = parse_network(description, config.num_inputs, config.num_outputs)
        weights = [(0.05 * rng.standard_normal(shape)).astype(np.float32)
                   for shape in narrower.param_shapes()]
        narrow_model = compressed.CompressedModel({"classes": config.num_outputs}, narrower,
                                                  weights, None, None)
        times = latency(narrow_model, dense_network, dense_mus, data.test_images)
        print("  NumPy, %s (%.1f%% of the dense multiply-adds): one image %.3f ms (MXNet/NumPy "
              "= %.2f); 1,000 images %.1f ms (MXNet/NumPy = %.2f)" % (
                  description, 100 * narrower.multiply_adds() / dense_network.multiply_adds(),
                  1e3 * times["numpy", 1], times["mxnet", 1] / times["numpy", 1],
                  1e3 * times["numpy", 1000], times["mxnet", 1000] / times["numpy", 1000]))
    if sigmas is not None and model.sigmas is not None:
        print("\nuncertainty, %d draws (compressed: %s):" % (
            args.samples, args.file or "%g%% removed, precision %g, %d-bit sigmas" % (
                100 * args.choose, args.precision, args.sigma_bits)))
        for name, row in uncertainty(model, network, mus, sigmas, test, args.samples,
                                     ood).items():
            print("  %-15s %s" % (name, "  ".join("%s %.4f" % item for item in row.items())))


if __name__ == "__main__":
    # bad input (a missing data directory, a run that is not one) as one line and status 2
    from gluon_bbb.commands.cli import run_main
    sys.exit(run_main(lambda argv: main()))

#!/usr/bin/env python3
"""Prune a trained run by signal-to-noise ratio and tabulate test accuracy (paper Table 2).

    python prune.py --checkpoint runs/default
    python prune.py --checkpoint runs/default --proportions 0 0.5 0.95 --save-pruned 0.95
"""
import os
import sys
import time

import gluon_bbb

# before anything loads MXNet: a CUDA build without its libraries is one line
gluon_bbb.exit_unless_mxnet_loads(os.path.basename(sys.argv[0]))
from gluon_bbb import load_mnist, parse_context
from gluon_bbb.cli import ArgumentParser, run_main
from gluon_bbb.files import write_json
from gluon_bbb.model import prediction_sigmas
from gluon_bbb.plots import plot_pruning, plot_snr
from gluon_bbb.prune import (DEFAULT_PROPORTIONS, check_proportion, dense_size, prune_weights,
                             pruning_table, save_pruned, snr_ranks, snr_thresholds_db)
from gluon_bbb.rundir import RunDirectory, report_prefix, resolve_checkpoint

# How each kind of run is ranked: a deterministic MLP has no sigma, so its ranking by
# |mu| / sigma with sigma fixed is magnitude pruning, and is labelled so.
CRITERIA = {"bbb": ("snr", "signal-to-noise ratio |mu|/sigma"),
            "mcdropout": ("magnitude", "magnitude |w| (Monte Carlo dropout has no sigma)"),
            "mlp": ("magnitude", "magnitude |w| (a deterministic MLP has no sigma)")}


def build_parser():
    parser = ArgumentParser(description="Signal-to-noise pruning of a Bayes-by-Backprop run.")
    parser.add_argument("--checkpoint", required=True,
                        help="run directory written by train_mnist.py (pruned at its last "
                        "epoch), or its best.params (the best validation epoch)")
    parser.add_argument("--data-dir", help="directory with the MNIST IDX files (default: the "
                        "one the run was trained on, else $GLUON_BBB_DATA, else "
                        "~/.mxnet/datasets/mnist)")
    parser.add_argument("--proportions", type=float, nargs="+", default=list(DEFAULT_PROPORTIONS),
                        metavar="P", help="proportions of parameters to remove, each in [0, 1] "
                        "(default: %s)" % " ".join("%g" % p for p in DEFAULT_PROPORTIONS))
    parser.add_argument("--out", help="where to write pruning.json and the plots "
                        "(default: the run directory)")
    parser.add_argument("--ctx", default="cpu", help="device to evaluate on: cpu, gpu or "
                        "gpu:N (default: cpu)")
    parser.add_argument("--save-pruned", type=float, metavar="P",
                        help="also write the mean weights pruned at proportion P, sparse")
    return parser


def markdown_table(rows, criterion):
    lines = ["| removed by %s | weights remaining | test accuracy | test error |" % criterion,
             "|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %g%% | %d | %.2f%% | %.2f%% |" % (
            r["proportion"] * 100, r["weights_remaining"], r["test_accuracy"] * 100,
            r["test_error"] * 100))
    return "\n".join(lines)


def main(argv=None):
    args = build_parser().parse_args(argv)
    for p in args.proportions:
        check_proportion(p)
    if args.save_pruned is not None:
        check_proportion(args.save_pruned, "save_pruned")
    run, checkpoint_path = resolve_checkpoint(args.checkpoint)
    config = run.read_classifier_config()
    ctx = parse_context(args.ctx)
    state = run.load_parameters(config, ctx, checkpoint_path)
    data = load_mnist(args.data_dir or run.recorded_data_dir())
    out = RunDirectory(args.out).create() if args.out else run
    with out.locked():
        return prune_and_report(args, config, state, data, out, checkpoint_path)


def prune_and_report(args, config, state, data, out, checkpoint_path):
    """Write the pruning table's files into ``out`` (a locked ``RunDirectory``), their names
    starting with the checkpoint's ``report_prefix``, then print the table. The files come
    first: a reader that stops early (``| head``) loses none of them."""
    criterion, criterion_words = CRITERIA[config.model]
    mus = state["mus"]
    # a run without a weight distribution ranks by |mu| alone (its rhos are their initial
    # constant)
    sigmas = (prediction_sigmas(config.model, state["rhos"])
              or [mu.ones_like() for mu in mus])
    started = time.time()
    rows = pruning_table(mus, sigmas, args.proportions, data.test_images, data.test_labels,
                         config.build_network())
    seconds = time.time() - started
    prefix = report_prefix(checkpoint_path)
    names = [prefix + name for name in ("pruning.json", "pruning.png", "snr.png")]
    write_json(out.file(names[0]), {
        "checkpoint": os.path.abspath(checkpoint_path), "epoch": state["epoch"],
        "model": config.model, "criterion": criterion, "data_dir": data.directory,
        "rows": rows})
    plot_pruning(rows, out.file(names[1]), criterion_words)
    snr_db, cuts = snr_thresholds_db(mus, sigmas, args.proportions)
    plot_snr(snr_db, cuts, out.file(names[2]), criterion_words)
    if args.save_pruned is not None:
        pruned = prune_weights(mus, sigmas, args.save_pruned, ranks=snr_ranks(mus, sigmas))
        sparse_path = out.file("%spruned-%g.params" % (prefix, args.save_pruned))
        sparse_bytes = save_pruned(sparse_path, pruned)
        names.append(os.path.basename(sparse_path))

    print(markdown_table(rows, criterion))
    print("\n%s at epoch %d: %d parameters, %d proportions, %.1f s" % (
        checkpoint_path, state["epoch"], sum(m.size for m in mus), len(rows), seconds))
    if args.save_pruned is not None:
        dense_bytes = dense_size(mus)
        print("pruned at %g: %s is %d bytes, the dense mean weights in nd.save format %d bytes "
              "(%.1f%%)" % (args.save_pruned, sparse_path, sparse_bytes, dense_bytes,
                            100.0 * sparse_bytes / dense_bytes))
    print("wrote %s to %s" % (", ".join(names), out.path))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))

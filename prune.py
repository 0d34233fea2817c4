#!/usr/bin/env python3
"""Prune a trained run by signal-to-noise ratio and tabulate test accuracy (paper Table 2).

    python prune.py --checkpoint runs/default
    python prune.py --checkpoint runs/default --proportions 0 0.5 0.95 --save-pruned 0.95
"""
import os
import sys
import tempfile
import time

try:
    import gluon_bbb  # noqa: F401  (loads MXNet: a CUDA build without its libraries fails here)
except ImportError as exc:
    sys.stderr.write("%s: error: %s\n" % (os.path.basename(sys.argv[0]), exc))
    sys.exit(2)
from mxnet import nd

from gluon_bbb import load_checkpoint, load_mnist, load_run_config, parse_context
from gluon_bbb.checkpoint import report_prefix, resolve_checkpoint, write_json
from gluon_bbb.cli import ArgumentParser, run_main
from gluon_bbb.model import transform_rhos
from gluon_bbb.plots import plot_pruning, plot_snr
from gluon_bbb.prune import (DEFAULT_PROPORTIONS, check_proportion, prune_weights, pruning_table,
                             save_pruned, snr_ranks, snr_thresholds_db)
from gluon_bbb.rundir import check_output_dir, locked
from gluon_bbb.train import check_shapes


def build_parser():
    parser = ArgumentParser(description="Signal-to-noise pruning of a Bayes-by-Backprop run.")
    parser.add_argument("--checkpoint", required=True,
                        help="run directory written by train_mnist.py (pruned at its last "
                        "epoch), or its best.params (the best validation epoch)")
    parser.add_argument("--data-dir", help="directory with the MNIST IDX files")
    parser.add_argument("--proportions", type=float, nargs="+", default=list(DEFAULT_PROPORTIONS),
                        metavar="P", help="proportions of parameters to remove, each in [0, 1] "
                        "(default: %s)" % " ".join("%g" % p for p in DEFAULT_PROPORTIONS))
    parser.add_argument("--out", help="where to write pruning.json and the plots "
                        "(default: the run directory)")
    parser.add_argument("--ctx", default="cpu", help="cpu, gpu or gpu:N (default: cpu)")
    parser.add_argument("--save-pruned", type=float, metavar="P",
                        help="also write the mean weights pruned at proportion P, sparse")
    return parser


def markdown_table(rows):
    lines = ["| removed | weights remaining | test accuracy | test error |",
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
    run_dir, checkpoint_path = resolve_checkpoint(args.checkpoint)
    config = load_run_config(run_dir)
    ctx = parse_context(args.ctx)
    state = load_checkpoint(checkpoint_path, ctx)
    check_shapes(state["mus"], config.layer_shapes(), checkpoint_path)
    check_shapes(state["rhos"], config.layer_shapes(), checkpoint_path)
    out_dir = check_output_dir(args.out or run_dir)
    data = load_mnist(args.data_dir)
    with locked(out_dir):
        return prune_and_report(args, state, data, out_dir, report_prefix(checkpoint_path))


def prune_and_report(args, state, data, out_dir, prefix):
    """Write the pruning table's files, their names starting with ``prefix``, into ``out_dir``
    (locked by the caller), then print the table. The files come first: a reader that stops
    early (``| head``) loses none of them."""
    mus, sigmas = state["mus"], transform_rhos(state["rhos"])
    started = time.time()
    rows = pruning_table(mus, sigmas, args.proportions, data.test_images, data.test_labels)
    seconds = time.time() - started
    names = [prefix + name for name in ("pruning.json", "pruning.png", "snr.png")]
    write_json(os.path.join(out_dir, names[0]), rows)
    plot_pruning(rows, os.path.join(out_dir, names[1]))
    snr_db, cuts = snr_thresholds_db(mus, sigmas, args.proportions)
    plot_snr(snr_db, cuts, os.path.join(out_dir, names[2]))
    if args.save_pruned is not None:
        pruned = prune_weights(mus, sigmas, args.save_pruned, ranks=snr_ranks(mus, sigmas))
        sparse_path = os.path.join(out_dir, "%spruned-%g.params" % (prefix, args.save_pruned))
        sparse_bytes = save_pruned(sparse_path, pruned)
        with tempfile.TemporaryDirectory() as tmp:
            dense_path = os.path.join(tmp, "dense.params")
            nd.save(dense_path, {"mu:%d" % i: m for i, m in enumerate(mus)})
            dense_bytes = os.path.getsize(dense_path)

    print(markdown_table(rows))
    print("\n%d parameters, %d proportions, %.1f s" % (
        sum(m.size for m in mus), len(rows), seconds))
    if args.save_pruned is not None:
        print("pruned at %g: %s is %d bytes, the dense mean weights in nd.save format %d bytes "
              "(%.1f%%)" % (args.save_pruned, sparse_path, sparse_bytes, dense_bytes,
                            100.0 * sparse_bytes / dense_bytes))
    print("wrote %s to %s" % (", ".join(names), out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))

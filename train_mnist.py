#!/usr/bin/env python3
"""Train a Bayes-by-Backprop MLP on MNIST. A thin command-line wrapper over gluon_bbb.train.

    python train_mnist.py --ctx cpu --epochs 10 --out runs/default
    python train_mnist.py --out runs/default --epochs 20 --resume    # train 10 more epochs
"""
import dataclasses
import os
import sys
import time

try:
    import gluon_bbb  # noqa: F401  (loads MXNet: a CUDA build without its libraries fails here)
except ImportError as exc:
    sys.stderr.write("%s: error: %s\n" % (os.path.basename(sys.argv[0]), exc))
    sys.exit(2)
from gluon_bbb import Config, load_mnist, load_run_config, parse_context, train
from gluon_bbb.checkpoint import BEST_CHECKPOINT_FILE
from gluon_bbb.cli import ArgumentParser, flag_for, run_main
from gluon_bbb.config import PRESETS
from gluon_bbb.errors import CheckpointError, ConfigError
from gluon_bbb.evaluate import evaluate_run, load_ood_images
from gluon_bbb.plots import plot_accuracy, plot_weights
from gluon_bbb.rundir import check_output_dir, locked
from gluon_bbb.train import CONFIG_FILE, best_validation_epoch

# Config fields set from the flag of the same name (--batch-size -> batch_size).
CONFIG_FLAGS = {
    "epochs": int, "batch_size": int, "num_hidden_layers": int, "num_hidden_units": int,
    "learning_rate": float, "lr_decay_every": int, "lr_decay_factor": float,
    "num_samples": int, "sigma_p": float, "pi": float,
    "sigma_p1": float, "sigma_p2": float, "mu_scale": float, "rho_offset": float,
    "kl_scale": float,
    "train_size": int, "validation": int, "seed": int,
}
CHOICE_FLAGS = {"optimizer": ("sgd", "adam"), "prior": ("gaussian", "scale-mixture"),
                "kl_weighting": ("uniform", "blundell"), "estimator": ("sample", "lrt"),
                "kl": ("mc", "analytic"), "model": ("bbb", "mlp")}


def build_parser():
    defaults = Config()
    parser = ArgumentParser(description="Bayes by Backprop on MNIST (Blundell et al. 2015).")
    parser.add_argument("--data-dir", help="directory with the four MNIST IDX files "
                        "(default: $GLUON_BBB_DATA, else ~/.mxnet/datasets/mnist, else download)")
    parser.add_argument("--out", help="run directory (default: runs/<timestamp>)")
    parser.add_argument("--ctx", default="cpu", help="cpu, gpu or gpu:N (default: cpu)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its last checkpoint")
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="start from the paper's architecture and prior (flags override)")
    parser.add_argument("--eval-train", action="store_true",
                        help="also measure training-set accuracy after every epoch")
    parser.add_argument("--test-samples", type=int, default=10,
                        help="weight samples for the uncertainty report after training "
                        "(default 10; 0 skips the report)")
    parser.add_argument("--ood-data-dir", help="another MNIST-format dataset's test images "
                        "for the out-of-distribution part of the report")
    parser.add_argument("--backend", choices=("native", "ndarray"),
                        help="native: the C kernels (CPU, weight sampling); ndarray: MXNet "
                        "operators (any context, any estimator); default: native where it "
                        "serves")
    for field, kind in CONFIG_FLAGS.items():
        parser.add_argument(flag_for(field), type=kind, metavar=field.upper(),
                            help="default: %s" % getattr(defaults, field))
    for field, choices in CHOICE_FLAGS.items():
        parser.add_argument(flag_for(field), choices=choices,
                            help="default: %s" % getattr(defaults, field).replace("_", "-"))
    return parser


def config_from_args(args):
    """The run's Config: the flags given, over the resumed run's config or the defaults."""
    base = Config(**PRESETS[args.preset]) if args.preset else Config()
    if args.resume:
        if not os.path.isfile(os.path.join(args.out, CONFIG_FILE)):
            raise CheckpointError("cannot resume: %s holds no run (no %s)" % (args.out, CONFIG_FILE))
        base = load_run_config(args.out)
    given = {field: getattr(args, field) for field in list(CONFIG_FLAGS) + list(CHOICE_FLAGS)
             if getattr(args, field) is not None}
    return Config(**dict(dataclasses.asdict(base), **given))


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.resume and not args.out:
        raise CheckpointError("--resume needs --out RUN_DIR naming the run to continue")
    config = config_from_args(args)
    if args.test_samples < 0:
        raise ConfigError("test_samples", args.test_samples, "an integer >= 0")
    ctx = parse_context(args.ctx)
    out_dir = check_output_dir(args.out or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S")))
    data = load_mnist(args.data_dir)
    ood_images = load_ood_images(args.ood_data_dir) if args.ood_data_dir else None
    with locked(out_dir):
        return train_and_report(args, config, ctx, out_dir, data, ood_images)


def train_and_report(args, config, ctx, out_dir, data, ood_images):
    """Train into ``out_dir`` (locked by the caller), then draw the plots and the uncertainty
    report there."""
    print("training on %s, writing to %s" % (ctx, out_dir), flush=True)
    result = train(config, data, ctx, out_dir=out_dir, resume=args.resume,
                   eval_train=args.eval_train, log=lambda line: print(line, flush=True),
                   backend=args.backend)
    plot_accuracy(result.history, os.path.join(out_dir, "accuracy.png"))
    plot_weights(result.mus, result.sigmas, os.path.join(out_dir, "weights.png"))
    if args.test_samples > 0:
        report = evaluate_run(out_dir, data, ctx, args.test_samples, ood_images)
        print("uncertainty: test accuracy %.4f with %d samples, ECE %.4f, mean entropy %.3f "
              "bits on MNIST and %.3f on noise" % (
                  report["in_distribution"]["accuracy"], report["test_samples"],
                  report["in_distribution"]["ece"], report["in_distribution"]["mean_entropy"],
                  report["noise"]["mean_entropy"]))
    best = best_validation_epoch(result.history)
    if best is not None:
        print("best validation accuracy %.4f at epoch %d (test accuracy %.4f), kept in %s" % (
            best["validation_accuracy"], best["epoch"], best["test_accuracy"],
            BEST_CHECKPOINT_FILE))
    print("final test accuracy %.4f; wrote %s" % (result.history[-1]["test_accuracy"], out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))

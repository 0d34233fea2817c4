"""The command ``python -m gluon_bbb.compress RUN --out FILE`` (``gluon-bbb compress``): a
trained run as one compact file that a NumPy-only program predicts with (``compression.py``
writes it, ``compressed.py`` reads it).

    python -m gluon_bbb.compress runs/lenet --proportion 0.95 --out lenet.gbbb
    python -m gluon_bbb.compress runs/paper-2x400 --max-error-increase 0.2 --sigma-bits 4 \\
        --out mlp.gbbb

``--max-error-increase E`` chooses the largest proportion (of ``compression.SEARCH_PROPORTIONS``)
whose compressed mean network's validation error is within E percentage points of the unpruned
mean network's: the run must hold out validation images (the presets hold out 10,000).
"""
import os
import sys

from .cli import ArgumentParser, load_mxnet, run_command

PROG = "python -m gluon_bbb.compress"


def build_parser(prog=PROG):
    parser = ArgumentParser(prog=prog, description="Prune, narrow and quantize a trained run "
                            "into one file that a NumPy-only predictor reads.")
    parser.add_argument("run", help="run directory (its last epoch), or a parameter file in one "
                        "(best.params)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--proportion", type=float, help="share of all parameters removed by "
                     "signal-to-noise ratio, in [0, 1) (default 0.95)")
    how.add_argument("--max-error-increase", type=float, metavar="E",
                     help="choose the largest proportion whose validation error stays within E "
                     "percentage points of the unpruned mean network's")
    parser.add_argument("--precision", type=float, default=1.0,
                        help="quantization step of each array's means, in units of its kept "
                        "entries' median sigma (default 1: no finer than the posterior's own "
                        "uncertainty; 0 keeps float32)")
    parser.add_argument("--sigma-bits", type=int, default=0,
                        help="keep each kept weight's sigma in this many bits, 1 to 8, for a "
                        "Monte Carlo predictive with uncertainty (default 0: means only)")
    parser.add_argument("--samples", type=int, default=10,
                        help="draws of the Monte Carlo predictive the file's unsure threshold "
                        "is calibrated with, where it keeps sigmas (default 10)")
    parser.add_argument("--data-dir", help="directory with the MNIST IDX files (default: the "
                        "one the run was trained on)")
    parser.add_argument("--out", required=True, help="the file to write")
    return parser


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    import numpy as np
    from .compression import (SEARCH_PROPORTIONS, calibrate_unsure, check_precision,
                              compress_parameters, error_rate, run_parameters, write_model)
    from .compressed import NumPyOperators, softmax
    from .config import check_proportion
    from .data import load_mnist
    from .errors import ConfigError
    from .rundir import check_output_dir, resolve_checkpoint
    check_precision(args.precision, args.sigma_bits)
    if args.proportion is not None:
        check_proportion(args.proportion, "proportion")
        if args.proportion == 1.0:
            raise ConfigError("proportion", 1.0, "below 1 (a network with no weights left)")
    if args.max_error_increase is not None and not args.max_error_increase >= 0:
        raise ConfigError("max_error_increase", args.max_error_increase, "a number >= 0")
    if not 1 <= args.samples <= 1000:
        raise ConfigError("samples", args.samples, "an integer in [1, 1000]")
    check_output_dir(os.path.dirname(os.path.abspath(args.out)), "out")
    if os.path.isdir(args.out):
        raise ConfigError("out", args.out, "a file's path, not a directory")
    run, checkpoint_path = resolve_checkpoint(args.run)
    load_mxnet()
    config, network, mus, sigmas, ranking, state = run_parameters(run, checkpoint_path)
    if args.sigma_bits and sigmas is None:
        raise ConfigError("sigma_bits", args.sigma_bits, "0 for a %s run (it learns no sigmas)"
                          % config.model)
    data = load_mnist(args.data_dir or run.recorded_data_dir())
    if config.validation:
        calibration = data.train_images[-config.validation:], data.train_labels[-config.validation:]
        where = "the run's %d validation images" % config.validation
    else:
        if args.max_error_increase is not None:
            raise ConfigError("max_error_increase", args.max_error_increase,
                              "given only for a run that holds out validation images (this one "
                              "trained on all its images; give --proportion)")
        calibration = data.test_images, data.test_labels
        where = "the %d test images (the run holds out no validation images)" % len(
            data.test_labels)
    compress = lambda p: compress_parameters(  # noqa: E731
        network, mus, sigmas, ranking, p, args.precision, args.sigma_bits, config.num_outputs)
    X_val, y_val = calibration
    if args.max_error_increase is None:
        proportion = 0.95 if args.proportion is None else args.proportion
        model, header, blobs, report = compress(proportion)
    else:
        dense_error = float(np.mean(np.concatenate([
            softmax(network.without_dropout()(X_val[i:i + 1000], mus, F=NumPyOperators))
            for i in range(0, len(y_val), 1000)]).argmax(axis=1) != y_val))
        model, header, blobs, report = compress(0.0)
        for proportion in SEARCH_PROPORTIONS:
            candidate = compress(proportion)
            error = error_rate(candidate[0], X_val, y_val)
            print("proportion %g: validation error %.2f%% (unpruned %.2f%%)" % (
                proportion, 100 * error, 100 * dense_error), flush=True)
            if error <= dense_error + args.max_error_increase / 100.0:
                model, header, blobs, report = candidate
        report["search"] = {"max_error_increase": args.max_error_increase,
                            "unpruned_validation_error": dense_error}
    samples = args.samples if model.sigmas is not None else 0
    header["unsure_entropy_bits"] = calibrate_unsure(model, X_val, samples)
    header["predictive_samples"] = samples
    report["validation_error" if config.validation else "test_error"] = error_rate(
        model, X_val, y_val)
    header["source"] = dict(report, run=os.path.abspath(run.path),
                            checkpoint=os.path.abspath(checkpoint_path), epoch=state["epoch"],
                            model=config.model, unsure_calibrated_on=where)
    size = write_model(args.out, header, blobs)
    dense_bytes = 4 * report["parameters"]
    print("pruned %g of %d parameters, %d kept; network %s" % (
        report["proportion"], report["parameters"], report["kept_after_structure"],
        report["network"]))
    print("%s: %d bytes, %.1f times smaller than the float32 means (%d bytes); %s error %.2f%%; "
          "unsure above %.3f bits (%s)" % (
              args.out, size, dense_bytes / size, dense_bytes,
              "validation" if config.validation else "test",
              100 * report["validation_error" if config.validation else "test_error"],
              header["unsure_entropy_bits"], where))
    return 0


def run(argv=None, prog=PROG):
    """The command as a program: its exit status."""
    return run_command(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())

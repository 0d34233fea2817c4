"""The command ``gluon-bbb compress RUN --out FILE``: a
trained run as one compact file that a NumPy-only program predicts with (``shipping/writer.py``
writes it, ``shipping/model_file.py`` reads it)."""
import os
import sys

from .cli import (ArgumentParser, add_import_flag, add_json_flag, import_modules, load_mxnet,
                  print_json, run_main, say_for)

PROG = "gluon-bbb compress"
# the error a compress without --proportion may add, in percentage points: on validation
# images, and half as much on training images, which the network has fitted
DEFAULT_MAX_ERROR_INCREASE = 0.5
DEFAULT_MAX_ERROR_INCREASE_ON_TRAINING_IMAGES = 0.25
# how many of its training images measure it where a run holds out none
SELECTION_TRAINING_IMAGES = 10000


def build_parser(prog=PROG):
    parser = ArgumentParser(prog=prog, description="Prune, narrow and quantize a trained run "
                            "into one file that a NumPy-only predictor reads.")
    parser.add_run_argument("run directory (its last epoch), or a parameter file in one "
                            "(best.params)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--proportion", type=float, help="share of all parameters removed by "
                     "signal-to-noise ratio, in [0, 1) (default: chosen as "
                     "--max-error-increase says)")
    how.add_argument("--max-error-increase", type=float, metavar="E",
                     help="choose the largest proportion whose error stays within E percentage "
                     "points of the unpruned mean network's, on the run's validation images "
                     "(default 0.5), or on 10,000 of its training images where it holds out "
                     "none (default 0.25)")
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
    parser.add_argument("--out", required=True, help="the file to write")
    add_json_flag(parser)
    add_import_flag(parser)
    return parser


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    import_modules(args.import_modules)
    from .. import outputs
    from ..shipping.writer import check_precision
    from ..errors import check_proportion
    from ..errors import ConfigError
    from ..learning.rundir import resolve_checkpoint
    check_precision(args.precision, args.sigma_bits)
    if args.proportion is not None:
        check_proportion(args.proportion, "proportion")
        if args.proportion == 1.0:
            raise ConfigError("proportion", 1.0, "below 1 (a network with no weights left)")
    if args.max_error_increase is not None and not (
            0 <= args.max_error_increase <= 100):
        raise ConfigError("max_error_increase", args.max_error_increase,
                          "a number of percentage points from 0 to 100")
    if not 1 <= args.samples <= 1000:
        raise ConfigError("samples", args.samples, "an integer in [1, 1000]")
    run, checkpoint_path = resolve_checkpoint(args.run)
    # the file is claimed before any work: checked as outputs.py rules and locked
    with outputs.claim_file(args.out, outputs.COMPRESSED, "out", run.files() + [checkpoint_path],
                            own_runs=[run.path]):
        return compress_run(args, run, checkpoint_path)


def compress_run(args, run, checkpoint_path):
    """Compress the run as ``args`` say into ``args.out`` (claimed by the caller)."""
    say = say_for(args.json)
    import numpy as np
    from ..shipping.writer import (calibrate_unsure, compress_parameters, error_rate,
                                   run_parameters, write_model)
    from ..shipping.model_file import UNSURE_PROBABILITY, NumPyOperators, softmax
    from ..data import idx_paths
    from ..errors import ConfigError
    from ..outputs import check_not_an_input
    load_mxnet()
    config, network, mus, sigmas, ranking, state = run_parameters(run, checkpoint_path)
    if args.sigma_bits and sigmas is None:
        raise ConfigError("sigma_bits", args.sigma_bits, "0 for a %s run (it learns no sigmas)"
                          % config.model)
    data = run.load_data(args.data_dir)
    check_not_an_input(args.out, idx_paths(data.directory) if data.directory else [])
    X_sel, y_sel, where = selection_images(config, data)
    compress = lambda p: compress_parameters(  # noqa: E731
        network, mus, sigmas, ranking, p, args.precision, args.sigma_bits, config.num_outputs)
    dense_error = float(np.mean(np.concatenate([
        softmax(network.without_dropout()(X_sel[i:i + 1000], mus, F=NumPyOperators))
        for i in range(0, len(y_sel), 1000)]).argmax(axis=1) != y_sel))
    limit = args.max_error_increase
    if limit is None:
        limit = (DEFAULT_MAX_ERROR_INCREASE if config.validation
                 else DEFAULT_MAX_ERROR_INCREASE_ON_TRAINING_IMAGES)
    if args.proportion is not None:
        model, header, blobs, report = compress(args.proportion)
    else:
        model, header, blobs, report = _search(compress, config, state, (X_sel, y_sel, where),
                                               dense_error, limit, say)
    samples = args.samples if model.sigmas is not None else 0
    header["unsure_entropy_bits"] = calibrate_unsure(model, X_sel, samples)
    header["unsure_probability"] = UNSURE_PROBABILITY
    header["predictive_samples"] = samples
    error = error_rate(model, X_sel, y_sel)
    report.update(error=error, unpruned_error=dense_error, error_measured_on=where)
    header["source"] = dict(report, run=os.path.abspath(run.path),
                            checkpoint=os.path.abspath(checkpoint_path), epoch=state["epoch"],
                            model=config.model, unsure_calibrated_on=where)
    size = write_model(args.out, header, blobs)
    _say_written(args, say, config, header, report, size, limit)
    return 0


def _search(compress, config, state, selection, dense_error, limit, say):
    """What ``compress(proportion)`` gives (``(model, header, blobs, report)``) for the largest
    proportion of ``writer.SEARCH_PROPORTIONS``, and of the prior's own rule where it prunes as
    it trains, whose error on the ``selection`` images (``(images, labels, where)``) is within
    ``limit`` percentage points of the unpruned network's ``dense_error``; nothing pruned where
    none is."""
    from ..shipping.writer import SEARCH_PROPORTIONS, error_rate
    from ..analysis.snr import prior_rule_proportion
    images, labels, where = selection
    say("choosing the proportion on %s:" % where)
    say("  the largest whose error is within %g percentage points of the unpruned mean "
        "network's %.2f%%" % (limit, 100 * dense_error))
    chosen = compress(0.0)
    rule = prior_rule_proportion(config, state)
    if rule is not None:
        say("the %s prior has switched off %.4g of the parameters while training" % (
            config.prior.replace("_", "-"), rule))
    for proportion in sorted(set(SEARCH_PROPORTIONS) | ({rule} if rule is not None else set())):
        candidate = compress(proportion)
        error = error_rate(candidate[0], images, labels)
        say("proportion %g: error %.2f%%" % (proportion, 100 * error))
        if error <= dense_error + limit / 100.0:
            chosen = candidate
    chosen[3]["search"] = {"max_error_increase": limit, "unpruned_error": dense_error,
                           "on": where}
    return chosen


def _say_written(args, say, config, header, report, size, limit):
    """The lines (or, with ``--json``, the JSON) of a compressed model written: what was
    pruned, the network left, the file's size, its error and unsure rule, and a warning where
    the error grew by more than ``limit`` percentage points."""
    from ..shipping.model_file import UNSURE_PROBABILITY
    dense_bytes = 4 * report["parameters"]
    error, dense_error, where = (report[key] for key in (
        "error", "unpruned_error", "error_measured_on"))
    if args.json:
        print_json(dict(header["source"], file=os.path.abspath(args.out), bytes=size,
                        float32_bytes=dense_bytes,
                        unsure_entropy_bits=header["unsure_entropy_bits"],
                        unsure_probability=UNSURE_PROBABILITY))
    say("pruned %g of %d parameters by %s, %d kept" % (
        report["proportion"], report["parameters"], config.model_kind.pruning_criterion[1],
        report["kept_after_structure"]))
    say("network %s: %d multiply-adds an image (%.1f%% of the unpruned network's %d)" % (
        report["network"], report["multiply_adds_after"],
        100.0 * report["multiply_adds_after"] / report["multiply_adds_before"],
        report["multiply_adds_before"]))
    say("wrote %s: %d bytes, %.1f times smaller than the float32 means (%d bytes)" % (
        args.out, size, dense_bytes / size, dense_bytes))
    say("error %.2f%% on %s (unpruned %.2f%%)" % (100 * error, where, 100 * dense_error))
    say("unsure above %.3f bits of predictive entropy or below probability %g" % (
        header["unsure_entropy_bits"], UNSURE_PROBABILITY))
    if error > dense_error + limit / 100.0:
        what = ("--proportion %g" % args.proportion if args.proportion is not None else
                "no proportion is within it: with nothing pruned, --precision %g" % args.precision)
        say("warning: %s costs %.2f percentage points on %s," % (
            what, 100 * (error - dense_error), where))
        say("  more than the %g a compress without --proportion allows%s" % (
            limit, "" if args.proportion is not None else
            " (a smaller --precision costs less; 0 keeps float32 means)"))


def selection_images(config, data):
    """``(images, labels, where)``: what chooses the proportion and calibrates the unsure
    threshold: the run's validation images, or where it holds none, the last
    ``SELECTION_TRAINING_IMAGES`` of the images it trained on (never the test images)."""
    from ..learning.loop import split_data
    train_images, train_labels, val_images, val_labels = split_data(config, data)
    if config.validation:
        return val_images, val_labels, "the run's %d validation images" % len(val_labels)
    count = min(SELECTION_TRAINING_IMAGES, len(train_labels))
    return (train_images[-count:], train_labels[-count:],
            "%d of its training images (it holds out no validation images)" % count)


def run(argv=None, prog=PROG):
    """The command as a program: its exit status."""
    return run_main(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())

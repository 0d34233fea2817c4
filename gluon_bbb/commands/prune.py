"""The command ``gluon-bbb prune`` (``prune.py`` in a checkout):
prune a trained run by signal-to-noise ratio and tabulate its test accuracy (the paper's Table
2), with ``analysis/snr.py``."""
import os
import sys
import time

from .cli import (ArgumentParser, add_import_flag, add_json_flag, import_modules, load_run,
                  print_json, report_directory, run_main, say_for)

PROG = "gluon-bbb prune"
DEFAULT_PROPORTIONS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.95, 0.98, 0.99, 1.0)


def build_parser(prog=PROG):
    parser = ArgumentParser(prog=prog,
                            description="Signal-to-noise pruning of a Bayes-by-Backprop run.")
    parser.add_run_argument("run directory of a training run (pruned at its last epoch), or "
                            "its best.params (the best validation epoch)")
    parser.add_argument("--proportions", type=float, nargs="+", default=list(DEFAULT_PROPORTIONS),
                        metavar="P", help="proportions of parameters to remove, each in [0, 1] "
                        "(default: %s)" % " ".join("%g" % p for p in DEFAULT_PROPORTIONS))
    parser.add_argument("--out", help="where to write pruning.json and the plots "
                        "(default: the run directory)")
    parser.add_argument("--ctx", default="cpu", help="device to evaluate on: cpu, gpu or "
                        "gpu:N (default: cpu)")
    parser.add_argument("--save-pruned", type=float, metavar="P",
                        help="also write the mean weights pruned at proportion P, sparse")
    add_json_flag(parser)
    add_import_flag(parser)
    return parser


def markdown_table(rows, criterion):
    lines = ["| removed by %s | weights remaining | test accuracy | test error |" % criterion,
             "|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %g%% | %d | %.2f%% | %.2f%% |" % (
            r["proportion"] * 100, r["weights_remaining"], r["test_accuracy"] * 100,
            r["test_error"] * 100))
    return "\n".join(lines)


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    import_modules(args.import_modules)
    from ..errors import check_proportion
    for p in args.proportions:
        check_proportion(p)
    if args.save_pruned is not None:
        check_proportion(args.save_pruned, "save_pruned")
    run, checkpoint_path, config = load_run(args)
    from ..learning.context import parse_context
    out = report_directory(args, run, report_files(checkpoint_path, args.save_pruned))
    ctx = parse_context(args.ctx)
    state = run.load_parameters(config, ctx, checkpoint_path)
    data = run.load_data(args.data_dir)
    with out.locked():
        return prune_and_report(args, config, state, data, out, checkpoint_path)


def report_files(checkpoint_path, save_pruned=None):
    """``{name: outputs.FileKind}`` of the pruning report on ``checkpoint_path`` (prefixed as
    ``rundir.report_prefix`` says), with the pruned parameters at ``save_pruned``."""
    from .. import outputs
    from ..learning.rundir import report_prefix
    prefix = report_prefix(checkpoint_path)
    files = {prefix + "pruning.json": outputs.REPORT, prefix + "pruning.png": outputs.PNG,
             prefix + "snr.png": outputs.PNG}
    if save_pruned is not None:
        files[prefix + "pruned-%g.params" % save_pruned] = outputs.PARAMETERS
    return files


def prune_and_report(args, config, state, data, out, checkpoint_path):
    """Write the pruning table's files into ``out`` (a locked ``RunDirectory``), their names
    starting with the checkpoint's ``report_prefix``, then print the table."""
    from .. import outputs
    from ..plots import plot_pruning, plot_snr
    from ..analysis.snr import (dense_size, prior_rule_proportion, prune_weights, pruning_table,
                                  save_pruned, snr_ranks, snr_thresholds_db)
    from ..learning.rundir import report_prefix
    # a run without a weight distribution ranks by |mu| alone (its rhos are their initial
    # constant), and says so: magnitude pruning
    criterion, criterion_words = config.model_kind.pruning_criterion
    mus = state["mus"]
    sigmas = config.model_kind.ranking_sigmas(mus, state["rhos"], state["parametrization"])
    # a prior that prunes as it trains gives a proportion of its own: a row of the table too
    rule = prior_rule_proportion(config, state)
    proportions = sorted(set(args.proportions) | ({rule} if rule is not None else set()))
    started = time.time()
    rows = pruning_table(mus, sigmas, proportions, data.test_images, data.test_labels,
                         config.build_network())
    seconds = time.time() - started
    prefix = report_prefix(checkpoint_path)
    names = [prefix + name for name in ("pruning.json", "pruning.png", "snr.png")]
    report = {"checkpoint": os.path.abspath(checkpoint_path), "epoch": state["epoch"],
              "model": config.model, "criterion": criterion, "data_dir": data.directory,
              "prior_rule_proportion": rule, "rows": rows}
    outputs.write_json(out.file(names[0]), report, outputs.REPORT)
    plot_pruning(rows, out.file(names[1]), criterion_words)
    snr_db, cuts = snr_thresholds_db(mus, sigmas, proportions)
    plot_snr(snr_db, cuts, out.file(names[2]), criterion_words)
    if args.save_pruned is not None:
        pruned = prune_weights(mus, sigmas, args.save_pruned, ranks=snr_ranks(mus, sigmas))
        sparse_path = out.file("%spruned-%g.params" % (prefix, args.save_pruned))
        sparse_bytes = save_pruned(sparse_path, pruned)
        names.append(os.path.basename(sparse_path))

    say = say_for(args.json)
    if args.json:
        print_json(report)
    else:
        say(markdown_table(rows, criterion))
    if rule is not None:
        say("\nthe %s prior has switched off %.4g of the parameters while training (its row "
            "above)" % (config.prior.replace("_", "-"), rule))
    say("\n%s at epoch %d: %d parameters, %d proportions, %.1f s" % (
        checkpoint_path, state["epoch"], sum(m.size for m in mus), len(rows), seconds))
    if args.save_pruned is not None:
        dense_bytes = dense_size(mus)
        say("pruned at %g: %s is %d bytes, %.1f%% of the dense mean weights' %d (nd.save)" % (
            args.save_pruned, sparse_path, sparse_bytes, 100.0 * sparse_bytes / dense_bytes,
            dense_bytes))
    say("wrote %s to %s" % (", ".join(names), out.path))
    return 0


def run(argv=None, prog=PROG):
    """The command as a program: its exit status."""
    return run_main(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())

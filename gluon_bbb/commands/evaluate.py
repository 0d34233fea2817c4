"""The command ``gluon-bbb evaluate RUN_DIR``:
the uncertainty report of a trained run (``analysis/report.py``)."""
import os
import sys

from .cli import (ArgumentParser, add_import_flag, add_json_flag, import_modules, load_run,
                  print_json, report_directory, run_main, table)
from ..errors import MAX_PREDICTIVE_SAMPLES

PROG = "gluon-bbb evaluate"


def build_parser(prog=PROG):
    parser = ArgumentParser(prog=prog,
                            description="Uncertainty report (entropy, ECE, NLL, OOD AUROC).")
    parser.add_run_argument("run directory of a training run (its last epoch), or its "
                            "best.params (the best validation epoch)")
    parser.add_argument("--ood-data-dir", help="directory with another dataset's "
                        "t10k-images-idx3-ubyte[.gz] (e.g. Fashion-MNIST) for the "
                        "out-of-distribution part of the report")
    parser.add_argument("--test-samples", type=int,
                        help="draws of the Monte Carlo predictive, 1 to %d (default 10: weight "
                        "samples, or dropout masks for a --model mcdropout run; a --model "
                        "deterministic run takes 0, its weights)" % MAX_PREDICTIVE_SAMPLES)
    parser.add_argument("--out", help="output directory (default: the run directory)")
    parser.add_argument("--ctx", default="cpu", help="device to evaluate on: cpu, gpu or "
                        "gpu:N (default: cpu)")
    add_json_flag(parser)
    add_import_flag(parser)
    return parser


def summary(report, name=None):
    """The report's figures as a person reads them: a table of the predictive on MNIST's test
    images, on noise and on the other dataset's images; ``name``: the checkpoint as the user
    named it (default: the report's path)."""
    draws = report["test_samples"]
    ours = report["in_distribution"]
    rows = [["MNIST test", "%.2f%%" % (100 * ours["accuracy"]), "%.4f" % ours["nll"],
             "%.4f" % ours["ece"], "%.3f" % ours["mean_entropy"], ""]]
    for key, name in (("noise", "uniform noise"), ("ood", "other dataset")):
        if report.get(key):
            rows.append([name, "", "", "", "%.3f" % report[key]["mean_entropy"],
                         "%.4f" % report[key]["auroc"]])
    return "%s, epoch %d, %s:\n%s\nthe mean weights' test accuracy: %.2f%%" % (
        name or report["checkpoint"], report["epoch"],
        "%d draws of the predictive" % draws if draws else "its weights",
        table(["images", "accuracy", "NLL", "ECE", "entropy (bits)", "AUROC against MNIST"],
              rows), 100 * ours["mean_weights_accuracy"])


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    import_modules(args.import_modules)
    run, checkpoint_path, config = load_run(args)
    from ..learning.context import parse_context
    from ..analysis.report import evaluate_run, load_ood_images, report_files
    kind = config.model_kind
    if args.test_samples is None:
        args.test_samples = kind.default_test_samples
    kind.check_test_samples(args.test_samples, MAX_PREDICTIVE_SAMPLES)
    out = report_directory(args, run, report_files(checkpoint_path))
    ctx = parse_context(args.ctx)
    ood = load_ood_images(args.ood_data_dir) if args.ood_data_dir else None
    data = run.load_data(args.data_dir)
    with out.locked():
        report, paths = evaluate_run(args.run, data, ctx, args.test_samples, ood, out,
                                     args.ood_data_dir and os.path.abspath(args.ood_data_dir))
    if args.json:
        print_json(report)  # stdout stays the report's JSON, for a reader such as jq
        sys.stderr.write("wrote %s\n" % ", ".join(paths))
    else:
        print(summary(report, args.run))
        print("wrote %s" % ", ".join(paths))
    return 0


def run(argv=None, prog=PROG):
    """The command as a program: its exit status."""
    return run_main(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())

"""The command ``gluon-bbb shift MODEL [MODEL ...] --out DIR``: how a model's predictive
holds up as MNIST's test images are rotated and translated
(``analysis/robustness.py``), written as ``DIR/shift-rotation.json`` and ``.png`` (and
``shift-translation.*``)."""
import os
import sys

from .cli import (ArgumentParser, add_import_flag, add_json_flag, import_modules, load_mxnet,
                  print_json, run_main, table)
from ..errors import MAX_PREDICTIVE_SAMPLES
from ..analysis.robustness import SHIFTS

PROG = "gluon-bbb shift"


def build_parser(prog=PROG):
    parser = ArgumentParser(prog=prog, description="Accuracy, NLL, Brier score, ECE, entropy "
                            "and AUROC on rotated and translated MNIST (Ovadia et al. 2019).")
    parser.add_argument("models", nargs="+", metavar="MODEL", help="a run directory, its "
                        "best.params, or a compressed file; several are one ensemble")
    parser.add_argument("--out", required=True, help="directory for shift-KIND.json and "
                        "shift-KIND.png")
    parser.add_argument("--shift", choices=sorted(SHIFTS), action="append",
                        help="rotation (0-180 degrees in 15-degree steps) or translation (0-14 "
                        "pixels); repeat for both (default: both)")
    parser.add_argument("--test-samples", type=int, help="draws of each model's Monte Carlo "
                        "predictive, 0 (the mean weights) to %d (default: each model's own: 10 "
                        "for a run that samples, the number a compressed file names, 0 for a "
                        "deterministic run)" % MAX_PREDICTIVE_SAMPLES)
    parser.add_argument("--temperature-scale", action="store_true", help="scale the "
                        "predictive by one temperature fitted (least NLL) on the validation "
                        "images of the first run named")
    parser.add_argument("--test-size", type=int, help="score the first N test images "
                        "(default: all 10,000)")
    parser.add_argument("--data-dir", help="directory with the MNIST IDX files")
    parser.add_argument("--ood-data-dir", help="directory with another dataset's "
                        "t10k-images-idx3-ubyte[.gz] (e.g. Fashion-MNIST): the report adds the "
                        "mean entropy on its images and the AUROC of telling them from the "
                        "unshifted test images")
    add_json_flag(parser)
    add_import_flag(parser)
    return parser


def summary(report):
    """One shift's report as a person reads it: a row a severity."""
    rows = [["%g %s" % (row["severity"], report["unit"]), "%.2f%%" % (100 * row["accuracy"]),
             "%.3f" % row["nll"], "%.3f" % row["brier"], "%.3f" % row["ece"],
             "%.3f" % row["mean_entropy"], "%.3f" % row["auroc"]] for row in report["rows"]]
    lines = ["%s of %d test images%s:" % (report["shift"], report["images"],
                                         ", temperature %.3f" % report["temperature"]
                                         if "temperature" in report else ""),
             table([report["shift"], "accuracy", "NLL", "Brier", "ECE", "entropy (bits)",
                    "AUROC against unshifted"], rows)]
    if "ood" in report:
        lines.append("other dataset: mean entropy %.3f bits, AUROC against MNIST %.4f" % (
            report["ood"]["mean_entropy"], report["ood"]["auroc"]))
    return "\n".join(lines)


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    import_modules(args.import_modules)
    from ..errors import ConfigError
    if args.test_samples is not None and not 0 <= args.test_samples <= MAX_PREDICTIVE_SAMPLES:
        raise ConfigError("test_samples", args.test_samples,
                          "an integer in [0, %d]" % MAX_PREDICTIVE_SAMPLES)
    if args.test_size is not None and not 1 <= args.test_size:
        raise ConfigError("test_size", args.test_size, "an integer >= 1")
    load_mxnet()
    from ..data import idx_paths, load_mnist
    from ..analysis.robustness import Ensemble, load_model, shift_report
    from .. import outputs
    from ..plots import plot_shift
    loaded = [load_model(path, args.test_samples) for path in args.models]
    models = [model for model, _ in loaded]
    runs = [found for _, found in loaded if found is not None]
    shifts = args.shift or sorted(SHIFTS)
    out, inputs = _report_directory(args, runs, shifts)
    model = models[0] if len(models) == 1 else Ensemble(models)
    # the first run's data, checked against every run's record
    data = runs[0][0].load_data(args.data_dir) if runs else load_mnist(args.data_dir)
    for run, _ in runs[1:]:
        run.check_data(data)
    record = {"models": [os.path.abspath(p) for p in args.models],
              "test_samples": [m.num_samples for m in models], "data_dir": data.directory}
    if args.temperature_scale:
        model = _temperature_scaled(model, runs, data, record)
    images, labels = data.test_images, data.test_labels
    if args.test_size:
        images, labels = images[:args.test_size], labels[:args.test_size]
    if args.ood_data_dir:
        from ..analysis.robustness import ood_report
        from ..analysis.report import load_ood_images
        record["ood"] = dict(ood_report(model, images, load_ood_images(args.ood_data_dir)),
                             data_dir=os.path.abspath(args.ood_data_dir))
    inputs += idx_paths(data.directory) if data.directory else []
    paths_of = {name: [outputs.check_not_an_input(out.file("shift-%s.%s" % (name, ending)),
                                                  inputs)
                       for ending in ("json", "png")] for name in shifts}
    written, reports = [], {}
    with out.locked():
        for name in shifts:
            paths = paths_of[name]
            report = dict(shift_report(model, images, labels, SHIFTS[name]), **record)
            outputs.write_json(paths[0], report, outputs.REPORT)
            plot_shift(report, paths[1])
            written += paths
            reports[name] = report
            if not args.json:
                print(summary(report), flush=True)
    if args.json:
        print_json(reports)
    (sys.stderr if args.json else sys.stdout).write("wrote %s\n" % ", ".join(written))
    return 0


def _report_directory(args, runs, shifts):
    """``(out, inputs)``: the directory ``args.out`` with the report's files claimed before any
    work (``outputs.py``): never inside a run other than those scored (``runs``), never over a
    report on other models or over what this command reads (``inputs``: the models and their
    runs' files), however it is named."""
    from .. import outputs
    from ..learning.rundir import RunDirectory
    files = {}
    for name in shifts:
        files.update({"shift-%s.json" % name: outputs.REPORT,
                      "shift-%s.png" % name: outputs.PNG})
    inputs = list(args.models) + [path for run, _ in runs for path in run.files()]
    for name in files:
        outputs.check_not_an_input(os.path.join(args.out, name), inputs)
    out = RunDirectory(args.out).create(
        "out", files, own_runs=[run.path for run, _ in runs],
        sources=outputs.report_sources({"models": [os.path.abspath(p) for p in args.models]}))
    return out, inputs


def _temperature_scaled(model, runs, data, record):
    """``model`` with its temperature fitted on the validation images of the first of ``runs``
    (``(run, config)`` pairs) that holds some out; says so in ``record``."""
    from ..analysis.robustness import TemperatureScaled, fit_temperature
    from ..errors import CheckpointError
    from ..learning.loop import split_data
    with_validation = [(run, config) for run, config in runs if config.validation]
    if not with_validation:
        raise CheckpointError("{temperature_scale} needs a run that holds out validation "
                              "images (trained with {validation}); none of the models named "
                              "does")
    run, config = with_validation[0]
    _, _, val_images, val_labels = split_data(config, data)
    temperature = fit_temperature(model.probabilities(val_images), val_labels)
    record.update(temperature=temperature, temperature_fitted_on="the %d validation images "
                  "of %s" % (len(val_labels), run.path))
    return TemperatureScaled(model, temperature)


def run(argv=None, prog=PROG):
    """The command as a program: its exit status."""
    return run_main(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())

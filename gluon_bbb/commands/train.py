"""The command ``gluon-bbb train`` (a checkout's top-level ``train_mnist.py`` runs it too):
train on MNIST-format data into a run directory, then draw its plots and its uncertainty
report. A thin shell over ``learning.loop.train``."""
import os
import sys
import time
import typing

from .cli import (ArgumentParser, add_import_flag, add_json_flag, add_switch, flag_for,
                  import_modules, load_mxnet, print_json, run_main, say_for)
from ..learning.config import (CONVOLUTION_DEFAULTS, EXCLUDED, FLAT_FIELDS, IMPLIED,
                               MAX_SAMPLES, OPTIMIZERS, PRESETS, Config,
                               flat_defaults)
from ..errors import MAX_PREDICTIVE_SAMPLES, CheckpointError, ConfigError, GluonBBBError
from ..family.choices import names
from ..family.estimators import ESTIMATORS
from ..family.kl import KL_DIRECTIONS, KL_ESTIMATES, KL_WEIGHTINGS
from ..family.model_kinds import MODEL_KINDS, model_kind
from ..learning.schedules import LR_SCHEDULES
from ..networks.network import SPEC_HELP
from ..family.parametrizations import KNOWN as PARAMETRIZATIONS
from ..family.priors import KNOWN as PRIORS

BUILT_IN_PRIORS = tuple(cls.name.replace("_", "-") for cls in PRIORS.built_in())

PROG = "gluon-bbb train"

# every setting the command sets from its flag (``Config.from_dict``'s flat names: --batch-size
# -> batch_size, --ivon-ess -> ivon_ess), with its help, or (its choices, its help); a setting
# that is on or off is a switch, --field and --no-field; any other takes a value of its type
FLAGS = {
    "epochs": "epochs to train (in all, counting those of a resumed run)",
    "batch_size": "images per mini-batch",
    "num_hidden_layers": "hidden layers of the MLP (0: a linear softmax model)",
    "num_hidden_units": "units per hidden layer",
    "learning_rate": "optimizer step size, on the summed mini-batch loss",
    "lr_decay_every": "multiply the rate by --lr-decay-factor every N epochs (0: never)",
    "lr_decay_factor": "factor of the step decay, in (0, 1]",
    "num_samples": "weight samples averaged per step, 1 to %d" % MAX_SAMPLES,
    "sigma_p": "standard deviation of the Gaussian prior",
    "pi": "weight of the scale mixture's first (wide) component, in [0, 1]",
    "sigma_p1": "standard deviation of the scale mixture's first component",
    "sigma_p2": "standard deviation of the scale mixture's second component",
    "mu_scale": "standard deviation of the initial means mu",
    "rho_offset": "initial rho (sigma = softplus(rho), or exp(rho / 2) with --parametrization "
                  "log-variance)",
    "gate_rho_offset": "initial rho of the gate layers' factors",
    "kl_scale": "multiplies every mini-batch's KL term (1: the paper's objective)",
    "kl_warmup_epochs": "grow the KL term's weight linearly from 0 over the first N epochs (0: "
                        "none)",
    "init_from": "start the means mu from this run's (a run directory or parameter file of the "
                 "same network, such as a deterministic one)",
    "train_size": "train on the first N images (after --validation)",
    "validation": "hold out the last N training images, scored every epoch",
    "seed": "seed of the initial weights, the shuffles and the noise",
    "network": "the network: " + SPEC_HELP,
    "dropout": "dropout rate after every hidden ReLU of --model mcdropout, in (0, 1)",
    "ivon_ess": "--model ivon: the effective sample size",
    "ivon_hess_init": "--model ivon: the Hessian estimate's start",
    "ivon_beta1": "--model ivon: the gradient's momentum",
    "ivon_beta2": "--model ivon: the Hessian estimate's momentum",
    "ivon_weight_decay": "--model ivon: weight decay, and the Hessian's floor in sigma = "
                         "1/sqrt(ess (h + it))",
    "ivon_clip_radius": "--model ivon: clip each update's step to this",
    "ivon_late_beta2": "--model ivon: beta2 of the last --ivon-late-epochs epochs",
    "ivon_late_epochs": "--model ivon: the last epochs whose Hessian estimate uses "
                        "--ivon-late-beta2",
    "optimizer": (OPTIMIZERS, "update rule"),
    "lr_schedule": (names(LR_SCHEDULES), "the rate's schedule: step decay (--lr-decay-every, "
                    "--lr-decay-factor), falling linearly to 0 at the last epoch (sparse "
                    "variational dropout's), or a half cosine to 0 (IVON's)"),
    "prior": (BUILT_IN_PRIORS, "prior over every weight"),
    "gate_prior": (BUILT_IN_PRIORS, "prior over the factors of the network's gate layers; "
                   "log-uniform gates with --prior gaussian are Bayesian Compression's group "
                   "prior"),
    "kl_weighting": (names(KL_WEIGHTINGS), "KL weight of each mini-batch: 1/M, or "
                     "2^(M-i)/(2^M-1) (the paper's section 3.4)"),
    "estimator": (names(ESTIMATORS), "draw weights; pre-activations (local "
                  "reparametrization); or one perturbation with random signs per example "
                  "(Flipout)"),
    "kl": (names(KL_ESTIMATES), "one-sample Monte Carlo KL, or the closed form (Gaussian "
           "prior)"),
    "kl_direction": (KL_DIRECTIONS, "KL(q || P), the ELBO's, or KL(P || q), which covers the "
                     "prior's mass (ndarray backend)"),
    "parametrization": (tuple(name.replace("_", "-") for name in PARAMETRIZATIONS),
                        "how rho gives the posterior's sigma: softplus(rho), or rho = log "
                        "sigma^2 (log-variance; ndarray backend)"),
    "model": (names(MODEL_KINDS) + ("mlp",), "Bayes by Backprop, Monte Carlo dropout (the "
              "mean weights trained with dropout and the prior as weight decay; predictions "
              "average --test-samples dropout masks), a deterministic network of the same "
              "shape as a baseline (mlp: the same), or the same posterior as bbb fitted by "
              "IVON's natural-gradient update (--ivon-*)"),
    "init_best_units": "with --init-from a run of the same gated network with more units: "
                       "start from each gated layer's units whose gates have the highest "
                       "signal-to-noise ratio there (the lowest log alpha), as many as "
                       "--network has",
    "ivon_prior_at_draws": "--model ivon: take the prior's gradient and precision at each "
                           "step's drawn weights instead of at the means",
    "remove_switched_off": "take the weights the prior's rule switches off (log alpha > 3 for "
                           "the log-uniform prior) out of the network as it trains: their "
                           "means set to 0, no noise, no gradient (sparse variational "
                           "dropout's code; ndarray backend)",
}
# what a default of None means, in --help
DEFAULT_WORDS = {"seed": "a fresh one, recorded in config.json", "train_size": "all",
                 "ivon_ess": "the training images", "ivon_clip_radius": "none",
                 "ivon_late_beta2": "none", "init_from": "the seed's random means",
                 "gate_rho_offset": "--rho-offset's", "gate_prior": "--prior's"}


def build_parser(prog=PROG, raise_errors=False):
    """The command's parser; ``raise_errors``: raise ``cli.FlagError`` instead of exiting."""
    defaults = flat_defaults()
    parser = ArgumentParser(prog=prog, raise_errors=raise_errors,
                            description="Bayes by Backprop on MNIST (Blundell et al. 2015).")
    parser.add_argument("--data-dir", help="directory with the four MNIST IDX files "
                        "(default: $GLUON_BBB_DATA, else ~/.mxnet/datasets/mnist, else download; "
                        "on --resume, the run's)")
    parser.add_argument("--out", help="run directory (default: runs/<timestamp>)")
    parser.add_argument("--ctx", default="cpu", help="device to train on: cpu, gpu or gpu:N "
                        "(default: cpu)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its last checkpoint (a run that "
                        "has trained all its epochs draws its plots and report again)")
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="start from the paper's MLP and prior, or the Bayesian LeNet's "
                        "settings (flags override)")
    parser.add_argument("--eval-train", action="store_true",
                        help="also measure training-set accuracy after every epoch")
    parser.add_argument("--test-samples", type=int, default=10,
                        help="draws for the uncertainty report after training, 0 to %d "
                        "(default 10; 0 skips the report)" % MAX_PREDICTIVE_SAMPLES)
    parser.add_argument("--ood-data-dir", help="another MNIST-format dataset's test images "
                        "for the out-of-distribution part of the report")
    parser.add_argument("--backend", choices=("native", "ndarray"),
                        help="native: the C kernels (CPU contexts; every estimator, the "
                        "reverse KL: the Monte Carlo KL with the Gaussian and scale-mixture "
                        "priors under softplus, the closed form of the Gaussian under softplus "
                        "and of the log-uniform prior and none under either parametrization: "
                        "native.table.SERVED); ndarray: MXNet operators (any context, "
                        "everything); default: native where it serves, and the run says why "
                        "where it does not")
    add_json_flag(parser)
    add_import_flag(parser)
    for field, entry in FLAGS.items():
        choices, text = entry if isinstance(entry, tuple) else (None, entry)
        default, kind = defaults[field], FLAT_FIELDS[field]
        if kind is bool:
            add_switch(parser, flag_for(field), "%s (default: %s)" % (
                text, "on" if default else "off"))
            continue
        words = (DEFAULT_WORDS[field] if default is None
                 else default.replace("_", "-") if choices else default)
        options = (dict(choices=choices) if choices else
                   dict(type=typing.get_args(kind)[0] if typing.get_args(kind) else kind,
                        metavar=field.upper()))
        parser.add_argument(flag_for(field), help="%s (default: %s)" % (text, words), **options)
    return parser


def config_from_args(args, run=None):
    """The run's Config: the flags given over the preset, over the defaults, or, resuming,
    over the run's own config.json (``run``, a ``RunDirectory``)."""
    return _config_and_defaults(args, run)[0]


def _config_and_defaults(args, run):
    flags = {field: getattr(args, field)
             for field in FLAGS if getattr(args, field) is not None}
    preset = PRESETS[args.preset] if args.preset else {}
    given = dict(preset, **flags)
    values = run.read_classifier_config().to_flat() if args.resume else {}
    taken = [] if args.resume else implied_settings(given, bool(args.preset))
    values.update(given)
    for _, settings in taken:
        values.update(settings)
    # what the model leaves without effect: a flag's refused, a preset's or an implied dropped
    try:
        model = model_kind(values.get("model", DEFAULTS.model)).name
    except ConfigError:
        model = None  # the config names the model's error
    excluded, why = EXCLUDED.get(model, ((), ""))
    for field in excluded:
        if field in flags:
            raise ConfigError(field, flags[field], "left unset with {model} %s (%s)"
                              % (model, why))
        if not args.resume:
            values.pop(field, None)
    taken = [(cause, {k: v for k, v in settings.items() if k not in excluded})
             for cause, settings in taken]
    taken = [(cause, settings) for cause, settings in taken if settings]
    try:
        config = Config.from_dict(values)
    except ConfigError as exc:
        if exc.field in flags or exc.field not in preset:
            raise
        raise PresetNeeds(args.preset, exc) from None
    # a flag that nothing of the run takes (IVON's for another model, a prior's setting for
    # other priors) is refused; a preset's is dropped
    taken_flat = config.to_flat()
    for field in sorted(set(flags) - set(taken_flat)):
        if field.startswith("ivon_"):
            raise ConfigError(field, flags[field], "given with {model} ivon only (IVON's "
                              "setting; this run's model is %s)" % config.model)
        owners = [kind.name.replace("_", "-") for kind in PRIORS.built_in()
                  if field in kind.setting_names()]
        priors = ", ".join("%s %s" % (flag_for(name), getattr(config, name).replace("_", "-"))
                           for name in ("prior", "gate_prior") if getattr(config, name))
        raise ConfigError(field, flags[field], "given with a prior that has it (%s; this "
                          "run's: %s)" % (" or ".join(owners), priors))
    return config, taken


class PresetNeeds(ConfigError):
    """A setting a preset gives that the flags leave wanting, said as the preset's."""

    def __init__(self, preset, error):
        GluonBBBError.__init__(self, "{preset} %%s needs other flags: it sets {%s} %%s, which "
                               "must be %s" % (error.field, error.requirement.replace("%", "%%")),
                               preset, _word(error.value))
        self.field, self.value, self.requirement = "preset", preset, error.requirement


def _word(value):
    """A setting as a command line spells it."""
    return str(value).replace("_", "-") if isinstance(value, str) else str(value)


def implied_settings(given, preset=False):
    """What the choices in ``given`` (the preset's and the flags' fields) imply for the fields
    ``given`` lacks, as ``[(cause, {field: value})]``: ``IMPLIED`` (where its value is not the
    default already), then, for a network with convolutions and no ``preset``,
    ``CONVOLUTION_DEFAULTS``; a cause is ``(field, value)``, or None for the convolutions."""
    def spelt(value):
        return value.replace("-", "_") if isinstance(value, str) else value

    groups, taken, added = [], {}, True
    while added:
        added = False
        for cause, settings in IMPLIED:
            field, value = cause
            if spelt(dict(given, **taken).get(field)) != value:
                continue
            new = {name: setting for name, setting in settings.items()
                   if name not in given and name not in taken
                   and setting != getattr(DEFAULTS, name)}
            if new:
                groups.append((cause, new))
                taken.update(new)
                added = True
    if not preset:
        network = Config(**{name: setting for name, setting in dict(given, **taken).items()
                            if name in ("network", "num_inputs", "num_outputs")})
        if network.build_network().has_convolution:
            new = {name: setting for name, setting in CONVOLUTION_DEFAULTS.items()
                   if name not in given and name not in taken}
            if new:
                groups.append((None, new))
    return groups


def _implied_words(groups):
    """The run's first line for what it took from its choices (``implied_settings``)."""
    def flag(field, value):
        return flag_for(field) if isinstance(value, bool) else "%s %s" % (
            flag_for(field), str(value).replace("_", "-"))
    return "; ".join("%s takes %s" % (
        "a network with convolutions" if cause is None else flag(*cause),
        ", ".join(flag(*setting) for setting in settings.items()))
        for cause, settings in groups) + " (where no flag or preset sets them)"


DEFAULTS = Config()


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    import_modules(args.import_modules)
    from ..learning.rundir import RunDirectory
    if args.resume and args.out is None:
        raise CheckpointError("{resume} needs {out_dir} naming the run to continue")
    run = RunDirectory(time.strftime(os.path.join("runs", "%Y%m%d-%H%M%S"))
                       if args.out is None else args.out)
    config, taken = _config_and_defaults(args, run)
    if not 0 <= args.test_samples <= MAX_PREDICTIVE_SAMPLES:  # 0 skips the report
        raise ConfigError("test_samples", args.test_samples,
                          "an integer in [0, %d]" % MAX_PREDICTIVE_SAMPLES)
    load_mxnet(args.ctx)
    from ..learning.context import parse_context
    from ..data import load_mnist
    from ..analysis.report import load_ood_images
    from ..learning.loop import check_training
    ctx = parse_context(args.ctx)
    data = run.load_data(args.data_dir) if args.resume else load_mnist(args.data_dir)
    ood_images = load_ood_images(args.ood_data_dir) if args.ood_data_dir else None
    check_training(config, data, args.resume, ctx, args.backend)
    # every check is passed: only now is the run directory made
    if taken:
        say_for(args.json)(_implied_words(taken))
    # a resumed run's own files are its to read first (the resume rules); they are checked as
    # they are written
    from ..learning.loop import train
    with run.create(files=training_files(own=not args.resume)).locked():
        result = train(config, data, ctx, out_dir=run, resume=args.resume,
                       eval_train=args.eval_train, log=say_for(args.json), backend=args.backend)
        return report(args, config, ctx, run, data, ood_images, result)


# the plots a training run draws beside its own files and its uncertainty report
PLOTS = ("accuracy.png", "weights.png")


def training_files(own=True):
    """``{name: outputs.FileKind}`` of the files the command writes into its run directory,
    claimed before it trains: the plots, the uncertainty report and, with ``own``, the run's
    own files."""
    from .. import outputs
    from ..analysis.report import report_files
    from ..learning.rundir import CHECKPOINT_FILE, TRAINING_FILES
    return dict(TRAINING_FILES if own else {}, **dict.fromkeys(PLOTS, outputs.PNG),
                **report_files(CHECKPOINT_FILE))


def report(args, config, ctx, run, data, ood_images, result):
    """Draw the plots and the uncertainty report of a trained run (``result``, a
    ``loop.TrainResult``) into ``run`` (locked by the caller), and say what it reached."""
    from ..analysis.report import evaluate_run
    from ..plots import plot_accuracy, plot_weights
    from ..learning.rundir import BEST_CHECKPOINT_FILE, best_validation_epoch
    say = say_for(args.json)
    plot_accuracy(result.history, run.file(PLOTS[0]))
    plot_weights(result.mus, result.sigmas, run.file(PLOTS[1]))
    kind, report = config.model_kind, None
    if args.test_samples > 0:
        draws = args.test_samples if kind.prediction_draws else 0
        say("uncertainty report: %s over the %d test images, noise%s ..." % (
            "%d %s" % (draws, kind.prediction_draws) if draws else "the weights",
            data.test_images.shape[0], " and the OOD images" if ood_images is not None else ""))
        report, _ = evaluate_run(run.path, data, ctx, draws, ood_images, run,
                                 args.ood_data_dir and os.path.abspath(args.ood_data_dir))
        say("uncertainty (%s): test accuracy %.4f, ECE %.4f, mean entropy %.3f bits on MNIST "
            "and %.3f on noise" % (
                  "%d %s" % (draws, kind.prediction_draws) if draws else "the weights",
                  report["in_distribution"]["accuracy"], report["in_distribution"]["ece"],
                  report["in_distribution"]["mean_entropy"], report["noise"]["mean_entropy"]))
    best = best_validation_epoch(result.history)
    if best is not None:
        chosen_by = "accuracy %.4f" % best["validation_accuracy"]
        if "validation_objective" in best:
            chosen_by = "objective %.1f nats (%s)" % (best["validation_objective"], chosen_by)
        say("best validation %s at epoch %d (test accuracy with the mean weights %.4f), kept "
            "in %s" % (chosen_by, best["epoch"], best["test_accuracy"], BEST_CHECKPOINT_FILE))
    say("final test accuracy (mean weights) %.4f; wrote %s" % (
        result.history[-1]["test_accuracy"], run.path))
    if args.json:
        print_json({"run": os.path.abspath(run.path), "epochs": len(result.history),
                    "last_epoch": result.history[-1],
                    "best_validation_epoch": best, "uncertainty": report})
    return 0


def run(argv=None, prog=PROG):
    """The command as a program: its exit status."""
    return run_main(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())

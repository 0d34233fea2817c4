"""The command ``gluon-bbb regression --data sine|quartic --out DIR``: a toy regression
problem trained, its predictive split into
aleatoric and epistemic uncertainty, written and plotted (``toy_problems.py``).
"""
import sys

from .cli import ArgumentParser, add_json_flag, load_mxnet, print_json, run_main, say_for
from ..errors import MAX_PREDICTIVE_SAMPLES
from ..family.likelihoods import NAMED_NOISES
from ..toy_problems import (MODEL_SETTINGS, MODELS, PROBLEMS, TEST_SAMPLES, describe_figures,
                                  regression_config, run_regression)

PROG = "gluon-bbb regression"


def build_parser(prog=PROG):
    parser = ArgumentParser(prog=prog, description="Regression with aleatoric and epistemic "
                            "uncertainty: a toy problem, trained and plotted.")
    parser.add_argument("--data", required=True, choices=sorted(PROBLEMS),
                        help="sine: 92 noisy points of 10 sin(2 pi x) on [-0.5, 0.5]; "
                        "quartic: six points of -x^4 + 3x^2 + 1, fixed noise")
    parser.add_argument("--model", default="bbb", choices=MODELS + ("mlp",),
                        help="Bayes by Backprop, Monte Carlo dropout or a deterministic "
                        "network (default: bbb)")
    parser.add_argument("--out", required=True, help="run directory to write (new)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the data's noise, the weights and the draws (default 0)")
    parser.add_argument("--epochs", type=int, help="training steps on the whole data set, at "
                        "least 1 (default: the problem's)")
    parser.add_argument("--noise", help="the likelihood's noise: a standard deviation in the "
                        "data's units, learned or heteroscedastic (default: the problem's)")
    parser.add_argument("--kl-scale", type=float, help="multiplies the KL term (the prior's "
                        "term for mcdropout): 1 is the ELBO (default: the problem's, 0.3 for the "
                        "sine, 1 for the quartic)")
    parser.add_argument("--kl-direction", choices=("reverse", "forward"),
                        help="KL(q || P), the ELBO's (default), or KL(P || q)")
    parser.add_argument("--estimator", choices=("sample", "lrt", "flipout"),
                        help="how a step draws the network's noise (default: sample)")
    parser.add_argument("--dropout", type=float, help="dropout rate of --model mcdropout "
                        "(default %g)" % MODEL_SETTINGS["mcdropout"]["dropout"])
    parser.add_argument("--test-samples", type=int,
                        help="draws of the predictive, 1 to %d (default %d; 0 for a "
                        "deterministic model)" % (MAX_PREDICTIVE_SAMPLES, TEST_SAMPLES))
    parser.add_argument("--ctx", default="cpu", help="device: cpu, gpu or gpu:N (default: cpu)")
    add_json_flag(parser)
    return parser


def main(argv=None, prog=PROG):
    args = build_parser(prog).parse_args(argv)
    fields = {name: getattr(args, name) for name in ("epochs", "dropout", "kl_scale",
                                                     "kl_direction", "estimator")
              if getattr(args, name) is not None}
    if args.noise is not None:
        fields["noise"] = (args.noise if args.noise in NAMED_NOISES else _number(args.noise))
    regression_config(args.data, args.model, args.seed, **fields)  # bad values, before MXNet
    load_mxnet(args.ctx)
    from ..learning.context import parse_context
    ctx = parse_context(args.ctx)
    _, metrics, paths = run_regression(args.data, args.model, args.out, args.seed, ctx,
                                       args.test_samples,
                                       log=say_for(args.json), **fields)
    say = say_for(args.json)
    if args.json:
        print_json(metrics)
    else:
        for line in describe_figures(metrics):
            say(line)
    say("wrote %s" % ", ".join(paths))
    return 0


def _number(text):
    try:
        return float(text)
    except ValueError:
        return text  # refused by regression_config, naming the field


def run(argv=None, prog=PROG):
    """The command as a program: its exit status."""
    return run_main(lambda args: main(args, prog), argv, prog)


if __name__ == "__main__":
    sys.exit(run())

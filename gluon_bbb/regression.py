"""Regression with aleatoric and epistemic uncertainty: the two toy problems, training on the
whole data set, predictions that split the two uncertainties, their figures and plot, and the
command ``python -m gluon_bbb.regression --data sine|quartic --model bbb|mcdropout|mlp``.

A regression model is a ``Config`` like MNIST's: a network, a Gaussian likelihood
(``likelihood.py``: fixed noise, a learned scalar or a heteroscedastic head) and a model
(``bbb``, ``mcdropout``, ``mlp``), trained by the same ``TrainingStep`` with the same loss. The
data set is one mini-batch (M = 1: the whole KL term every step), so an epoch is one step.
The network sees standardized data, (x - mean) / sd for inputs and targets alike, so that one
prior suits both problems; ``Scaling`` holds the four numbers, config.json records them, and
predictions come back in the data's units (the likelihood's fixed noise is given there too).

From T draws (weights for Bayes by Backprop, dropout masks for Monte Carlo dropout), each giving
a mean m_t(x) and a variance v_t(x), ``split_uncertainty`` forms

    predictive mean       = mean_t m_t
    epistemic variance    = var_t m_t      (what the model does not know)
    aleatoric variance    = mean_t v_t     (the noise it sees in the data)
    total variance        = epistemic + aleatoric

and central intervals are mean +- z sd_total (the normal with the predictive's mean and
variance).
"""
import dataclasses
import math
import statistics
import sys

import numpy as np

if __name__ == "__main__":
    from . import exit_unless_mxnet_loads
    exit_unless_mxnet_loads("python -m gluon_bbb.regression")

from mxnet import nd  # noqa: E402

from .cli import ArgumentParser, run_main  # noqa: E402
from .config import MODELS, Config  # noqa: E402
from .context import context_name, parse_context  # noqa: E402
from .errors import CheckpointError, ConfigError  # noqa: E402
from .evaluate import MAX_TEST_SAMPLES, check_test_samples  # noqa: E402
from .files import save_figure, write_json  # noqa: E402
from .model import prediction_sigmas  # noqa: E402
from .rundir import REGRESSION_METRICS_FILE, RunDirectory  # noqa: E402
from .step import TrainingStep  # noqa: E402
from .train import check_finite  # noqa: E402
from .uncertainty import sampled_outputs  # noqa: E402

CHECK_EVERY = 100  # steps between reads of the loss (a read waits for MXNet's queue)
METRICS_FILE = REGRESSION_METRICS_FILE
PLOT_FILE = "regression.png"


@dataclasses.dataclass(frozen=True)
class Problem:
    """A toy regression problem: ``inputs`` (N,), ``truth(x)``, the data's noise standard
    deviation, the noise the likelihood takes (``fixed noise``: a standard deviation in the
    data's units, or ``learned`` / ``heteroscedastic``), the range plotted, and the config
    fields of its network and training."""
    name: str
    inputs: tuple
    truth: object
    noise_sd: float
    noise: object
    plot_range: tuple
    settings: dict
    fresh_range: tuple = None  # where fresh points are drawn to measure coverage

    def data(self, seed):
        """(x, y), each (N,) float64: the inputs and truth(x) plus the noise of ``seed``."""
        x = np.array(self.inputs, dtype=np.float64)
        noise = np.random.default_rng([seed, 0]).normal(0.0, 1.0, x.shape)
        return x, self.truth(x) + self.noise_sd * noise

    def fresh(self, seed, count=10000):
        """``count`` new (x, y) pairs from the data's distribution, x uniform on
        ``fresh_range``."""
        rng = np.random.default_rng([seed, 1])
        x = rng.uniform(*self.fresh_range, size=count)
        return x, self.truth(x) + self.noise_sd * rng.normal(0.0, 1.0, count)


_TRAINING = dict(num_inputs=1, num_outputs=1, optimizer="adam", learning_rate=0.01,
                 rho_offset=-5.0, num_samples=4, epochs=3000)
PROBLEMS = {
    # 92 evenly spaced points of a sine with noise of standard deviation 2
    "sine": Problem(
        "sine", tuple(np.linspace(-0.5, 0.5, 92)), lambda x: 10.0 * np.sin(2 * np.pi * x),
        2.0, "heteroscedastic", (-1.0, 1.0),
        dict(_TRAINING, num_hidden_layers=2, num_hidden_units=20, lr_decay_every=2000),
        fresh_range=(-0.5, 0.5)),
    # six exact points of a quartic, a fixed noise of 0.1; two hidden layers of 32 units under
    # a prior twice as wide as the sine's, so that the functions it allows bend away outside
    # the data (one layer reaches about 10 times the width there, two about 20)
    "quartic": Problem(
        "quartic", (-2.0, -1.8, -1.0, 1.0, 1.8, 2.0), lambda x: -x ** 4 + 3 * x ** 2 + 1,
        0.0, 0.1, (-5.0, 5.0),
        dict(_TRAINING, num_hidden_layers=2, num_hidden_units=32, sigma_p=2.0)),
}
# Monte Carlo dropout: dropout after every hidden layer, the prior as weight decay
MODEL_SETTINGS = {"bbb": {}, "mcdropout": dict(dropout=0.1), "mlp": {}}


@dataclasses.dataclass(frozen=True)
class Scaling:
    """The standardization the network sees: x -> (x - x_mean) / x_sd, y likewise."""
    x_mean: float
    x_sd: float
    y_mean: float
    y_sd: float

    @classmethod
    def of(cls, x, y):
        return cls(float(np.mean(x)), float(np.std(x)), float(np.mean(y)), float(np.std(y)))


def regression_config(problem, model="bbb", seed=0, scaling=None, **fields):
    """The ``Config`` of ``problem`` (a name or a ``Problem``) for ``model``, its settings
    overridden by ``fields``; a fixed noise is given in the data's units and the config holds
    it in the standardized units of ``scaling`` (default: the problem's data's)."""
    problem = PROBLEMS[problem] if isinstance(problem, str) else problem
    if scaling is None:
        scaling = Scaling.of(*problem.data(seed))
    noise = fields.pop("noise", problem.noise)
    if noise in ("learned", "heteroscedastic"):
        likelihood = "gaussian:%s" % noise
    else:
        if not (isinstance(noise, (int, float)) and math.isfinite(noise) and noise > 0):
            raise ConfigError("noise", noise, "a standard deviation > 0, learned or "
                              "heteroscedastic")
        likelihood = "gaussian:%r" % (float(noise) / scaling.y_sd)
    values = dict(problem.settings, **MODEL_SETTINGS.get(model, {}))
    values.update(fields, model=model, seed=seed, likelihood=likelihood,
                  batch_size=len(problem.inputs))
    config = Config(**values)
    if config.epochs < 1:
        raise ConfigError("epochs", config.epochs, "at least 1 (nothing to train)")
    return config


@dataclasses.dataclass
class RegressionResult:
    """A trained regression model: its config, problem and scaling, the data it saw and its
    ``TrainingStep`` (whose ``mus`` and ``rhos`` are the parameters)."""
    config: Config
    problem: Problem
    scaling: Scaling
    x: np.ndarray
    y: np.ndarray
    step: TrainingStep

    @property
    def mus(self):
        return self.step.mus

    @property
    def rhos(self):
        return self.step.rhos

    def predict(self, x, num_samples=200, seed=0):
        """``predict_regression`` at inputs ``x`` (N,)."""
        return predict_regression(x, self.mus, prediction_sigmas(self.config.model, self.rhos),
                                  self.config, self.scaling, num_samples, seed)


def fit_regression(problem, model="bbb", seed=0, ctx=None, **fields):
    """Train ``model`` on ``problem`` (a name or a ``Problem``) with the data of ``seed``;
    ``fields`` override the config (``regression_config``). Deterministic for a seed. Returns
    a ``RegressionResult``."""
    import mxnet as mx
    ctx = ctx or mx.cpu()
    problem = PROBLEMS[problem] if isinstance(problem, str) else problem
    x, y = problem.data(seed)
    scaling = Scaling.of(x, y)
    config = regression_config(problem, model, seed, scaling, **fields)
    training = TrainingStep(config, ctx)
    X = nd.array(((x - scaling.x_mean) / scaling.x_sd)[:, None], ctx=ctx, dtype="float32")
    Y = nd.array(((y - scaling.y_mean) / scaling.y_sd)[:, None], ctx=ctx, dtype="float32")
    pending = []
    for epoch in range(config.epochs):
        training.start_epoch(epoch)
        pending.append(training(X, Y, config.kl_scale))
        if len(pending) == CHECK_EVERY or epoch == config.epochs - 1:
            first = epoch - len(pending) + 1
            check_finite(pending, training, [(e, 0) for e in range(first, epoch + 1)])
            pending = []
    return RegressionResult(config, problem, scaling, x, y, training)


@dataclasses.dataclass
class PredictiveSplit:
    """The predictive at N inputs: mean, epistemic and aleatoric variance, each (N,)."""
    mean: np.ndarray
    epistemic_variance: np.ndarray
    aleatoric_variance: np.ndarray

    @property
    def total_variance(self):
        return self.epistemic_variance + self.aleatoric_variance

    def interval(self, level=0.95, variance=None):
        """The central ``level`` interval (lower, upper) of the normal with the predictive's
        mean and ``variance`` (default: the total)."""
        z = statistics.NormalDist().inv_cdf(0.5 + level / 2.0)
        sd = np.sqrt(self.total_variance if variance is None else variance)
        return self.mean - z * sd, self.mean + z * sd


def split_uncertainty(means, variances):
    """``PredictiveSplit`` of T draws: ``means`` and ``variances`` (T, N), each draw's
    predicted mean and noise variance."""
    means, variances = np.asarray(means, np.float64), np.asarray(variances, np.float64)
    return PredictiveSplit(means.mean(axis=0), means.var(axis=0), variances.mean(axis=0))


def predict_regression(x, mus, sigmas, config, scaling, num_samples=200, seed=0):
    """The ``PredictiveSplit`` at inputs ``x`` (N,) in the data's units, from ``num_samples``
    draws: weights w ~ N(mu, sigma^2), or dropout masks where ``sigmas`` is None and the
    network has dropout (0: the mean weights alone, no epistemic part)."""
    likelihood, network = config.build_likelihood(), config.build_network()
    X = ((np.asarray(x, np.float64) - scaling.x_mean) / scaling.x_sd)[:, None]
    means, variances = [], []
    for output in sampled_outputs(X.astype(np.float32), mus, sigmas, num_samples,
                                  batch_size=len(X), seed=seed, network=network):
        mean, log_variance = likelihood.mean_and_log_variance(output, nd)
        means.append(mean.asnumpy()[:, 0] * scaling.y_sd + scaling.y_mean)
        variances.append(np.exp(log_variance.asnumpy()[:, 0].astype(np.float64))
                         * scaling.y_sd ** 2)
    return split_uncertainty(means, variances)


def figures(result, num_samples=200, seed=0):
    """The problem's figures of merit, a dict. ``sine``: the mean aleatoric standard deviation
    over the data's range, the epistemic one there and at |x| = 1 and their ratio, the share of
    10,000 fresh points inside the 95% intervals. ``quartic``: whether the 95% band holds the
    true curve at the six inputs, its width there and at x = +-4, and their ratio."""
    problem = result.problem
    predict = lambda x: result.predict(x, num_samples, seed)  # noqa: E731
    if problem.fresh_range is not None:
        inside = predict(np.linspace(*problem.fresh_range, 201))
        edges = predict(np.array([problem.plot_range[0], problem.plot_range[1]]))
        epistemic_in = float(np.mean(np.sqrt(inside.epistemic_variance)))
        epistemic_edges = float(np.mean(np.sqrt(edges.epistemic_variance)))
        x, y = problem.fresh(result.config.seed)
        lower, upper = predict(x).interval(0.95)
        return {"aleatoric_sd_mean": float(np.mean(np.sqrt(inside.aleatoric_variance))),
                "epistemic_sd_mean": epistemic_in,
                "epistemic_sd_at_edges": epistemic_edges,
                "epistemic_ratio": epistemic_edges / epistemic_in,
                "coverage_95": float(np.mean((y >= lower) & (y <= upper))),
                "fresh_points": int(x.size)}
    at_data = predict(result.x)
    lower, upper = at_data.interval(0.95)
    truth = problem.truth(result.x)
    far = predict(np.array([-4.0, 4.0]))
    width_far = np.diff(np.stack(far.interval(0.95)), axis=0)[0]
    width_data = float(np.mean(upper - lower))
    return {"band_holds_truth": bool(np.all((truth >= lower) & (truth <= upper))),
            "band_width_at_data": width_data,
            "band_width_at_4": [float(w) for w in width_far],
            "width_ratio": float(np.min(width_far) / width_data)}


def plot_regression(result, path, num_samples=200, seed=0):
    """The data, the true curve, the predictive mean and its bands over the problem's plot
    range: 95% of the total (aleatoric + epistemic) and of the epistemic part; below, for a
    problem with noise in its data, the two standard deviations apart."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    problem = result.problem
    grid = np.linspace(*problem.plot_range, 400)
    split = result.predict(grid, num_samples, seed)
    rows = 2 if problem.fresh_range is not None else 1
    fig, axes = plt.subplots(rows, 1, figsize=(7, 4.5 * rows), squeeze=False)
    ax = axes[0, 0]
    lower, upper = split.interval(0.95)
    ax.fill_between(grid, lower, upper, color="tab:blue", alpha=0.2,
                    label="95%: aleatoric + epistemic")
    e_lower, e_upper = split.interval(0.95, split.epistemic_variance)
    ax.fill_between(grid, e_lower, e_upper, color="tab:blue", alpha=0.4, label="95%: epistemic")
    ax.plot(grid, problem.truth(grid), "k--", lw=1, label="true curve")
    ax.plot(grid, split.mean, color="tab:blue", lw=1.5, label="predictive mean")
    ax.plot(result.x, result.y, "o", color="tab:red", ms=3, label="data")
    # the total band far from the data can be hundreds of times wider than the data (a
    # heteroscedastic head extrapolates its log variance): the plot spans the epistemic band
    span = np.concatenate([e_lower, e_upper, result.y])
    pad = 0.05 * np.ptp(span)
    ax.set_ylim(span.min() - pad, span.max() + pad)
    ax.set_title("%s, %s, %d draws" % (problem.name, result.config.model, num_samples))
    ax.set_xlabel("x")
    ax.legend(fontsize=8, loc="lower left")
    if rows == 2:
        ax = axes[1, 0]
        ax.plot(grid, np.sqrt(split.aleatoric_variance), label="aleatoric sd")
        ax.plot(grid, np.sqrt(split.epistemic_variance), label="epistemic sd")
        ax.axhline(problem.noise_sd, color="k", ls="--", lw=1, label="noise sd of the data")
        ax.set_xlabel("x")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def run_regression(problem, model, out, seed=0, ctx=None, test_samples=200, **fields):
    """Train, then write the run directory ``out``: config.json (with the problem and the
    scaling), checkpoint.params, metrics.json (the figures) and regression.png. Returns
    ``(result, metrics, paths)``."""
    import mxnet as mx
    ctx = ctx or mx.cpu()
    check_test_samples(test_samples)
    run = out if isinstance(out, RunDirectory) else RunDirectory(out)
    problem = PROBLEMS[problem] if isinstance(problem, str) else problem
    # the config is checked before the directory is made
    regression_config(problem, model, seed, **fields)
    with run.create().locked():
        if run.holds_run():
            raise CheckpointError("%s already holds a run; choose another {out_dir}", run.path)
        result = fit_regression(problem, model, seed, ctx, **fields)
        run.write_config(result.config, ctx=context_name(ctx), problem=problem.name,
                         scaling=dataclasses.asdict(result.scaling))
        run.save_parameters(result.step, result.config.epochs)
        metrics = dict(problem=problem.name, model=model, seed=seed,
                       test_samples=test_samples, **figures(result, test_samples, seed))
        paths = [run.file(METRICS_FILE), run.file(PLOT_FILE)]
        write_json(paths[0], metrics)
        plot_regression(result, paths[1], test_samples, seed)
    return result, metrics, paths


def build_parser():
    parser = ArgumentParser(prog=PROG, description="Regression with aleatoric and epistemic "
                            "uncertainty: a toy problem, trained and plotted.")
    parser.add_argument("--data", required=True, choices=sorted(PROBLEMS),
                        help="sine: 92 noisy points of 10 sin(2 pi x) on [-0.5, 0.5], "
                        "heteroscedastic noise; quartic: six points of -x^4 + 3x^2 + 1, "
                        "fixed noise")
    parser.add_argument("--model", default="bbb", choices=MODELS,
                        help="Bayes by Backprop, Monte Carlo dropout or a deterministic "
                        "network (default: bbb)")
    parser.add_argument("--out", required=True, help="run directory to write (new)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the data's noise, the weights and the draws (default 0)")
    parser.add_argument("--epochs", type=int, help="training steps on the whole data set "
                        "(default: the problem's, 3000)")
    parser.add_argument("--noise", help="the likelihood's noise: a standard deviation in the "
                        "data's units, learned or heteroscedastic (default: the problem's)")
    parser.add_argument("--dropout", type=float, help="dropout rate of --model mcdropout "
                        "(default %g)" % MODEL_SETTINGS["mcdropout"]["dropout"])
    parser.add_argument("--test-samples", type=int, default=200,
                        help="draws of the predictive, 1 to %d (default 200)" % MAX_TEST_SAMPLES)
    parser.add_argument("--ctx", default="cpu", help="device: cpu, gpu or gpu:N (default: cpu)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    fields = {name: getattr(args, name) for name in ("epochs", "dropout")
              if getattr(args, name) is not None}
    if args.noise is not None:
        fields["noise"] = (args.noise if args.noise in ("learned", "heteroscedastic")
                           else _number(args.noise))
    _, metrics, paths = run_regression(args.data, args.model, args.out, args.seed,
                                       parse_context(args.ctx), args.test_samples, **fields)
    for name, value in metrics.items():
        print("%s: %s" % (name, value))
    print("wrote %s" % ", ".join(paths))
    return 0


def _number(text):
    try:
        return float(text)
    except ValueError:
        return text  # refused by regression_config, naming the field


PROG = "python -m gluon_bbb.regression"

if __name__ == "__main__":
    sys.exit(run_main(main, prog=PROG))

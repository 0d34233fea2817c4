"""Regression with aleatoric and epistemic uncertainty: the two toy problems, training on the
whole data set, predictions that split the two uncertainties, their figures, and a run
directory that holds them (``run_regression``). The command is ``gluon_bbb.commands.regression``."""

import dataclasses
import math
import statistics
import time

import numpy as np

from .learning.config import MAX_EPOCHS, Config
from . import outputs
from .errors import CheckpointError, ConfigError, NonFiniteResult
from .errors import FLOAT32_MAX, FLOAT32_TINY, MAX_PREDICTIVE_SAMPLES
from .family.likelihoods import NAMED_NOISES
from .family.model_kinds import MODEL_KINDS, model_kind
from .learning.rundir import CHECKPOINT_FILE, CONFIG_FILE, REGRESSION_METRICS_FILE, RunDirectory

CHECK_EVERY = 100  # steps between reads of the loss (a read waits for MXNet's queue)
LOG_EVERY = 500    # steps between progress lines (a multiple of CHECK_EVERY)
TEST_SAMPLES = 200  # draws of the predictive the figures and the plot average
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
    # 92 evenly spaced points of a sine with noise of sd 2, the KL term tempered by 0.3
    # (docs/DESIGN.md says why)
    "sine": Problem(
        "sine", tuple(np.linspace(-0.5, 0.5, 92)), lambda x: 10.0 * np.sin(2 * np.pi * x),
        2.0, "heteroscedastic", (-1.0, 1.0),
        dict(_TRAINING, num_hidden_layers=2, num_hidden_units=20, lr_decay_every=2000,
             kl_scale=0.3),
        fresh_range=(-0.5, 0.5)),
    # six exact points of a quartic, a fixed noise of 0.1, a prior twice as wide as the sine's
    "quartic": Problem(
        "quartic", (-2.0, -1.8, -1.0, 1.0, 1.8, 2.0), lambda x: -x ** 4 + 3 * x ** 2 + 1,
        0.0, 0.1, (-5.0, 5.0),
        dict(_TRAINING, num_hidden_layers=2, num_hidden_units=32, sigma_p=2.0)),
}
# Monte Carlo dropout: dropout after every hidden layer, the prior as weight decay
MODEL_SETTINGS = {"mcdropout": dict(dropout=0.1)}
# the model kinds the problems' settings train (not IVON's: docs/REGRESSION.md)
MODELS = tuple(kind.name for kind in MODEL_KINDS if not kind.natural_gradient)


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
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError("seed", seed, "an integer >= 0")  # the data's noise is drawn first
    if scaling is None:
        scaling = Scaling.of(*problem.data(seed))
    noise = fields.pop("noise", problem.noise)
    if noise in NAMED_NOISES:
        likelihood = "gaussian:%s" % noise
    else:
        # its variance, in the standardized units the network works in, is a float32
        low, high = (math.sqrt(bound) * scaling.y_sd for bound in (FLOAT32_TINY, FLOAT32_MAX))
        if not (isinstance(noise, (int, float)) and not isinstance(noise, bool)
                and low <= noise <= high):
            raise ConfigError("noise", noise, "a standard deviation from %.3g to %.3g in the "
                              "data's units (its variance a float32's), learned or "
                              "heteroscedastic" % (low, high))
        likelihood = "gaussian:%r" % (float(noise) / scaling.y_sd)
    model = model_kind(model).name
    if model not in MODELS:
        raise ConfigError("model", model, "one of %s for a toy problem" % ", ".join(MODELS))
    values = dict(problem.settings, **MODEL_SETTINGS.get(model, {}))
    values.update(fields, model=model, seed=seed, likelihood=likelihood,
                  batch_size=len(problem.inputs))
    epochs = values.get("epochs")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or not 1 <= epochs <= MAX_EPOCHS:
        raise ConfigError("epochs", epochs, "an integer from 1 to %d (the training steps; 0 "
                          "trains nothing)" % MAX_EPOCHS)
    return Config.from_dict(values)


@dataclasses.dataclass
class RegressionResult:
    """A trained regression model: its config, problem and scaling, the data it saw and its
    ``TrainingStep`` (whose ``mus`` and ``rhos`` are the parameters)."""
    config: Config
    problem: Problem
    scaling: Scaling
    x: np.ndarray
    y: np.ndarray
    step: object  # the TrainingStep that trained it

    @property
    def mus(self):
        return self.step.mus

    @property
    def rhos(self):
        return self.step.rhos

    def predict(self, x, num_samples=200, seed=0):
        """``predict_regression`` at inputs ``x`` (N,)."""
        sigmas = self.config.predictive_sigmas(self.mus, self.rhos)
        return predict_regression(x, self.mus, sigmas, self.config, self.scaling, num_samples,
                                  seed)


def fit_regression(problem, model="bbb", seed=0, ctx=None, log=None, **fields):
    """Train ``model`` on ``problem`` (a name or a ``Problem``) with the data of ``seed``;
    ``fields`` override the config (``regression_config``). Deterministic for a seed."""
    import mxnet as mx
    from mxnet import nd
    from .learning.step import TrainingStep
    from .learning.loop import changed_start, check_finite
    ctx = ctx or mx.cpu()
    problem = PROBLEMS[problem] if isinstance(problem, str) else problem
    x, y = problem.data(seed)
    scaling = Scaling.of(x, y)
    config = regression_config(problem, model, seed, scaling, **fields)
    training = TrainingStep(config.build_plan(), ctx)
    X = nd.array(((x - scaling.x_mean) / scaling.x_sd)[:, None], ctx=ctx, dtype="float32")
    Y = nd.array(((y - scaling.y_mean) / scaling.y_sd)[:, None], ctx=ctx, dtype="float32")
    pending, started = [], time.time()
    for epoch in range(config.epochs):
        training.start_epoch(epoch)
        pending.append(training(X, Y, config.kl_scale))
        if len(pending) == CHECK_EVERY or epoch == config.epochs - 1:
            first = epoch - len(pending) + 1
            loss = check_finite(pending, training, [(e, 0) for e in range(first, epoch + 1)],
                                changed_start(config))
            if log is not None and ((epoch + 1) % LOG_EVERY == 0 or epoch == config.epochs - 1):
                log("step %d/%d  loss %.1f (mean of the last %d)  %.1f s" % (
                    epoch + 1, config.epochs, loss / len(pending), len(pending),
                    time.time() - started))
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
    from mxnet import nd
    from .analysis.uncertainty import sampled_outputs
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
    """The problem's figures of merit, a dict."""
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


def regression_title(problem, config, num_samples):
    """The figure's title: the problem, the model, the choices of its posterior that differ
    from the defaults and the predictive's draws."""
    default = Config()
    settings = [config.model]
    if config.model_kind.learns_sigma:
        if config.estimator != default.estimator:
            settings.append("%s estimator" % config.estimator)
        if config.kl_direction != default.kl_direction:
            settings.append("%s KL" % config.kl_direction)
    return "%s, %s, %d draws" % (problem.name, ", ".join(settings), num_samples)


def draw_regression(result, path, num_samples=200, seed=0):
    """``plots.plot_regression`` of ``result`` over its problem's plot range."""
    # matplotlib loads where a figure is drawn, not when the command parses its flags
    from .plots import plot_regression
    grid = np.linspace(*result.problem.plot_range, 400)
    title = regression_title(result.problem, result.config, num_samples)
    plot_regression(result.problem, result.x, result.y, grid,
                    result.predict(grid, num_samples, seed), title, path)


def run_regression(problem, model, out, seed=0, ctx=None, test_samples=None, log=None,
                   **fields):
    """Train, then write the run directory ``out``: config.json (with the problem and the
    scaling), checkpoint.params, metrics.json (the figures) and regression.png, from
    ``test_samples`` draws of the predictive (default: ``TEST_SAMPLES``; 0 for a
    deterministic model)."""
    import mxnet as mx
    from .learning.context import context_name
    ctx = ctx or mx.cpu()
    run = out if isinstance(out, RunDirectory) else RunDirectory(out)
    problem = PROBLEMS[problem] if isinstance(problem, str) else problem
    # the config is checked before the directory is made
    config = regression_config(problem, model, seed, **fields)
    kind = config.model_kind
    if test_samples is None:
        test_samples = TEST_SAMPLES if kind.prediction_draws else 0
    kind.check_test_samples(test_samples, MAX_PREDICTIVE_SAMPLES)
    files = {CONFIG_FILE: outputs.RUN_CONFIG, CHECKPOINT_FILE: outputs.PARAMETERS,
             METRICS_FILE: outputs.JSON, PLOT_FILE: outputs.PNG}
    with run.create(files=files).locked():
        if run.holds_run():
            raise CheckpointError("%s already holds a run; choose another {out_dir}", run.path)
        if log is not None:
            log("training %s on %s (%d points, %d steps), writing to %s" % (
                config.model, problem.name, len(problem.inputs), config.epochs, run.path))
        result = fit_regression(problem, model, seed, ctx, log, **fields)
        metrics = dict(problem=problem.name, model=model, seed=seed,
                       test_samples=test_samples, **figures(result, test_samples, seed))
        not_finite = sorted(name for name, value in _numbers(metrics) if not math.isfinite(value))
        if not_finite:
            # nothing is written: a run's figures are numbers a reader can take
            raise NonFiniteResult("the fitted model's %s came out NaN or infinite (a setting "
                                  "overflows float32); nothing is written to %s",
                                  ", ".join(not_finite), run.path)
        run.write_config(result.config, ctx=context_name(ctx), problem=problem.name,
                         scaling=dataclasses.asdict(result.scaling))
        run.save_parameters(result.step, result.config.epochs)
        paths = [run.file(METRICS_FILE), run.file(PLOT_FILE)]
        outputs.write_json(paths[0], metrics)
        draw_regression(result, paths[1], test_samples, seed)
    return result, metrics, paths


def _numbers(value, name=""):
    """``(name, number)`` for every number in ``value`` (nested dicts and lists)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, "%s.%s" % (name, key) if name else key)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _numbers(item, "%s[%d]" % (name, i))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield name, value


def describe_figures(metrics):
    """The figures of ``metrics`` (``figures``' dict) as lines a person reads."""
    if "coverage_95" in metrics:
        return ["aleatoric sd, mean over the data's range: %.2f" % metrics["aleatoric_sd_mean"],
                "epistemic sd: %.2f over the data's range, %.2f at x = -1 and 1 (%.1f times "
                "as much)" % (metrics["epistemic_sd_mean"], metrics["epistemic_sd_at_edges"],
                              metrics["epistemic_ratio"]),
                "95%% intervals hold %.1f%% of %d fresh points" % (
                    100 * metrics["coverage_95"], metrics["fresh_points"])]
    return ["95%% band holds the true curve at the inputs: %s"
            % ("yes" if metrics["band_holds_truth"] else "no"),
            "band width: %.2f at the inputs, %.1f / %.1f at x = -4 / 4 (%.1f times as wide)"
            % (metrics["band_width_at_data"], *metrics["band_width_at_4"],
               metrics["width_ratio"])]

"""The PNG figures the commands write, each drawn by a ``*_figure`` function that returns the
matplotlib ``Figure`` (the tests read its axes) and saved atomically by a ``plot_*`` function."""
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from .outputs import save_figure


def new_figure(figsize):
    """A figure with its own Agg canvas (no pyplot)."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def save(fig, path):
    fig.tight_layout()
    save_figure(fig, path)


def plain_number(value, position=None):
    """A tick label without scientific notation: 0.05, 2, 40, 300."""
    return "%g" % float("%.3g" % value)


def readable_log_axis(ax):
    """Make ``ax``'s y axis logarithmic, labelled at 1, 2 and 5 times each power of ten with
    plain numbers (the other minor ticks unlabelled), with a grid at every tick."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.yaxis.set_minor_locator(LogLocator(base=10.0, subs=np.arange(1.0, 10.0)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3, which="both")


def size_error_axes(ax, xlabel):
    """Both of ``ax``'s axes logarithmic: the y axis as ``readable_log_axis`` makes it (test
    error in %), the x axis a size ratio labelled at 1, 2 and 5 times each power of ten."""
    readable_log_axis(ax)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test error (%)")


def accuracy_figure(history):
    """Test accuracy per epoch, and validation and train accuracy for the epochs whose
    records hold them (a resumed run may measure train accuracy for some epochs only)."""
    fig = new_figure((6, 4))
    ax = fig.add_subplot(1, 1, 1)
    for key, style, label in (("test_accuracy", "o-", "test (mean weights)"),
                              ("train_accuracy", "s--", "train"),
                              ("validation_accuracy", "^:", "validation")):
        records = [r for r in history if key in r]
        if records:
            ax.plot([r["epoch"] for r in records], [r[key] for r in records], style,
                    label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def plot_accuracy(history, path):
    save(accuracy_figure(history), path)


def weights_figure(mus, sigmas):
    """Histograms of all mu and sigma, and the density of weight W1[0, 0] (as the tutorial)."""
    mu = np.concatenate([m.asnumpy().ravel() for m in mus])
    sigma = np.concatenate([s.asnumpy().ravel() for s in sigmas])
    fig = new_figure((12, 3.6))
    ax_mu, ax_sigma, ax_one = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    ax_mu.hist(finite(mu), bins=200, histtype="stepfilled")
    ax_mu.set_xlabel("mu")
    ax_mu.set_title("posterior means (%d parameters%s)" % (mu.size, not_drawn(mu)))
    ax_sigma.hist(finite(sigma), bins=200, histtype="stepfilled")
    ax_sigma.set_xlabel("sigma = softplus(rho)")
    ax_sigma.set_title("posterior standard deviations")
    m0 = float(mus[0].asnumpy().flat[0])
    s0 = float(sigmas[0].asnumpy().flat[0])
    x = np.linspace(m0 - 4 * s0, m0 + 4 * s0, 200)
    ax_one.plot(x, np.exp(-0.5 * ((x - m0) / s0) ** 2) / (s0 * np.sqrt(2 * np.pi)))
    ax_one.set_xlabel("w")
    ax_one.set_title("q(W1[0,0]) = N(%.3g, %.3g^2)" % (m0, s0))
    return fig


def finite(values):
    """The finite entries of ``values``: a histogram's range is taken from them (NaN or
    infinity in it would make NumPy's bins fail)."""
    values = np.asarray(values).ravel()
    return values[np.isfinite(values)]


def not_drawn(values):
    """Words for a title where some of ``values`` are not finite: how many are not drawn."""
    count = int(np.size(values) - np.isfinite(values).sum())
    return ", %d non-finite not drawn" % count if count else ""


def plot_weights(mus, sigmas, path):
    save(weights_figure(mus, sigmas), path)


def pruning_figure(rows, criterion="signal-to-noise ratio |mu|/sigma"):
    """Test error (%) against the proportion of parameters removed by ``criterion``."""
    fig = new_figure((6, 4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([r["proportion"] * 100 for r in rows], [r["test_error"] * 100 for r in rows], "o-")
    ax.set_xlabel("parameters removed (%%), lowest %s first" % criterion)
    ax.set_ylabel("test error (%)")
    readable_log_axis(ax)
    return fig


def plot_pruning(rows, path, criterion="signal-to-noise ratio |mu|/sigma"):
    save(pruning_figure(rows, criterion), path)


def snr_figure(snr_db, cuts, criterion="signal-to-noise ratio |mu|/sigma"):
    """Histogram of the ranking criterion in dB, each proportion's cut-off a line of its own
    colour, named in a legend beside the axes (cut-offs a fraction of a dB apart would
    overlap as labels on the plot)."""
    fig = new_figure((8.5, 4))
    ax = fig.add_subplot(1, 1, 1)
    finite = snr_db[np.isfinite(snr_db)]
    ax.hist(finite, bins=200, color="0.6", histtype="stepfilled")
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
               "tab:pink", "tab:olive", "tab:cyan"]
    for k, (proportion, cut) in enumerate(sorted(cuts.items())):
        ax.axvline(cut, color=palette[k % len(palette)], lw=1.2,
                   ls=("-", "--", ":")[(k // len(palette)) % 3],
                   label="%g%% removed: below %.1f dB" % (proportion * 100, cut))
    ax.set_xlabel("%s (dB)" % criterion)
    ax.set_ylabel("parameters")
    if cuts:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def plot_snr(snr_db, cuts, path, criterion="signal-to-noise ratio |mu|/sigma"):
    save(snr_figure(snr_db, cuts, criterion), path)


def uncertainty_figure(entropies, probs, labels):
    """Predictive entropy histograms (one per dataset) and the reliability diagram."""
    from .analysis.uncertainty import expected_calibration_error, reliability
    fig = new_figure((11, 4))
    ax = fig.add_subplot(1, 2, 1)
    for name, values in entropies.items():
        ax.hist(finite(values), bins=50, range=(0, np.log2(probs.shape[1])), alpha=0.5,
                density=True, histtype="stepfilled",
                label="%s (mean %.2f%s)" % (name, values.mean(), not_drawn(values)))
    ax.set_xlabel("predictive entropy (bits)")
    ax.set_ylabel("density")
    ax.legend()
    ax = fig.add_subplot(1, 2, 2)
    counts, confidence, accuracy = reliability(probs, labels)
    centers = (np.arange(len(counts)) + 0.5) / len(counts)
    used = counts > 0
    ax.bar(centers[used], accuracy[used], width=1.0 / len(counts), edgecolor="k", alpha=0.7,
           label="accuracy")
    ax.plot([0, 1], [0, 1], "k--", label="perfect calibration")
    ax.plot(centers[used], confidence[used], "r_", ms=14, mew=2, label="mean confidence")
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.set_title("reliability, ECE %.4f" % expected_calibration_error(probs, labels))
    # below the axes: inside them it would cover bars
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8)
    return fig


def plot_uncertainty(entropies, probs, labels, path):
    save(uncertainty_figure(entropies, probs, labels), path)


def sweep_figure(table, proportions):
    """Test error against the proportion removed, one curve per setting: the median over its
    seeds, the bars their range."""
    fig = new_figure((6, 4))
    ax = fig.add_subplot(1, 1, 1)
    for row in table:
        stats = [row["test_error"]["%g" % p] for p in proportions]
        medians = [100 * s["median"] for s in stats]
        ax.errorbar([100 * p for p in proportions], medians,
                    yerr=[[m - 100 * s["min"] for m, s in zip(medians, stats)],
                          [100 * s["max"] - m for m, s in zip(medians, stats)]],
                    marker="o", capsize=3, label="%s (n=%d)" % (row["setting"], row["n"]))
    ax.set_xlabel("parameters removed by signal-to-noise ratio (%)")
    ax.set_ylabel("test error (%), median and range over seeds")
    readable_log_axis(ax)
    ax.legend(fontsize=8)
    return fig


def plot_sweep(table, proportions, path):
    save(sweep_figure(table, proportions), path)


def regression_figure(problem, x, y, grid, split, title):
    """The data, the true curve, the predictive mean and its 95% bands (total and epistemic)
    over ``grid``; below, for a problem with noise in its data, the aleatoric and epistemic
    standard deviations apart (``split``: a ``PredictiveSplit`` at ``grid``)."""
    rows = 2 if problem.noise_sd > 0 else 1
    fig = new_figure((7, 4.5 * rows + 0.6))
    ax = fig.add_subplot(rows, 1, 1)
    lower, upper = split.interval(0.95)
    ax.fill_between(grid, lower, upper, color="tab:blue", alpha=0.2,
                    label="95%: aleatoric + epistemic")
    e_lower, e_upper = split.interval(0.95, split.epistemic_variance)
    ax.fill_between(grid, e_lower, e_upper, color="tab:blue", alpha=0.4, label="95%: epistemic")
    ax.plot(grid, problem.truth(grid), "k--", lw=1, label="true curve")
    ax.plot(grid, split.mean, color="tab:blue", lw=1.5, label="predictive mean")
    ax.plot(x, y, "o", color="tab:red", ms=3, label="data")
    # the total band far from the data can be hundreds of times wider than the data (a
    # heteroscedastic head extrapolates its log variance): the plot spans the epistemic band
    span = np.concatenate([e_lower, e_upper, y])
    pad = 0.05 * np.ptp(span)
    ax.set_ylim(span.min() - pad, span.max() + pad)
    ax.set_title(title)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    # below the axes, where it covers neither the band nor the data
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    if rows == 2:
        ax = fig.add_subplot(rows, 1, 2)
        ax.plot(grid, np.sqrt(split.aleatoric_variance), label="aleatoric sd")
        ax.plot(grid, np.sqrt(split.epistemic_variance), label="epistemic sd")
        ax.axhline(problem.noise_sd, color="k", ls="--", lw=1, label="noise sd of the data")
        ax.set_xlabel("x")
        ax.set_ylabel("standard deviation (y's units)")
        readable_log_axis(ax)
        ax.legend(fontsize=8)
    return fig


def plot_regression(problem, x, y, grid, split, title, path):
    save(regression_figure(problem, x, y, grid, split, title), path)


SHIFT_METRICS = (("accuracy", "accuracy"), ("nll", "NLL (nats)"), ("brier", "Brier score"),
                 ("ece", "ECE"), ("mean_entropy", "mean predictive entropy (bits)"),
                 ("auroc", "AUROC, shifted vs unshifted by entropy"))


def shift_figure(report):
    """Each metric of a ``robustness.shift_report`` against the shift's severity."""
    return shift_comparison_figure({None: [report]})


def shift_comparison_figure(groups):
    """Each metric against the shift's severity for several models: ``groups`` maps a label
    (None: one model, no legend) to its reports of one shift (the runs of several seeds, say),
    drawn as their median with the range between the lowest and the highest."""
    fig = new_figure((12, 6.4))
    first = next(iter(groups.values()))[0]
    severities = [row["severity"] for row in first["rows"]]
    for k, (key, label) in enumerate(SHIFT_METRICS):
        ax = fig.add_subplot(2, 3, k + 1)
        for name, reports in groups.items():
            values = np.array([[row[key] for row in report["rows"]] for report in reports])
            line, = ax.plot(severities, np.median(values, axis=0), "o-", ms=3, label=name)
            if len(reports) > 1:
                ax.fill_between(severities, values.min(axis=0), values.max(axis=0),
                                color=line.get_color(), alpha=0.2)
        ax.set_xlabel("%s (%s)" % (first["shift"], first["unit"]))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if k == 0 and None not in groups:
            ax.legend(fontsize=7)
    return fig


def plot_shift(report, path):
    save(shift_figure(report), path)


def plot_shift_comparison(groups, path):
    save(shift_comparison_figure(groups), path)


def size_error_figure(curves, chosen=None):
    """Test error against how many times smaller than the float32 network a compressed file
    is, one curve per label of ``curves`` ({label: [(times smaller, error %), ...]}), both axes
    logarithmic; ``chosen`` ({label: (times smaller, error %)}) marks the file each label's
    ``compress`` chose on validation images."""
    fig = new_figure((7, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    for label, points in curves.items():
        points = sorted(points)
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], "o-", ms=3, label=label)
        if chosen and label in chosen:
            ax.plot(*chosen[label], "*", ms=13, color=line.get_color(), mec="k")
    size_error_axes(ax, "times smaller than the float32 network (compressed file)")
    ax.legend(fontsize=8, title=("stars: the file compress chose on validation images"
                                 if chosen else None), title_fontsize=7)
    return fig


def plot_size_error(curves, path, chosen=None):
    save(size_error_figure(curves, chosen), path)

"""PNG figures of a run, written atomically. Uses matplotlib's object API, so a notebook's
backend is untouched."""
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .files import save_figure


def _save(fig, path):
    FigureCanvasAgg(fig)
    fig.tight_layout()
    save_figure(fig, path)


def plot_accuracy(history, path):
    """Test accuracy per epoch, and validation and train accuracy for the epochs whose
    records hold them (a resumed run may measure train accuracy for some epochs only)."""
    fig = Figure(figsize=(6, 4))
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
    _save(fig, path)


def plot_weights(mus, sigmas, path):
    """Histograms of all mu and sigma, and the density of weight W1[0, 0] (as the tutorial)."""
    mu = np.concatenate([m.asnumpy().ravel() for m in mus])
    sigma = np.concatenate([s.asnumpy().ravel() for s in sigmas])
    fig = Figure(figsize=(12, 3.6))
    ax_mu, ax_sigma, ax_one = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    ax_mu.hist(mu, bins=200)
    ax_mu.set_xlabel("mu")
    ax_mu.set_title("posterior means (%d parameters)" % mu.size)
    ax_sigma.hist(sigma, bins=200)
    ax_sigma.set_xlabel("sigma = softplus(rho)")
    ax_sigma.set_title("posterior standard deviations")
    m0 = float(mus[0].asnumpy().flat[0])
    s0 = float(sigmas[0].asnumpy().flat[0])
    x = np.linspace(m0 - 4 * s0, m0 + 4 * s0, 200)
    ax_one.plot(x, np.exp(-0.5 * ((x - m0) / s0) ** 2) / (s0 * np.sqrt(2 * np.pi)))
    ax_one.set_xlabel("w")
    ax_one.set_title("q(W1[0,0]) = N(%.3g, %.3g^2)" % (m0, s0))
    _save(fig, path)


def plot_pruning(rows, path, criterion="signal-to-noise ratio |mu|/sigma"):
    """Test error (%) against the proportion of parameters removed by ``criterion``."""
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([r["proportion"] * 100 for r in rows], [r["test_error"] * 100 for r in rows], "o-")
    ax.set_xlabel("parameters removed (%%), lowest %s first" % criterion)
    ax.set_ylabel("test error (%)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    _save(fig, path)


def plot_snr(snr_db, cuts, path, criterion="signal-to-noise ratio |mu|/sigma"):
    """Histogram of the ranking criterion in dB, each proportion's cut-off marked."""
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot(1, 1, 1)
    finite = snr_db[np.isfinite(snr_db)]
    ax.hist(finite, bins=200, color="0.4")
    top = ax.get_ylim()[1]
    for k, (proportion, cut) in enumerate(sorted(cuts.items())):
        ax.axvline(cut, color="tab:red", lw=0.8)
        # neighbouring cut-offs can lie close together: their labels take turns in height
        ax.text(cut, top * (0.97 - 0.12 * (k % 3)), " %g%%" % (proportion * 100), va="top",
                fontsize=8, color="tab:red")
    ax.set_xlabel("%s (dB)" % criterion)
    ax.set_ylabel("parameters")
    _save(fig, path)

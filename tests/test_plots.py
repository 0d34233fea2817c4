"""The figures a person reads: a log axis labelled in plain numbers inside the error range, the
cut-offs of the SNR histogram named without overlapping, legends beside what they name, every
axis labelled."""
import numpy as np

from gluon_bbb import plots
from gluon_bbb.toy_problems import PROBLEMS, split_uncertainty


def visible_labels(ax, axis="y"):
    """The tick labels drawn inside the axis's view, with their values."""
    ax.figure.canvas.draw()
    low, high = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    getter = ax.yaxis if axis == "y" else ax.xaxis
    return {round(tick.get_loc(), 9): tick.label1.get_text()
            for tick in getter.get_major_ticks()
            if low <= tick.get_loc() <= high and tick.label1.get_visible()}


def assert_plain_numbers_in(ax, low, high, wanted):
    labels = visible_labels(ax)
    for value, text in labels.items():
        assert "$" not in text and "^" not in text and "times" not in text, labels
        if text:
            assert float(text) == value, labels
    inside = {text for value, text in labels.items() if low <= value <= high}
    assert wanted <= inside, (labels, wanted)


def test_the_pruning_curve_is_labelled_in_the_error_range():
    rows = [{"proportion": p, "test_error": e} for p, e in
            ((0.0, 0.017), (0.5, 0.018), (0.95, 0.022), (0.98, 0.031), (0.99, 0.048))]
    fig = plots.pruning_figure(rows)
    assert_plain_numbers_in(fig.axes[0], 1.7, 4.8, {"2"})
    # a curve that ends at chance is labelled all along
    rows.append({"proportion": 1.0, "test_error": 0.9})
    fig = plots.pruning_figure(rows)
    assert_plain_numbers_in(fig.axes[0], 1.7, 90, {"2", "5", "10", "20", "50"})


def test_the_sweep_curves_are_labelled_in_the_error_range():
    table = [{"setting": "prior=gaussian", "n": 3, "test_error": {
        "0": {"median": 0.019, "min": 0.018, "max": 0.02},
        "0.95": {"median": 0.023, "min": 0.021, "max": 0.025},
        "0.98": {"median": 0.049, "min": 0.046, "max": 0.052}}}]
    fig = plots.sweep_figure(table, [0, 0.95, 0.98])
    assert_plain_numbers_in(fig.axes[0], 1.8, 5.2, {"2", "5"})
    assert fig.axes[0].get_ylabel()


def test_the_snr_cut_offs_are_named_in_a_legend_beside_the_histogram():
    snr_db = np.random.default_rng(0).normal(0, 5, size=10000)
    cuts = {0.5: 0.1, 0.95: 8.2, 0.98: 10.2, 0.99: 11.6}  # the last three close together
    fig = plots.snr_figure(snr_db, cuts)
    fig.canvas.draw()
    ax = fig.axes[0]
    assert len(ax.texts) == 0  # no labels on the plot, where neighbours would overlap
    legend = ax.get_legend()
    names = [text.get_text() for text in legend.get_texts()]
    assert names == ["50% removed: below 0.1 dB", "95% removed: below 8.2 dB",
                     "98% removed: below 10.2 dB", "99% removed: below 11.6 dB"]
    renderer = fig.canvas.get_renderer()
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    assert len({line.get_color() for line in ax.lines}) == len(cuts)


def test_the_regression_figure_labels_both_panels_and_keeps_its_legend_off_the_band():
    problem = PROBLEMS["sine"]
    grid = np.linspace(*problem.plot_range, 50)
    rng = np.random.default_rng(1)
    means = problem.truth(grid) + rng.normal(0, 1, size=(20, 50)) * (0.5 + np.abs(grid) * 20)
    split = split_uncertainty(means, np.full((20, 50), 4.0))
    x, y = problem.data(0)
    fig = plots.regression_figure(problem, x, y, grid, split, "sine")
    top, bottom = fig.axes
    assert top.get_ylabel() and bottom.get_ylabel() and bottom.get_xlabel()
    # the standard deviations run from about 2 to 40: plain numbers between them
    assert_plain_numbers_in(bottom, 2, 40, {"2", "5", "10", "20"})
    renderer = fig.canvas.get_renderer()
    legend = top.get_legend()
    assert not legend.get_window_extent(renderer).overlaps(top.get_window_extent(renderer))


def test_the_shift_comparison_draws_each_models_median_and_range():
    def report(accuracies):
        return {"shift": "rotation", "unit": "degrees",
                "rows": [dict({key: 0.1 for key, _ in plots.SHIFT_METRICS}, severity=s,
                              accuracy=a) for s, a in zip((0, 15, 30), accuracies)]}
    fig = plots.shift_comparison_figure({
        "ensemble": [report([0.9, 0.8, 0.5])],
        "bbb": [report([0.9, 0.7, 0.4]), report([0.8, 0.6, 0.2]), report([0.7, 0.9, 0.3])]})
    ax = fig.axes[0]
    lines = {line.get_label(): line.get_ydata().tolist() for line in ax.get_lines()}
    assert lines == {"ensemble": [0.9, 0.8, 0.5], "bbb": [0.8, 0.7, 0.3]}
    assert ax.get_xlabel() == "rotation (degrees)" and ax.get_ylabel() == "accuracy"
    # the range of the three seeds, shaded: lowest to highest at every severity
    band, = ax.collections
    vertices = band.get_paths()[0].vertices
    assert {0.7, 0.6, 0.2} <= set(np.round(vertices[:, 1], 9))
    assert {0.9, 0.4} <= set(np.round(vertices[:, 1], 9))
    assert [a.get_ylabel() for a in fig.axes] == [label for _, label in plots.SHIFT_METRICS]

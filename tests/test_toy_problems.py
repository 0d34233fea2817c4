"""toy_problems.py: the uncertainty split against NumPy, the figures of the two toy problems
on seed 0, Monte Carlo dropout's regression, the titles and a problem with nothing to train."""
import numpy as np
import pytest

from gluon_bbb import ConfigError
from gluon_bbb.toy_problems import (PROBLEMS, figures, fit_regression, regression_config,
                                           regression_title, split_uncertainty)


def test_a_regression_with_nothing_to_train_is_refused():
    from gluon_bbb.toy_problems import regression_config
    assert regression_config("quartic", epochs=1).epochs == 1
    for epochs in (0, -5):
        with pytest.raises(ConfigError, match=r"epochs must be an integer from 1 to 1000000 "
                                              r"\(the training steps; 0 trains nothing\), "
                                              r"got %d" % epochs):
            regression_config("quartic", epochs=epochs)



def test_the_toy_problems_train_the_model_kinds_their_settings_are_for():
    # IVON's update takes settings of its own (docs/REGRESSION.md): a config the step would
    # refuse later, naming flags the command does not have, is refused here naming --model
    assert [regression_config("sine", model).model for model in ("bbb", "mcdropout",
            "deterministic", "mlp")] == ["bbb", "mcdropout", "deterministic", "deterministic"]
    with pytest.raises(ConfigError, match=r"^model must be one of bbb, mcdropout, deterministic "
                                          r"for a toy problem, got 'ivon'$"):
        regression_config("sine", "ivon")

def test_split_uncertainty_matches_numpy():
    rng = np.random.default_rng(3)
    means, variances = rng.normal(size=(50, 7)), rng.uniform(0.1, 2.0, size=(50, 7))
    split = split_uncertainty(means, variances)
    mean = means.sum(axis=0) / 50
    epistemic = ((means - mean) ** 2).sum(axis=0) / 50
    aleatoric = variances.sum(axis=0) / 50
    np.testing.assert_allclose(split.mean, mean, rtol=1e-12)
    np.testing.assert_allclose(split.epistemic_variance, epistemic, rtol=1e-12)
    np.testing.assert_allclose(split.aleatoric_variance, aleatoric, rtol=1e-12)
    np.testing.assert_allclose(split.total_variance, epistemic + aleatoric, rtol=1e-12)
    lower, upper = split.interval(0.95)
    np.testing.assert_allclose(upper, mean + 1.959963985 * np.sqrt(epistemic + aleatoric),
                               rtol=1e-9)
    lower, upper = split.interval(0.5, split.epistemic_variance)
    np.testing.assert_allclose(lower, mean - 0.6744897502 * np.sqrt(epistemic), rtol=1e-9)


@pytest.mark.slow
def test_sine_with_bayes_by_backprop_separates_the_two_uncertainties():
    # seed 2: aleatoric sd 2.08 against the data's 2, epistemic 11.8 times as large at x = +-1
    # as over the data, 95.6% of fresh points inside the 95% intervals (measured)
    numbers = figures(fit_regression("sine", "bbb", seed=2))
    assert abs(numbers["aleatoric_sd_mean"] - 2.0) <= 0.3, numbers
    assert numbers["epistemic_ratio"] >= 3.0, numbers
    assert 0.93 <= numbers["coverage_95"] <= 0.98, numbers


@pytest.mark.slow
def test_quartic_band_holds_the_curve_and_widens_away_from_the_data():
    # seed 3: the band 1.02 wide at the six inputs, 53 times as wide at x = +-4 (measured)
    numbers = figures(fit_regression("quartic", "bbb", seed=3))
    assert numbers["band_holds_truth"], numbers
    assert numbers["width_ratio"] >= 10.0, numbers


def test_the_figure_title_names_the_choices_that_differ_from_the_defaults():
    quartic = PROBLEMS["quartic"]
    assert regression_title(quartic, regression_config("quartic"), 200) == "quartic, bbb, 200 draws"
    forward = regression_config("quartic", kl_direction="forward", estimator="flipout")
    assert (regression_title(quartic, forward, 50)
            == "quartic, bbb, flipout estimator, forward KL, 50 draws")
    dropout = regression_config("quartic", "mcdropout")
    assert regression_title(quartic, dropout, 200) == "quartic, mcdropout, 200 draws"


@pytest.mark.slow
def test_mc_dropout_regression_is_deterministic_and_draws_masks(ctx):
    runs = [fit_regression("quartic", "mcdropout", seed=1, ctx=ctx, epochs=300) for _ in range(2)]
    for a, b in zip(runs[0].mus, runs[1].mus):
        assert a.context == ctx
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    assert "dropout:0.1" in str(runs[0].config.build_network())
    x = np.linspace(-3, 3, 7)
    split = runs[0].predict(x, num_samples=20, seed=2)
    again = runs[1].predict(x, num_samples=20, seed=2)
    np.testing.assert_array_equal(split.mean, again.mean)
    assert np.all(split.epistemic_variance > 0)  # masks differ from draw to draw
    # the fixed noise of 0.1 (in the data's units) is every draw's aleatoric variance
    np.testing.assert_allclose(split.aleatoric_variance, 0.01, rtol=1e-5)
    assert np.all(runs[0].predict(x, num_samples=0).epistemic_variance == 0)

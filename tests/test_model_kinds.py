"""family/model_kinds.py: what each kind learns and draws, its names, the draws its predictive
takes, and the sigmas that rank its parameters for pruning."""
import numpy as np
import pytest
from mxnet import nd

from gluon_bbb import ConfigError
from gluon_bbb.family.model_kinds import MODEL_KINDS, model_kind
from gluon_bbb.family.parametrizations import Softplus


def test_each_kind_by_its_name_and_the_old_one():
    assert [kind.name for kind in MODEL_KINDS] == ["bbb", "mcdropout", "deterministic", "ivon"]
    assert model_kind("mlp") is model_kind("deterministic")
    assert model_kind(MODEL_KINDS[0]) is MODEL_KINDS[0]
    with pytest.raises(ConfigError, match="model must be one of bbb, mcdropout, deterministic, "
                                          "ivon"):
        model_kind("gp")


def test_what_each_kind_learns_and_how_many_draws_it_predicts_with():
    learns = {kind.name: (kind.learns_sigma, kind.prior_as_weight_decay, kind.natural_gradient,
                          kind.default_test_samples) for kind in MODEL_KINDS}
    assert learns == {"bbb": (True, False, False, 10), "mcdropout": (False, True, False, 10),
                      "deterministic": (False, False, False, 0), "ivon": (True, False, True, 10)}


def test_the_draws_a_predictive_takes():
    bbb, deterministic = model_kind("bbb"), model_kind("deterministic")
    bbb.check_test_samples(1, 100)
    bbb.check_test_samples(100, 100)
    deterministic.check_test_samples(0, 100)
    for count in (0, 101, True, 2.0):
        with pytest.raises(ConfigError, match=r"test_samples must be an integer in \[1, 100\]"):
            bbb.check_test_samples(count, 100)
    with pytest.raises(ConfigError, match="samples must be 0 for a deterministic network"):
        deterministic.check_test_samples(3, 100, field="samples")


def test_pruning_ranks_by_the_posteriors_sigma_or_by_magnitude(ctx):
    mus = [nd.array([[0.5, -2.0]], ctx=ctx)]
    rhos = [nd.array([[-1.0, 3.0]], ctx=ctx)]
    bbb = model_kind("bbb").ranking_sigmas(mus, rhos, Softplus())
    np.testing.assert_allclose(bbb[0].asnumpy(), np.log1p(np.exp([[-1.0, 3.0]])), rtol=1e-6)
    for name in ("mcdropout", "deterministic"):
        ones = model_kind(name).ranking_sigmas(mus, rhos, Softplus())
        assert ones[0].asnumpy().tolist() == [[1.0, 1.0]]
        assert model_kind(name).prediction_sigmas(rhos, Softplus()) is None
    assert model_kind("bbb").pruning_criterion[0] == "snr"

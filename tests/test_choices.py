"""family/choices.py: names looked up as config.json spells them, an unknown one refused naming
its field, and a user's class that would take a built-in one's name refused."""
import pytest

from gluon_bbb import Config, ConfigError
from gluon_bbb.family import estimators, parametrizations, priors
from gluon_bbb.family.priors import GaussianPrior, Prior



def test_a_users_class_cannot_take_a_built_in_name():
    from gluon_bbb import Estimator, Parametrization
    for base, name in ((Prior, "gaussian"), (Estimator, "lrt"), (Parametrization, "softplus")):
        with pytest.raises(ValueError, match="name %r is gluon_bbb's own" % name):
            type("Mine", (base,), {"name": name})
    assert Config(prior="gaussian").build_prior() == GaussianPrior(1.0)


def test_a_registry_reads_either_spelling_and_names_its_field_for_an_unknown_name():
    assert priors.KNOWN.kind("scale-mixture") is priors.KNOWN.kind("scale_mixture")
    assert priors.KNOWN.kind("scale_mixture").name == "scale_mixture"
    assert [cls.name for cls in priors.KNOWN.built_in()] == [
        "gaussian", "scale_mixture", "log_uniform", "none"]
    for known, field in ((priors.KNOWN, "prior"), (estimators.KNOWN, "estimator"),
                         (parametrizations.KNOWN, "parametrization")):
        with pytest.raises(ConfigError, match=r"%s must be one of %s" % (field, ", ".join(known))):
            known.kind("no-such-name")


def test_a_registry_finds_a_built_in_class_and_nothing_else():
    class Wide(GaussianPrior):
        name = "wide_test"
    assert priors.KNOWN.built_in_kind("scale-mixture") is priors.ScaleMixturePrior
    for other in ("wide_test", "no-such-name", GaussianPrior(), None):
        assert priors.KNOWN.built_in_kind(other) is None

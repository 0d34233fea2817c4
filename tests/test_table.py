"""native/table.py: the combinations the C kernels serve, by name and by code (the kernels'
answers: test_library.py)."""
from gluon_bbb.native import table


def test_the_served_combinations_are_those_the_table_lists():
    estimators, parametrizations = ("sample", "flipout", "lrt"), ("softplus", "log_variance")
    expected = set()
    for estimator in estimators:
        expected |= {(estimator, "mc", prior, "softplus")
                     for prior in ("gaussian", "scale_mixture")}
        expected.add((estimator, "analytic", "gaussian", "softplus"))
        expected |= {(estimator, "analytic", prior, parametrization)
                     for prior in ("log_uniform", "none") for parametrization in parametrizations}
    assert table.SERVED == expected and len(expected) == 3 * (2 + 1 + 4)
    # the scale mixture has no closed form, the improper priors no density
    assert not table.serves(table.DATA_TERMS["lrt"], table.KL_ESTIMATES["analytic"],
                            table.PRIORS["scale_mixture"], table.PARAMETRIZATIONS["softplus"])
    assert not table.serves(table.DATA_TERMS["sample"], table.KL_ESTIMATES["mc"],
                            table.PRIORS["log_uniform"], table.PARAMETRIZATIONS["log_variance"])
    for e, k, p, s in expected:
        assert table.serves(table.DATA_TERMS[e], table.KL_ESTIMATES[k], table.PRIORS[p],
                            table.PARAMETRIZATIONS[s])
    # an object the kernels do not know has no code
    assert not table.serves(None, 0, 0, 0)
    assert table.DENSITIES == {table.PRIORS["gaussian"], table.PRIORS["scale_mixture"]}


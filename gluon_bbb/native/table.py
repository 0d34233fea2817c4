"""What the C kernels (``_fused.c``, loaded by ``native/library.py``) serve, declared once: the codes
Python hands them for each estimator's data term, KL estimate, prior and parametrization, and
the table of the combinations they implement. Everything else trains on the ndarray backend."""

# the data term's gradients as an estimator gives them (the C enum of that name)
DATA_TERMS = {"sample": 0,    # WEIGHTS_SAMPLED: dNLL/dw
              "flipout": 1,   # EPS_COEFFICIENT: dNLL/dmu and the coefficient of eps
              "lrt": 2}       # SIGMA_GIVEN: dNLL/dmu and dNLL/dsigma
# the KL estimates, reverse direction KL(q || P) only
KL_ESTIMATES = {"mc": 0, "analytic": 1}
PRIORS = {"gaussian": 0, "scale_mixture": 1, "log_uniform": 2, "none": 3}
# the log-uniform prior's constants _fused.c is compiled with (LOG_UNIFORM_K1..K3,
# LOG_ALPHA_LIMIT, PRUNE_LOG_ALPHA): a prior whose own differ gets no kernel
LOG_UNIFORM_CONSTANTS = {"K1": 0.63576, "K2": 1.87320, "K3": 1.48695, "LOG_ALPHA_LIMIT": 10.0,
                         "PRUNE_LOG_ALPHA": 3.0}
# the priors whose log density the kernels compute (bbb_prior_terms, the Monte Carlo KL)
DENSITIES = frozenset(PRIORS[name] for name in ("gaussian", "scale_mixture"))
PARAMETRIZATIONS = {"softplus": 0, "log_variance": 1}

# (estimator, KL estimate, prior, parametrization) by name
SERVED = frozenset(
    [(estimator, "mc", prior, "softplus") for estimator in DATA_TERMS
     for prior in ("gaussian", "scale_mixture")]
    + [(estimator, "analytic", "gaussian", "softplus") for estimator in DATA_TERMS]
    + [(estimator, "analytic", prior, parametrization) for estimator in DATA_TERMS
       for prior in ("log_uniform", "none") for parametrization in PARAMETRIZATIONS])

SERVED_CODES = frozenset((DATA_TERMS[e], KL_ESTIMATES[k], PRIORS[p], PARAMETRIZATIONS[s])
                         for e, k, p, s in SERVED)


def serves(data_term, kl_estimate, prior, parametrization):
    """Whether the table holds these codes (None: an object the kernels do not know)."""
    return (data_term, kl_estimate, prior, parametrization) in SERVED_CODES


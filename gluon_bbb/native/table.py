"""What the C kernels (``_fused.c``, loaded by ``native/library.py``) serve, declared once: the codes
Python hands them for each estimator's data term, KL estimate, prior and parametrization, and
the table of the combinations they implement. Everything else trains on the ndarray backend.

The C code answers the same question itself (``bbb_serves``); ``native/library.py`` compares its
answers with ``SERVED`` over every code (and some it does not know) when it loads the library,
and does not use a library that disagrees. The objects take their codes from here
(``Estimator.kernel_data_kind``, ``KLEstimate.kernel_code``,
``priors.Prior.kernel_args``, ``parametrizations.Parametrization.kernel_code``).

IVON's kernels (``bbb_ivon_draw``, ``bbb_ivon_update``) are not in the table: they take the
prior's terms as arrays, so serve every prior, and ``learning/ivon.py`` keys them to IVON's own
formulas (``formulas.accelerates``). Those terms, and a MAP model's prior as weight decay, come
from ``bbb_prior_terms`` for the priors of ``DENSITIES`` (``library.prior_terms``, keyed by
the prior's ``kernel_args``), from the prior's operators for any other.

The removal of what a prior switches off (``Config.remove_switched_off``) is served with every
row of the log-uniform prior, the one prior with such a rule (``bbb_kept``, ``library.kept``).

Adding a prior the kernels serve is then its class, one C function beside ``prior_terms_of``
and a row here. A leaf module: it imports nothing.
"""
import itertools

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

# (estimator, KL estimate, prior, parametrization) by name: every estimator with the Monte
# Carlo KL under the Gaussian and the scale mixture, and with the closed form under the
# Gaussian (the scale mixture's has none), sigma = softplus(rho); and every estimator with the
# closed form of the log-uniform prior and of none (neither has a density) under either
# parametrization (sparse variational dropout's; the weights under a gated network's gates).
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


def codes_to_check():
    """Every combination of known codes, and one unknown code (-1, and one past the largest) in
    each place: what ``native/library.py`` asks the C code about when it loads it."""
    ranges = [range(-1, max(table.values()) + 2)
              for table in (DATA_TERMS, KL_ESTIMATES, PRIORS, PARAMETRIZATIONS)]
    return itertools.product(*ranges)

"""The variational family, one object per choice, each with its name in config.json and its
formula written once: the priors (``family/priors.py``), how sigma comes from rho
(``parametrizations.py``), the weight estimators (``estimators.py``), the KL term's estimate and
weighting (``kl.py``), the likelihoods (``likelihoods.py``) and the model kinds
(``model_kinds.py``); ``elementwise.py`` holds the helpers their formulas share."""

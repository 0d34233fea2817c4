"""family/kl.py: the KL weight of each mini-batch, uniform and Blundell et al.'s."""
from fractions import Fraction

import numpy as np
import pytest

from gluon_bbb import kl_weights


def test_kl_weights_uniform_and_blundell():
    assert kl_weights(4, "uniform") == [0.25] * 4
    exact = [Fraction(2 ** (5 - i), 2 ** 5 - 1) for i in range(1, 6)]
    np.testing.assert_allclose(kl_weights(5, "blundell"), [float(w) for w in exact], rtol=1e-15)
    for m in (469, 5000):
        w = kl_weights(m, "blundell")
        assert all(np.isfinite(w)) and sum(w) == pytest.approx(1.0, rel=1e-12)
        assert w[0] == pytest.approx(0.5) and all(a >= b for a, b in zip(w, w[1:]))

"""learning/noise.py: the C kernels' Philox streams against NumPy's Philox, their normals
against the NumPy reference, on any number of threads, and their distribution."""
import ctypes
import math

import numpy as np
import pytest

from gluon_bbb.native import library as native
from gluon_bbb.learning.noise import CHUNK, philox_key, philox_normals_reference

# every test here needs the built library: skipped without it, failed in CI (conftest.py)
pytestmark = pytest.mark.usefixtures("native_kernels")


def philox_words(count, key, first, stream):
    """``count`` raw words of the C Philox4x64-10 for counters (first + 1, stream, 0, 0), ..."""
    words = np.empty(count, dtype=np.uint64)
    native.library().bbb_philox_words(count, int(key[0]), int(key[1]), first, stream,
                                      words.ctypes.data)
    return words


@pytest.mark.parametrize("key,first,stream", [([0, 0], 0, 0), ([2 ** 64 - 1, 12345], 7, 3),
                                              ([99, 1], 1023, 2 ** 40)])
def test_philox_words_equal_numpy_philox(key, first, stream):
    key = np.array(key, dtype=np.uint64)
    expected = np.random.Philox(key=key, counter=[first, stream, 0, 0]).random_raw(11)
    np.testing.assert_array_equal(philox_words(11, key, first, stream), expected)


@pytest.mark.parametrize("size", [1, 2, 3, CHUNK - 1, 2 * CHUNK + 5])
def test_normals_equal_the_numpy_reference(size):
    key = philox_key([4, 2])
    drawn = native.normals(size, key, 5)
    reference = philox_normals_reference(size, key, 5)
    assert drawn.dtype == np.float32 and drawn.shape == (size,)
    np.testing.assert_allclose(drawn, reference, rtol=0, atol=2e-6)


def test_normals_do_not_depend_on_thread_count():
    from gluon_bbb.learning import threads
    before = ctypes.CDLL("libgomp.so.1").omp_get_max_threads()
    drawn = []
    try:
        for count in (1, 2, 3):
            threads._set_team(count)
            drawn.append(native.normals(100003, philox_key([1, 2, 3]), 9))
    finally:
        threads._set_team(before)
    for other in drawn[1:]:
        np.testing.assert_array_equal(other, drawn[0])


def test_normals_are_standard_normal():
    z = native.normals(2_000_000, philox_key(0), 0).astype(np.float64)
    assert abs(z.mean()) < 0.004 and abs(z.std() - 1.0) < 0.003
    assert abs(np.mean(z ** 3)) < 0.01 and abs(np.mean(z ** 4) - 3.0) < 0.03
    # Kolmogorov-Smirnov distance to the normal CDF (critical value at 1e6+ draws ~0.0012)
    z.sort()
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z[::50] / math.sqrt(2.0)))
    empirical = np.arange(0, z.size, 50) / z.size
    assert np.max(np.abs(cdf - empirical)) < 0.0015
    assert abs(np.mean(np.abs(z) > 3.0) - 0.0026998) < 0.0003
    # different streams and keys are different draws
    other = native.normals(1000, philox_key(0), 1)
    assert abs(np.corrcoef(other, z[:1000])[0, 1]) < 0.2

"""The Monte Carlo predictive distribution (``predict``, ``sampled_outputs``, on NDArrays on the
parameters' context) and noise images; the metrics that say whether it knows what it does not
know (entropy, ECE, NLL, AUROC) are ``metrics.py``'s, importable from here too.
"""
import numpy as np
from mxnet import nd

from ..data import PIXEL_SCALE
# the metrics, NumPy alone, live in metrics.py; here for the tutorial's readers and the tests
from .metrics import (auroc, expected_calibration_error, negative_log_likelihood,  # noqa: F401
                      predictive_entropy, reliability)
from ..tutorial import net, sample_epsilons, transform_gaussian_samples
from ..learning.noise import noise_for, seed_generator
from ..learning.threads import Threads
from ..native import library as native


# floats of activations a prediction batch holds at most, so that its layers stay near the cache
PREDICTION_ACTIVATIONS = 2 ** 23
MAX_PREDICTION_BATCH = 1000


def prediction_batch_size(network=None, pooled=False):
    """Images a prediction batch takes: 1,000, or fewer where ``network``'s activations for
    1,000 would pass ``PREDICTION_ACTIVATIONS`` (245 for the LeNet; 1,000 with ``pooled``,
    where the C kernel computes each convolution with the max pooling after it and the
    convolutions' outputs are not held: ``Network.pooled_activation_size``)."""
    if network is None:  # the tutorial's MLP
        return MAX_PREDICTION_BATCH
    held = network.pooled_activation_size if pooled else network.activation_size
    return max(1, min(MAX_PREDICTION_BATCH, PREDICTION_ACTIVATIONS // held))


def predict(X, mus, sigmas, num_samples, batch_size=None, seed=None, network=None, F=None):
    """Mean over ``num_samples`` weight draws w ~ N(mu, sigma^2) of softmax(net(X, w)), for
    ``network`` (default: the MLP the parameters shape)."""
    total = None
    for output in sampled_outputs(X, mus, sigmas, num_samples, batch_size, seed, network, F):
        probs = nd.softmax(output, axis=1)
        total = probs if total is None else total + probs
    return total / max(num_samples, 1)


def sampled_outputs(X, mus, sigmas, num_samples, batch_size=None, seed=None, network=None,
                    F=None):
    """The network's outputs for X under each of ``num_samples`` draws (``predict``'s), one
    NDArray (N, outputs) at a time; the mean weights' alone for ``num_samples=0``."""
    batch_size = batch_size or prediction_batch_size(
        network, F is None and native.serves_arrays(*mus))
    ctx = mus[0].context
    X = X.as_in_context(ctx) if isinstance(X, nd.NDArray) else nd.array(X, ctx=ctx)
    threads = Threads.for_process(ctx)  # the team, following the cores left free
    if num_samples == 0:
        network = network.without_dropout() if network is not None else None
        yield _batched(X, mus, batch_size, network, F, threads)
        return
    noise = noise_for(ctx, seed)
    if network is not None and network.has_dropout:
        seed_generator(ctx, None if seed is None else [seed, 1])
    shapes = [mu.shape for mu in mus]
    for _ in range(num_samples):
        weights = (mus if sigmas is None else
                   transform_gaussian_samples(mus, sigmas, sample_epsilons(shapes, ctx, noise)))
        yield _batched(X, weights, batch_size, network, F, threads)


def _batched(X, params, batch_size, network, F, threads):
    outputs = []
    for i in range(0, X.shape[0], batch_size):
        threads.step()
        outputs.append(net(X[i:i + batch_size], params, F, network))
    return nd.concat(*outputs, dim=0)


def noise_images(count=1000, num_inputs=784, seed=0):
    """Uniform random pixel images in [0, 255] scaled like MNIST (/126); (count, inputs)."""
    rng = np.random.default_rng(seed)
    return (rng.uniform(0, 255, size=(count, num_inputs)) / PIXEL_SCALE).astype(np.float32)

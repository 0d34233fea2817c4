#!/usr/bin/env python3
"""The PyTorch peer of the benchmarks: the same algorithm written the plain way in PyTorch, in a
process of its own that ``bench_train.py`` and ``bench_shared.py`` time in turns with theirs.

It runs as a user's PyTorch program does: no MXNet in the process (PyTorch's libgomp has
MXNet's soname, so a process that loaded MXNet first would run PyTorch on MXNet's OpenMP
runtime) and the environment the benchmark was started in (what ``import gluon_bbb`` sets for
MXNet's and OpenMP's threads is taken back before PyTorch loads).

    python bench/pytorch_peer.py VARIANT --steps N [--data-dir DIR]

It prepares the variant, answers ``ready VERSION``, then times each ``start count`` line it
reads (mini-batches ``start`` to ``start + count``) and answers the seconds.
"""
import argparse
import os
import sys
import time

_ENVIRONMENT = dict(os.environ)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gluon_bbb.data import load_mnist  # noqa: E402
from gluon_bbb.learning.config import PRESETS, Config  # noqa: E402
os.environ.clear()
os.environ.update(_ENVIRONMENT)
import numpy as np  # noqa: E402

STEPS_PER_EPOCH = 469  # ceil(60000 / 128)


def stepwise(step):
    """A variant's ``run(start, count)`` from its ``step(i)``."""
    def run(start, count):
        for i in range(start, start + count):
            step(i)
    return run


def bench_pytorch(data, config, steps, estimator="sample"):
    """(d) the same algorithm written the plain way in PyTorch (CPU), data in memory, plain SGD
    (Adam where ``config.optimizer`` says so).

    ``sample``: every step draws eps for every parameter, forms w = mu + softplus(rho) * eps
    and computes the tutorial's combined loss (Gaussian prior) with autograd.
    ``lrt``: the local reparametrization with the closed-form KL to the Gaussian prior, as
    ``--estimator lrt --kl analytic`` computes it: pre-activations drawn from
    N(h mu + b_mu, h^2 sigma^2 + b_sigma^2), KL summed over the parameters.
    ``sparse-vd``: sparse variational dropout as its authors write it (Molchanov et al. 2017):
    rho = log sigma^2, the local reparametrization in every layer (dense and convolution), the
    log-uniform prior's approximate KL in log alpha, Adam; nothing removed while training."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    shapes = config.layer_shapes()
    mus = [(0.1 * torch.randn(shape)).requires_grad_() for shape in shapes]
    rhos = [torch.full(shape, config.rho_offset, requires_grad=True) for shape in shapes]
    X = torch.tensor(data.train_images, dtype=torch.float32)
    y = torch.tensor(data.train_labels, dtype=torch.long)
    b, log_sqrt_2pi = config.batch_size, 0.5 * np.log(2 * np.pi)
    sigma_p = config.prior_settings.get("sigma_p")
    network = config.build_network()

    def sampled_weights_loss(h, labels):
        sigmas = [F.softplus(rho) for rho in rhos]
        weights = [mu + sigma * torch.randn_like(mu) for mu, sigma in zip(mus, sigmas)]
        h = torch_forward(network, h, weights)
        nll = F.cross_entropy(h, labels, reduction="sum")
        log_q = sum((-torch.log(s) - (w - m) ** 2 / (2 * s ** 2) - log_sqrt_2pi).sum()
                    for w, m, s in zip(weights, mus, sigmas))
        log_p = sum((-w ** 2 / (2 * sigma_p ** 2) - np.log(sigma_p)
                     - log_sqrt_2pi).sum() for w in weights)
        return (log_q - log_p) / STEPS_PER_EPOCH + nll

    def local_reparametrization_loss(h, labels):
        sigmas = [F.softplus(rho) for rho in rhos]
        for j in range(0, len(mus), 2):
            mean = F.linear(h, mus[j], mus[j + 1])
            variance = F.linear(h * h, sigmas[j] ** 2, sigmas[j + 1] ** 2)
            h = mean + torch.sqrt(variance) * torch.randn_like(mean)
            if j < len(mus) - 2:
                h = torch.relu(h)
        nll = F.cross_entropy(h, labels, reduction="sum")
        kl = sum((np.log(sigma_p) - torch.log(s) + (s ** 2 + m ** 2) / (2 * sigma_p ** 2)
                  - 0.5).sum() for m, s in zip(mus, sigmas))
        return kl / STEPS_PER_EPOCH + nll

    def sparse_vd_loss(h, labels):
        def drawn(operator, h, index):  # the local reparametrization, sigma^2 = exp(rho)
            mean = operator(h, mus[index], mus[index + 1])
            variance = operator(h * h, rhos[index].exp(), rhos[index + 1].exp())
            return mean + torch.sqrt(variance + 1e-8) * torch.randn_like(mean)
        nll = F.cross_entropy(torch_forward(network, h, None, drawn), labels, reduction="sum")
        kl = 0
        for mu, log_variance in zip(mus, rhos):
            log_alpha = torch.clamp(log_variance - torch.log(mu * mu + 1e-8), -10, 10)
            kl = kl + (0.63576 - 0.63576 * torch.sigmoid(1.87320 + 1.48695 * log_alpha)
                       + 0.5 * F.softplus(-log_alpha)).sum()
        return nll + kl / STEPS_PER_EPOCH

    loss_of = {"sample": sampled_weights_loss, "lrt": local_reparametrization_loss,
               "sparse-vd": sparse_vd_loss}[estimator]
    adam = (torch.optim.Adam(mus + rhos, lr=config.learning_rate)
            if config.optimizer == "adam" else None)

    def step(i):
        lo = (i % (STEPS_PER_EPOCH - 1)) * b  # full batches only
        loss = loss_of(X[lo:lo + b], y[lo:lo + b])
        for p in mus + rhos:
            p.grad = None
        loss.backward()
        if adam is not None:
            adam.step()
            return
        with torch.no_grad():
            for p in mus + rhos:
                p -= config.learning_rate * p.grad

    return stepwise(step)


def torch_forward(network, h, weights, linear=None):
    """The logits of ``network`` (a ``gluon_bbb.networks.network.Network``) in PyTorch, weights in the
    same layouts (dense (outputs, inputs), convolution (channels, inputs, k, k)); ``linear(op,
    h, index)``, where given, is a layer's output in place of ``op(h, weights[index],
    weights[index + 1])`` (op: ``F.linear`` or ``F.conv2d``)."""
    import torch
    import torch.nn.functional as F
    from gluon_bbb.networks.layers import Conv2D, Dense, MaxPool2D, ReLU
    linear = linear or (lambda op, h, index: op(h, weights[index], weights[index + 1]))
    h = h.reshape((-1,) + network.input_shape)
    index = 0
    for layer in network.layers:
        if isinstance(layer, Dense):
            h = linear(F.linear, h.flatten(1), index)
        elif isinstance(layer, Conv2D):
            h = linear(F.conv2d, h, index)
        elif isinstance(layer, MaxPool2D):
            h = F.max_pool2d(h, layer.size)
        elif isinstance(layer, ReLU):
            h = torch.relu(h)
        else:
            h = h.flatten(1)
        index += 2 if layer.has_weights else 0
    return h


# each variant: (bench_pytorch's estimator, the Config's settings)
VARIANTS = {"sample": ("sample", {}), "lrt": ("lrt", {}),
            "lenet": ("sample", {"network": "lenet"}),
            "sparse-vd": ("sparse-vd", PRESETS["lenet-sparse-vd"])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--data-dir")
    args = parser.parse_args()
    try:
        import torch
    except ImportError as e:
        raise SystemExit("PyTorch is not installed (%s)" % e)
    estimator, settings = VARIANTS[args.variant]
    config = Config.from_dict(settings)
    run = bench_pytorch(load_mnist(args.data_dir), config, args.steps, estimator)
    print("ready", torch.__version__, flush=True)
    for line in sys.stdin:
        start, count = map(int, line.split())
        started = time.perf_counter()
        run(start, count)
        print(time.perf_counter() - started, flush=True)


if __name__ == "__main__":
    main()

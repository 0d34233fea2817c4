#!/usr/bin/env python3
"""The variance of each weight estimator's gradient at the same parameters (Kingma et al. 2015,
Table 1): weight sampling, the local reparametrization and Flipout, for the first and the last
layer's weights of an MLP and of the LeNet, per example (mini-batches of one) and per mini-batch
(128 examples).

For each estimator and network: ``--draws`` noise draws of the data term's gradient with respect
to mu (the negative log-likelihood's, the KL term left out: it is the same for every estimator
but the local reparametrization, which samples it apart), at fixed parameters and inputs; the
variance over the draws of each entry, averaged over the layer's entries (and, per example, over
``--examples`` examples). The parameters are a trained run's (``--mlp RUN``, ``--lenet RUN``),
else the presets' initial ones.

    python bench/bench_estimators.py [--mlp RUN] [--lenet RUN] [--draws 100]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gluon_bbb  # noqa: E402  (before MXNet: its thread settings)
mx = gluon_bbb.require_mxnet()  # without the line MXNet's engine writes as it starts
import numpy as np  # noqa: E402
from mxnet import nd  # noqa: E402

from gluon_bbb import Config, load_mnist
from gluon_bbb.family import estimators, kl as kl_estimates
from gluon_bbb.learning.config import PRESETS  # noqa: E402
from gluon_bbb.tutorial import init_variational_params  # noqa: E402
from gluon_bbb.learning.step import NetworkGraph, combined_loss_gradients, draw_size  # noqa
from gluon_bbb.learning.noise import PhiloxNoise  # noqa: E402
from gluon_bbb.learning.rundir import RunDirectory  # noqa: E402

ESTIMATORS = ("sample", "lrt", "flipout")


def parameters(run_dir, config, ctx):
    if run_dir:
        run = RunDirectory(run_dir)
        config = run.read_config()
        state = run.load_parameters(config, ctx)
        mus, rhos = state["mus"], state["rhos"]
    else:
        mus, rhos = init_variational_params(config.layer_shapes(), ctx, config.mu_scale,
                                            config.rho_offset, seed=0)
    graph = NetworkGraph(config.build_network())
    return config, graph, graph.layout.flatten(mus), graph.layout.flatten(rhos)


def gradient_variance(graph, mu, rho, prior, X, y, estimator, draws, seed):
    """Mean over the first and the last weight's entries of the variance of dNLL/dmu over
    ``draws`` noise draws."""
    kl = kl_estimates.kl_estimate("mc")
    chosen = estimators.estimator(estimator)
    noise = PhiloxNoise(X.context, seed=seed)
    size = draw_size(graph, chosen, kl, prior, X.shape[0])
    gradients = []
    for _ in range(draws):
        eps = noise.normal((size,))
        _, grad_mu, _ = combined_loss_gradients(X, y, mu, rho, [eps], prior, 0.0, graph, chosen,
                                                kl)
        views = graph.layout.views(grad_mu)
        gradients.append((views[0].asnumpy().ravel(), views[-2].asnumpy().ravel()))
    first = np.stack([g[0] for g in gradients]).astype(np.float64)
    last = np.stack([g[1] for g in gradients]).astype(np.float64)
    return first.var(axis=0).mean(), last.var(axis=0).mean()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlp", help="a run directory whose parameters the MLP takes")
    parser.add_argument("--lenet", help="a run directory whose parameters the LeNet takes")
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--examples", type=int, default=16)
    parser.add_argument("--data-dir")
    args = parser.parse_args()
    data, ctx = load_mnist(args.data_dir), mx.cpu()
    networks = (("MLP 2x400", args.mlp, Config.from_dict(dict(PRESETS["paper-2x400"], epochs=10))),
                ("LeNet", args.lenet, Config.from_dict(dict(PRESETS["lenet"], epochs=10))))
    print("variance of dNLL/dmu over %d draws, mean over the layer's entries; per example: "
          "mean over %d examples" % (args.draws, args.examples))
    print("| network | estimator | first layer, per example | last layer, per example | "
          "first layer, per mini-batch of 128 | last layer, per mini-batch |")
    print("|---|---|---:|---:|---:|---:|")
    for name, run_dir, config in networks:
        config, graph, mu, rho = parameters(run_dir, config, ctx)
        prior = config.build_prior()
        images, labels = data.train_images, data.train_labels
        batch = (nd.array(images[:128], ctx=ctx), nd.one_hot(nd.array(labels[:128], ctx=ctx),
                                                               10))
        rows = {}
        for estimator in ESTIMATORS:
            singles = [gradient_variance(graph, mu, rho, prior,
                                         nd.array(images[i:i + 1], ctx=ctx),
                                         nd.one_hot(nd.array(labels[i:i + 1], ctx=ctx), 10),
                                         estimator, args.draws, seed=i)
                       for i in range(args.examples)]
            per_example = np.mean(singles, axis=0)
            per_batch = gradient_variance(graph, mu, rho, prior, *batch, estimator, args.draws,
                                          seed=1000)
            rows[estimator] = (*per_example, *per_batch)
            print("| %s | %s | %.3g | %.3g | %.3g | %.3g |" % ((name, estimator) + rows[estimator]))
        for estimator in ESTIMATORS[1:]:
            print("| %s | sample / %s | %s |" % (name, estimator, " | ".join(
                "%.1f" % (a / b) for a, b in zip(rows["sample"], rows[estimator]))))


if __name__ == "__main__":
    # bad input (a missing data directory, a run that is not one) as one line and status 2
    from gluon_bbb.commands.cli import run_main
    sys.exit(run_main(lambda argv: main()))

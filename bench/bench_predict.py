#!/usr/bin/env python3
"""Time the Monte Carlo predictive side by side, in one run, and print seconds and ratios.

The predictive is what ``evaluate`` and ``shift`` compute: ``--draws`` draws of the weights,
each a forward pass over ``--images`` MNIST test images (``uncertainty.predict``), for the
Bayesian LeNet (conv 5x5x20, pool, conv 5x5x50, pool, dense 500, dense 10) and the 2x400 MLP,
at the presets' initial parameters (the time does not depend on their values):

  kernel:  the networks' forward pass as the commands run it: each convolution, the max pooling
           and the ReLU after it in one pass of the C kernels (``bbb_conv_maxpool``, where they
           are built), in batches of ``prediction_batch_size``;
  mxnet:   MXNet's operators alone (``F=mx.nd``), in the batches those take.

The variants take turns over ``--rounds`` rounds, so that a change in the machine's speed
slows both alike; each prints the median and range of its rounds, under each of ``--loads``
(``bench_shared.py``'s: idle, one or two busy processes, a stream of short ones) in turn.

    python bench/bench_predict.py [--images 10000] [--draws 10] [--rounds 5]
                                  [--loads idle,busy1,busy2,stream] [--data-dir DIR]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_shared import LOADS, Load  # noqa: E402  (before gluon_bbb: the loads' environment)
import gluon_bbb  # noqa: E402  (sets MXNet's thread and engine settings before it loads)
mx = gluon_bbb.require_mxnet()
import numpy as np  # noqa: E402

from gluon_bbb import Config, load_mnist  # noqa: E402
from gluon_bbb.analysis.uncertainty import predict  # noqa: E402
from gluon_bbb.learning.config import PRESETS  # noqa: E402
from gluon_bbb.native import library as native  # noqa: E402
from gluon_bbb.tutorial import init_variational_params, transform_rhos  # noqa: E402


def posterior(preset, seed=0):
    """(network, mus, sigmas) of ``preset``'s network at its initial parameters."""
    config = Config.from_dict(PRESETS[preset])
    network = config.build_network()
    mus, rhos = init_variational_params(network.param_shapes(), mx.cpu(), config.mu_scale,
                                        config.rho_offset, seed=seed)
    return network, mus, transform_rhos(rhos)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10000, help="test images a pass takes")
    parser.add_argument("--draws", type=int, default=10, help="weight draws a predictive takes")
    parser.add_argument("--rounds", type=int, default=5, help="turns each variant takes")
    parser.add_argument("--loads", default="idle")
    parser.add_argument("--data-dir")
    args = parser.parse_args()
    loads = args.loads.split(",")
    if not set(loads) <= set(LOADS) - {"quota"}:
        parser.error("--loads takes any of %s" % ", ".join(sorted(set(LOADS) - {"quota"})))
    for name in ("images", "draws", "rounds"):
        if not 1 <= getattr(args, name) <= 10000:
            parser.error("--%s must be between 1 and 10000" % name)
    images = load_mnist(args.data_dir).test_images[:args.images]
    print("MXNet %s, %d cores, OMP_NUM_THREADS=%s, MXNET_ENGINE_TYPE=%s; C kernels: %s; %d "
          "draws of %d images, %d turns" % (
              mx.__version__, os.cpu_count(), os.environ.get("OMP_NUM_THREADS"),
              os.environ.get("MXNET_ENGINE_TYPE"),
              "built" if native.available() else native.unavailable_reason(), args.draws,
              len(images), args.rounds))
    variants = {}
    for label, preset in (("LeNet", "lenet"), ("2x400 MLP", "paper-2x400")):
        network, mus, sigmas = posterior(preset)
        for operators, F in (("kernel", None), ("mxnet", mx.nd)):
            variants[(label, operators)] = (
                lambda network=network, mus=mus, sigmas=sigmas, F=F: predict(
                    images, mus, sigmas, args.draws, seed=0, network=network, F=F)
                .wait_to_read())
    for run in variants.values():  # warm-up: MXNet's first calls pick their kernels
        run()
    for load in loads:
        seconds = time_under(Load(load), variants, args.rounds)
        for label in ("LeNet", "2x400 MLP"):
            for operators in ("kernel", "mxnet"):
                times = seconds[(label, operators)]
                print("%-6s %-10s %-7s %7.3f s [%.3f, %.3f]" % (
                    load, label, operators, np.median(times), min(times), max(times)))
            ratios = [k / m for k, m in zip(seconds[(label, "kernel")],
                                            seconds[(label, "mxnet")])]
            print("%-6s %s kernel/mxnet = %.2f [%.2f, %.2f]" % (
                load, label, np.median(ratios), min(ratios), max(ratios)))


def time_under(load, variants, rounds):
    """{variant: [seconds of each round]} with ``load`` running."""
    seconds = {key: [] for key in variants}
    load.start()
    try:
        for _ in range(rounds):
            for key, run in variants.items():
                start = time.perf_counter()
                run()
                seconds[key].append(time.perf_counter() - start)
    finally:
        load.stop()
    return seconds

if __name__ == "__main__":
    # bad input (a missing data directory, a run that is not one) as one line and status 2
    from gluon_bbb.commands.cli import run_main
    sys.exit(run_main(lambda argv: main()))

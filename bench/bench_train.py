#!/usr/bin/env python3
"""Time training steps side by side, in one run, and print seconds per epoch and ratios.

  (a) our Bayes-by-Backprop step, as the training command runs it (gluon_bbb.TrainingStep: flat
      mu/rho, the native backend where built, the network as one CachedOp)
  (b) a deterministic MLP of the same shape trained the usual MXNet way
      (gluon.nn Dense layers, hybridized, gluon.Trainer SGD, data in memory)
  (c) the tutorial's code path: per-sample transform in a gluon DataLoader, per-layer
      nd.random.normal epsilons, autograd of combined_loss, Python SGD loop; timed both with
      our MXNet settings and, in a child process, with MXNet's defaults as the tutorial runs

Also (a) on the ndarray backend (MXNet operators only), with the paper's scale-mixture prior
and Adam (at 2x400 on both backends, and the paper-2x1200 preset's step), IVON's step (the
paper-2x1200-ivon preset's, on both backends) beside a deterministic 2x1200 network's Adam
step, with the closed-form
KL, with the local reparametrization trick and with Flipout, and the local reparametrization's
network graph alone (its floor). Then, in child processes, (d) the
same algorithm in PyTorch where it is installed (``pytorch_peer.py``; not a dependency of
gluon-bbb: ``pip install torch`` to compare, or name a Python that has it, ``--peer-python``), with weight sampling and with the local reparametrization,
and the peak resident memory of a 2x1200 training run. Last, the Bayesian LeNet
(``--network lenet``: conv 5x5x20, pool, conv 5x5x50, pool, dense 500, dense 10) on both
backends and with each estimator against the same network in PyTorch (weight sampling), one
weight sample per step, and the LeNet preset's step.

The variants take turns: each round runs steps/rounds steps of every variant in order, child
processes included (they stay up between rounds and are handed their share of steps), so that
a change in the machine's speed during the run slows every variant alike and the ratios hold.
Each turn starts after a quarter of a second idle and one untimed step, so that no other
variant's threads still spin on the cores and the turn is timed as a training run's steps are
(``settled``).

    python bench/bench_train.py [--steps 60] [--rounds 5] [--data-dir DIR]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

_ENVIRONMENT = dict(os.environ)  # the PyTorch peer's, before gluon_bbb sets its defaults
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gluon_bbb  # noqa: E402  (sets MXNet's thread and engine settings before it loads)
mx = gluon_bbb.require_mxnet()
import numpy as np  # noqa: E402
from mxnet import autograd, gluon, nd  # noqa: E402

from gluon_bbb import (Config, TrainingStep, combined_loss, gaussian_prior,  # noqa: E402
                       init_variational_params, load_mnist, log_softmax_likelihood, net,
                       sample_epsilons, transform_gaussian_samples, transform_rhos)
from gluon_bbb.family import estimators
from gluon_bbb.learning.config import PRESETS  # noqa: E402
from gluon_bbb.learning.step import NetworkGraph  # noqa: E402

STEPS_PER_EPOCH = 469  # ceil(60000 / 128)
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytorch_peer.py")


def stepwise(step):
    """A variant's ``run(start, count)`` from its ``step(i)``."""
    def run(start, count):
        for i in range(start, start + count):
            step(i)
    return run


def bench_ours(data, config, ctx, steps, backend=None, **options):
    """``run(start, count)`` of ``TrainingStep`` over mini-batches ``start`` to
    ``start + count`` of the training images; ``backend`` as ``TrainingStep`` takes it."""
    plan = Config.from_dict(dict(config.to_flat(), seed=0, **options)).build_plan()
    step = TrainingStep(plan, ctx, backend=backend)
    b = plan.batch_size
    X = nd.array(data.train_images[:steps * b], ctx=ctx)
    y = nd.one_hot(nd.array(data.train_labels[:steps * b], ctx=ctx), 10)
    return stepwise(lambda i: step(X[i * b:(i + 1) * b], y[i * b:(i + 1) * b],
                                   1.0 / STEPS_PER_EPOCH))


def bench_deterministic(data, config, ctx, steps, optimizer="sgd", **options):
    """A deterministic MLP of ``config``'s shape (with ``options`` replacing its fields), the
    usual MXNet way, trained by ``optimizer``."""
    config = Config.from_dict(dict(config.to_flat(), **options))
    model = gluon.nn.HybridSequential()
    for _ in range(config.num_hidden_layers):
        model.add(gluon.nn.Dense(config.num_hidden_units, activation="relu"))
    model.add(gluon.nn.Dense(10))
    model.initialize(mx.init.Normal(0.1), ctx=ctx)
    model.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(model.collect_params(), optimizer,
                            {"learning_rate": config.learning_rate})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    b = config.batch_size
    X = nd.array(data.train_images[:steps * b], ctx=ctx)
    y = nd.array(data.train_labels[:steps * b], ctx=ctx)

    def step(i):
        lo = i * b
        with autograd.record():
            loss = loss_fn(model(X[lo:lo + b]), y[lo:lo + b]).sum()
        loss.backward()
        trainer.step(1)
    return stepwise(step)


def bench_tutorial(data, config, ctx, steps):
    images = nd.array(data.train_images.reshape(-1, 28, 28, 1) * 126.0, dtype="uint8")
    labels = nd.array(data.train_labels, dtype="float32")

    def transform(image, label):
        return image.astype(np.float32) / 126.0, label.astype(np.float32)

    dataset = gluon.data.ArrayDataset(images, labels).transform(transform)

    def epochs_of_batches():
        while True:
            yield from gluon.data.DataLoader(dataset, config.batch_size, shuffle=True)
    loader = epochs_of_batches()
    shapes = config.layer_shapes()
    mus, rhos = init_variational_params(shapes, ctx, seed=0)
    params = mus + rhos

    def step(i):
        X, label = next(loader)
        X = X.as_in_context(ctx).reshape((-1, 784))
        y = nd.one_hot(label.as_in_context(ctx), 10)
        with autograd.record():
            eps = sample_epsilons(shapes, ctx)
            sigmas = transform_rhos(rhos)
            weights = transform_gaussian_samples(mus, sigmas, eps)
            loss = combined_loss(net(X, weights), y, weights, mus, sigmas,
                                 lambda w: gaussian_prior(w, config.prior_settings["sigma_p"]),
                                 log_softmax_likelihood, STEPS_PER_EPOCH)
        loss.backward()
        for p in params:
            p[:] = p - config.learning_rate * p.grad
    return stepwise(step)


def bench_lrt_graph(data, config, ctx, steps):
    """The local reparametrization's network alone: the forward and backward pass of its graph
    (two matrix products per layer forward, their gradients backward), without the
    parameter-side work (softplus, KL term, update) of a training step. The floor of
    ``--estimator lrt`` with dense matrix products."""
    graph = NetworkGraph(config.layer_shapes())
    mus, rhos = init_variational_params(config.layer_shapes(), ctx, seed=0)
    mu, sigma = graph.layout.flatten(mus), graph.layout.flatten(transform_rhos(rhos))
    b, lrt = config.batch_size, estimators.estimator("lrt")
    noise = nd.random.normal(shape=(lrt.data_noise_size(graph, b),), ctx=ctx)
    X = nd.array(data.train_images[:steps * b], ctx=ctx)
    y = nd.one_hot(nd.array(data.train_labels[:steps * b], ctx=ctx), 10)
    return stepwise(lambda i: graph.noisy_nll_and_grads(lrt, X[i * b:(i + 1) * b],
                                                        y[i * b:(i + 1) * b], mu, sigma, noise))


class InProcess:
    """A variant timed in this process: ``time(start, count)`` runs mini-batches ``start`` to
    ``start + count`` and returns the seconds, MXNet's queue drained at both ends."""

    def __init__(self, run):
        self.run, self.version = run, None

    def time(self, start, count):
        nd.waitall()
        started = time.perf_counter()
        self.run(start, count)
        nd.waitall()
        return time.perf_counter() - started

    def close(self):
        pass


class ChildProcess:
    """A variant timed in a child process of this script that stays up between rounds: it
    prepares the variant, answers ``ready VERSION``, then times each ``start count`` line it
    reads and answers the seconds. ``ChildProcess.start`` returns None and the reason where the
    child cannot run the variant (PyTorch not installed, say)."""

    def __init__(self, process, errors, version):
        self.process, self.errors, self.version = process, errors, version

    @classmethod
    def start(cls, cmd, env=None, preexec_fn=None):
        """Start ``cmd`` (``serving``'s list) with the environment ``env`` (default: this
        process's) and wait for its ``ready`` line."""
        errors = tempfile.TemporaryFile("w+")  # not a pipe: a chatty child cannot block on it
        process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=errors, text=True, env=env, preexec_fn=preexec_fn)
        child = cls(process, errors, None)
        for line in process.stdout:
            if line.startswith("ready "):
                child.version = line.split()[1]
                return child, None
        return None, child.close()

    def time(self, start, count):
        self.process.stdin.write("%d %d\n" % (start, count))
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise SystemExit("bench_train.py: a child process failed: %s" % self.close())
        return float(answer)

    def close(self):
        """End the child; the last line it wrote to stderr, if any."""
        if self.errors.closed:
            return None
        self.process.stdin.close()
        self.process.wait()
        self.errors.seek(0)
        lines = self.errors.read().strip().splitlines()
        self.errors.close()
        return lines[-1] if lines else "the child exited with status %d" % self.process.returncode


CHILD_VARIANTS = {
    # (c) as the tutorial runs it: MXNet's default operator tuning and engine
    "tutorial-defaults": lambda data, steps: (
        bench_tutorial(data, Config(), mx.cpu(), steps), None),
    # ours in a process of its own (bench_shared.py), as train_mnist.py runs them
    "ours": lambda data, steps: (bench_ours(data, Config(), mx.cpu(), steps), None),
    "ours-ops": lambda data, steps: (
        bench_ours(data, Config(), mx.cpu(), steps, backend="ndarray"), None),
    "ours-lenet": lambda data, steps: (
        bench_ours(data, Config(), mx.cpu(), steps, network="lenet"), None),
}


def serving(variant, data_dir, total_steps):
    """The command of a child process that serves ``variant``: one of ``CHILD_VARIANTS``, or
    ``pytorch-`` and a variant of ``pytorch_peer.py``."""
    if variant.startswith("pytorch-"):
        script, args = PEER, [variant[len("pytorch-"):]]
    else:
        script, args = os.path.abspath(__file__), ["--serve-child", variant]
    return ([sys.executable, script] + args + ["--steps", str(total_steps)]
            + (["--data-dir", data_dir] if data_dir else []))


def serve_child(variant, data_dir, total_steps):
    run, version = CHILD_VARIANTS[variant](load_mnist(data_dir), total_steps)
    timer = InProcess(run)
    print("ready", version or "-", flush=True)
    for line in sys.stdin:
        start, count = map(int, line.split())
        print(timer.time(start, count), flush=True)


def peak_memory_of_a_child(data_dir):
    """Run ``peak_memory_child`` in a process of its own and return what it prints (MiB)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--peak-memory-child"]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def peak_memory_child(data_dir):
    """Train 2x1200 for 20 steps (plus a test evaluation) and print the peak RSS in MiB."""
    from gluon_bbb import train
    data = load_mnist(data_dir)
    train(Config(num_hidden_units=1200, epochs=1, train_size=20 * 128, seed=0), data,
          mx.cpu(), log=lambda line: None, progress=False)
    print(peak_resident_mib())


def peak_resident_mib():
    """This process's peak resident memory in MiB: Linux's VmHWM, which starts afresh at exec
    (``ru_maxrss`` keeps the high-water mark of the parent this process was forked from)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_in_turns(timers, warmup, steps, rounds):
    """Seconds per step of each timer: ``warmup`` untimed steps each, then ``rounds`` rounds
    in which every timer in turn runs its share of ``steps``, each turn after ``SETTLE_SECONDS``
    idle and one untimed step (``settled``)."""
    for timer in timers.values():
        timer.time(0, warmup)
    seconds = dict.fromkeys(timers, 0.0)
    done = warmup
    for r in range(rounds):
        count = steps * (r + 1) // rounds - steps * r // rounds
        for name, timer in timers.items():
            settled(timer, done)
            seconds[name] += timer.time(done, count)
        done += count
    return {name: total / steps for name, total in seconds.items()}


WARMUP = 5
# After a parallel region, an OpenMP runtime's threads spin before they sleep (libgomp's
# GOMP_SPINCOUNT: milliseconds; Intel's KMP_BLOCKTIME: 200 ms). A child process's threads,
# spinning after its turn, took a core from the next variant's turn: timed 12 steps a turn
# right after PyTorch's, the default step took 4.5-5.4 ms against 4.1-4.2 (a/b 1.36-1.48
# against 1.20-1.27; 2-core AMD EPYC).
SETTLE_SECONDS = 0.25


def add_settle_flag(parser):
    parser.add_argument("--settle", type=float, default=SETTLE_SECONDS, metavar="SECONDS",
                        help="idle seconds before each turn (default %g; 0 times nothing "
                        "truly, and only runs every variant's code)" % SETTLE_SECONDS)


def settle_for(args):
    """The idle time before each turn, as ``--settle`` gives it."""
    global SETTLE_SECONDS
    SETTLE_SECONDS = args.settle


def settled(timer, step):
    """Let every other variant's threads go idle, then run mini-batch ``step`` once untimed:
    the turn that follows is timed as a training run's steps are, with this variant's threads
    awake and its arrays in cache."""
    time.sleep(SETTLE_SECONDS)
    timer.time(step, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="timed steps per variant")
    parser.add_argument("--rounds", type=int,
                        help="turns the variants take, each running steps/rounds steps a turn "
                        "(default: 5, or --steps if fewer)")
    parser.add_argument("--data-dir")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="the Python that runs pytorch_peer.py (one with PyTorch)")
    add_settle_flag(parser)
    parser.add_argument("--peak-memory-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-child", choices=sorted(CHILD_VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    settle_for(args)
    if args.serve_child:
        return serve_child(args.serve_child, args.data_dir, args.steps)
    if args.peak_memory_child:
        return peak_memory_child(args.data_dir)
    if not 1 <= args.steps <= STEPS_PER_EPOCH - 1 - WARMUP:
        parser.error("--steps must be between 1 and %d (one epoch of full mini-batches, less "
                     "the warm-up)" % (STEPS_PER_EPOCH - 1 - WARMUP))
    if args.rounds is None:
        args.rounds = min(5, args.steps)
    if not 1 <= args.rounds <= args.steps:
        parser.error("--rounds must be between 1 and --steps")
    data = load_mnist(args.data_dir)
    config, ctx = Config(), mx.cpu()
    total = WARMUP + args.steps
    print("MXNet %s, %d cores, OMP_NUM_THREADS=%s, MXNET_USE_OPERATOR_TUNING=%s, "
          "MXNET_ENGINE_TYPE=%s; %d steps each, in %d turns"
          % (mx.__version__, os.cpu_count(), os.environ.get("OMP_NUM_THREADS"),
             os.environ.get("MXNET_USE_OPERATOR_TUNING"), os.environ.get("MXNET_ENGINE_TYPE"),
             args.steps, args.rounds))
    paper = {"prior": "scale_mixture", "pi": 0.25, "sigma_p1": 1.0, "sigma_p2": np.exp(-6.0),
             "optimizer": "adam"}
    paper_2x1200 = {key: value for key, value in PRESETS["paper-2x1200"].items()
                    if key not in ("validation", "epochs")}
    ivon_2x1200 = {key: value for key, value in PRESETS["paper-2x1200-ivon"].items()
                   if key not in ("validation", "epochs")}
    # the sparse preset's step (ndarray backend), with and without removing what its prior
    # switches off
    sparse_vd = {key: value for key, value in PRESETS["lenet-sparse-vd"].items()
                 if key not in ("validation", "epochs", "kl_warmup_epochs", "lr_decay_every")}
    variants = (("a", bench_ours, {}), ("b", bench_deterministic, {}),
                ("c", bench_tutorial, {}), ("a-ops", bench_ours, {"backend": "ndarray"}),
                ("paper", bench_ours, paper),
                ("paper-ops", bench_ours, dict(paper, backend="ndarray")),
                ("paper-2x1200", bench_ours, paper_2x1200),
                ("ivon-2x1200", bench_ours, dict(ivon_2x1200, ivon_ess=50000)),
                ("ivon-2x1200-ops", bench_ours, dict(ivon_2x1200, ivon_ess=50000,
                                                     backend="ndarray")),
                # MC dropout's step, the paper preset's prior as weight decay (the kernel's
                # bbb_prior_terms on the native backend, MXNet's operators on the other)
                ("mcdropout-2x1200", bench_ours, dict(paper_2x1200, model="mcdropout")),
                ("mcdropout-2x1200-ops", bench_ours, dict(paper_2x1200, model="mcdropout",
                                                          backend="ndarray")),
                ("adam-2x1200", bench_deterministic, {"optimizer": "adam",
                                                      "num_hidden_units": 1200,
                                                      "learning_rate": 1e-3}),
                ("kl", bench_ours, {"kl": "analytic"}),
                ("lrt", bench_ours, {"estimator": "lrt", "kl": "analytic"}),
                ("lrt-mc", bench_ours, {"estimator": "lrt"}),
                ("lrt-graph", bench_lrt_graph, {}),
                ("flipout", bench_ours, {"estimator": "flipout"}),
                ("lenet", bench_ours, {"network": "lenet"}),
                ("lenet-ops", bench_ours, {"network": "lenet", "backend": "ndarray"}),
                ("lenet-lrt", bench_ours, {"network": "lenet", "estimator": "lrt"}),
                ("lenet-flipout", bench_ours, {"network": "lenet", "estimator": "flipout"}),
                ("lenet-preset", bench_ours, {key: value for key, value
                                              in PRESETS["lenet"].items()
                                              if key not in ("validation", "epochs")}),
                ("lenet-sparse-vd", bench_ours, sparse_vd),
                ("lenet-sparse-vd-kept", bench_ours, dict(sparse_vd, remove_switched_off=False)),
                ("lenet-sparse-vd-ops", bench_ours, dict(sparse_vd, backend="ndarray")))
    timers = {name: InProcess(fn(data, config, ctx, total, **options))
              for name, fn, options in variants}
    not_measured = {}
    mxnet_defaults = dict(os.environ, MXNET_USE_OPERATOR_TUNING="1",
                          MXNET_ENGINE_TYPE="ThreadedEnginePerDevice")
    for name, child, env in (("c0", "tutorial-defaults", mxnet_defaults),
                             ("d", "pytorch-sample", _ENVIRONMENT),
                             ("d-lrt", "pytorch-lrt", _ENVIRONMENT),
                             ("d-lenet", "pytorch-lenet", _ENVIRONMENT),
                             ("d-sparse-vd", "pytorch-sparse-vd", _ENVIRONMENT)):
        cmd = serving(child, args.data_dir, total)
        if child.startswith("pytorch-"):
            cmd[0] = args.peer_python
        timer, reason = ChildProcess.start(cmd, env)
        if timer is None:
            not_measured[name] = reason
        else:
            timers[name] = timer
    try:
        per_step = time_in_turns(timers, WARMUP, args.steps, args.rounds)
    finally:
        for timer in timers.values():
            timer.close()
    if "c0" in not_measured:
        raise SystemExit("bench_train.py: the tutorial child failed: %s" % not_measured["c0"])
    per_epoch = {name: seconds * STEPS_PER_EPOCH for name, seconds in per_step.items()}
    print("native backend: %s" % ("yes" if gluon_bbb.native.library.available()
                                  else "no (%s)" % gluon_bbb.native.library.unavailable_reason()))
    print("    ndarray backend (MXNet operators only):   %6.2f s/epoch" % per_epoch["a-ops"])
    print("    paper prior (scale mixture) and Adam:     %6.2f s/epoch" % per_epoch["paper"])
    print("      the same, ndarray backend:              %6.2f s/epoch" % per_epoch["paper-ops"])
    print("    --preset paper-2x1200:                    %6.2f s/epoch" % per_epoch["paper-2x1200"])
    print("    --preset paper-2x1200-ivon (IVON):        %6.2f s/epoch" % per_epoch["ivon-2x1200"])
    print("      the same, ndarray backend:              %6.2f s/epoch" % per_epoch["ivon-2x1200-ops"])
    print("      deterministic 2x1200, gluon Trainer Adam: %6.2f s/epoch (IVON costs x%.2f)"
          % (per_epoch["adam-2x1200"], per_epoch["ivon-2x1200"] / per_epoch["adam-2x1200"]))
    print("    MC dropout 2x1200, the preset's prior:     %6.2f s/epoch (x%.2f Adam's)"
          % (per_epoch["mcdropout-2x1200"],
             per_epoch["mcdropout-2x1200"] / per_epoch["adam-2x1200"]))
    print("      the same, ndarray backend:              %6.2f s/epoch"
          % per_epoch["mcdropout-2x1200-ops"])
    print("    --kl analytic:                            %6.2f s/epoch" % per_epoch["kl"])
    print("    --estimator lrt --kl analytic:            %6.2f s/epoch" % per_epoch["lrt"])
    print("    --estimator lrt, Monte Carlo KL:          %6.2f s/epoch" % per_epoch["lrt-mc"])
    print("      its network graph alone (no parameter-side work): %6.2f s/epoch"
          % per_epoch["lrt-graph"])
    print("    --estimator flipout:                      %6.2f s/epoch" % per_epoch["flipout"])
    print("(a) Bayes by Backprop, gluon_bbb step:        %6.2f s/epoch" % per_epoch["a"])
    print("(b) deterministic MLP, gluon Dense + Trainer: %6.2f s/epoch" % per_epoch["b"])
    print("(c) tutorial's data path and operations:      %6.2f s/epoch" % per_epoch["c"])
    print("(c) with MXNet's defaults (tuning, engine): %6.2f s/epoch" % per_epoch["c0"])
    if "d" in per_epoch and "d-lrt" in per_epoch:
        print("(d) the same algorithm in plain PyTorch:     %6.2f s/epoch (torch %s)"
              % (per_epoch["d"], timers["d"].version))
        print("    its local reparametrization (closed-form KL): %6.2f s/epoch"
              % per_epoch["d-lrt"])
    else:
        print("(d) PyTorch: not measured (%s)" % not_measured.get("d", not_measured.get("d-lrt")))
    print("LeNet, native backend:                      %6.2f s/epoch" % per_epoch["lenet"])
    print("LeNet, ndarray backend:                     %6.2f s/epoch" % per_epoch["lenet-ops"])
    print("LeNet, --estimator lrt (native):            %6.2f s/epoch" % per_epoch["lenet-lrt"])
    print("LeNet, --estimator flipout (native):        %6.2f s/epoch" % per_epoch["lenet-flipout"])
    print("LeNet, --preset lenet's step (native):      %6.2f s/epoch" % per_epoch["lenet-preset"])
    print("LeNet, --preset lenet-sparse-vd's step:     %6.2f s/epoch" % per_epoch["lenet-sparse-vd"])
    print("  the same, --no-remove-switched-off:       %6.2f s/epoch (removal costs x%.2f)" % (
        per_epoch["lenet-sparse-vd-kept"],
        per_epoch["lenet-sparse-vd"] / per_epoch["lenet-sparse-vd-kept"]))
    print("  the same, ndarray backend:                %6.2f s/epoch"
          % per_epoch["lenet-sparse-vd-ops"])
    if "d-sparse-vd" in per_epoch:
        print("  sparse VD in plain PyTorch:               %6.2f s/epoch; ours/PyTorch = %.2f "
              "(kept: %.2f, ndarray: %.2f)" % ((per_epoch["d-sparse-vd"],) + tuple(
                  per_epoch[name] / per_epoch["d-sparse-vd"] for name in (
                      "lenet-sparse-vd", "lenet-sparse-vd-kept", "lenet-sparse-vd-ops"))))
    if "d-lenet" in per_epoch:
        print("LeNet in plain PyTorch:                     %6.2f s/epoch" % per_epoch["d-lenet"])
        print("LeNet native/PyTorch = %.2f, ndarray/PyTorch = %.2f, lrt/PyTorch = %.2f, "
              "flipout/PyTorch = %.2f, preset/PyTorch = %.2f"
              % tuple(per_epoch[name] / per_epoch["d-lenet"] for name in (
                  "lenet", "lenet-ops", "lenet-lrt", "lenet-flipout", "lenet-preset")))
    peak = peak_memory_of_a_child(args.data_dir)
    print("peak RSS of a 2x1200 training process:      %6.0f MiB" % peak)
    if "d" in per_epoch and "d-lrt" in per_epoch:
        print("a/d = %.2f, lrt/d = %.2f (--kl analytic), %.2f (Monte Carlo KL), "
              "lrt's graph alone/d = %.2f"
              % (per_epoch["a"] / per_epoch["d"], per_epoch["lrt"] / per_epoch["d"],
                 per_epoch["lrt-mc"] / per_epoch["d"], per_epoch["lrt-graph"] / per_epoch["d"]))
        print("lrt against PyTorch's local reparametrization: %.2f"
              % (per_epoch["lrt"] / per_epoch["d-lrt"]))
    print("a/b = %.2f" % (per_epoch["a"] / per_epoch["b"]))
    print("lrt/a = %.2f" % (per_epoch["lrt"] / per_epoch["a"]))
    print("c/a = %.2f (c as the tutorial runs, MXNet defaults: %.2f)"
          % (per_epoch["c"] / per_epoch["a"], per_epoch["c0"] / per_epoch["a"]))


if __name__ == "__main__":
    # bad input (a missing data directory, a run that is not one) as one line and status 2
    from gluon_bbb.commands.cli import run_main
    sys.exit(run_main(lambda argv: main()))

"""The training loop: Bayes by Backprop with SGD or Adam, checkpoints every epoch, resume.

Callable from a notebook (``train(config, load_mnist(), mx.cpu())``); ``train_mnist.py``
is the command-line wrapper around it.
"""
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

import mxnet as mx
import numpy as np
from mxnet import nd

from . import native
from .checkpoint import (CHECKPOINT_FILE, load_checkpoint, save_checkpoint, state_arrays,
                         write_json)
from .config import Config
from .context import context_name
from .errors import CheckpointError, ConfigError, TrainingDiverged
from .model import (combined_loss, evaluate_accuracy, init_variational_params,
                    log_softmax_likelihood, net, sample_epsilons, transform_gaussian_samples,
                    transform_rhos)
from .step import (FlatLayout, FusedWorkspace, NormalSampler, bbb_gradients, fused_bbb_gradients,
                   fused_supported, likelihood_grads, prior_for, step_noise)

CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
# Fields that may differ between a run and its resumption (training longer is allowed).
RESUMABLE_CHANGES = ("epochs",)
# may change on resume if the epochs already trained keep their learning rates
SCHEDULE_FIELDS = ("lr_decay_every", "lr_decay_factor")


@dataclass
class TrainResult:
    """What ``train`` returns: the variational parameters and one history record per epoch."""
    config: Config
    mus: list
    rhos: list
    history: list = field(default_factory=list)

    @property
    def sigmas(self):
        return transform_rhos(self.rhos)


def kl_weights(num_batches, scheme):
    """Weight of the KL term for each mini-batch i = 1..M of an epoch (list of M floats).

    ``uniform``: 1/M each. ``blundell`` (paper section 3.4): 2^(M-i) / (2^M - 1), written
    as 2^-i / (1 - 2^-M) so that no 2^M is formed (it overflows a float for M > 1023).
    Both sum to 1 over the epoch.
    """
    if scheme == "uniform":
        return [1.0 / num_batches] * num_batches
    if scheme == "blundell":
        normalizer = -math.expm1(-num_batches * math.log(2.0))
        return [math.ldexp(1.0, -i) / normalizer for i in range(1, num_batches + 1)]
    raise ValueError("unknown kl weighting %r" % (scheme,))


def bbb_loss(X, y_one_hot, mus, rhos, log_prior, num_batches, kl_weight, num_samples):
    """The combined loss of one mini-batch averaged over ``num_samples`` weight samples,
    written as the tutorial writes it, on per-layer arrays (``train`` uses the equivalent,
    faster ``step.bbb_gradients``). Call inside ``autograd.record()``.
    X: (batch, inputs); y_one_hot: (batch, classes).
    """
    ctx = X.context
    sigmas = transform_rhos(rhos)
    total = None
    for _ in range(num_samples):
        epsilons = sample_epsilons([mu.shape for mu in mus], ctx)
        weights = transform_gaussian_samples(mus, sigmas, epsilons)
        output = net(X, weights)
        loss = combined_loss(output, y_one_hot, weights, mus, sigmas, log_prior,
                             log_softmax_likelihood, num_batches, kl_weight=kl_weight)
        total = loss if total is None else total + loss
    return total / num_samples if num_samples > 1 else total


def make_optimizer(config, num_update=0):
    """``mx.optimizer`` of the config's kind; ``num_update`` steps already taken (for resume)."""
    return mx.optimizer.create(config.optimizer, learning_rate=config.learning_rate,
                               rescale_grad=1.0, wd=0.0, begin_num_update=num_update)


def train(config, data, ctx, out_dir=None, resume=False, eval_train=False,
          log=print, progress=None, check_every=50, native_kernels=None):
    """Train a Bayes-by-Backprop MLP (or, with ``config.model == "mlp"``, its deterministic
    baseline); returns a ``TrainResult``.

    config: a ``Config``; data: an ``MNIST`` tuple of NumPy arrays (``load_mnist()``);
    ctx: the MXNet context everything runs on. With ``out_dir``, writes config.json,
    history.json and an atomic checkpoint after every epoch there; ``resume`` continues
    from that checkpoint. The same seed gives the same parameters whether or not the run
    was interrupted and resumed. ``log`` receives one line per epoch; ``progress``
    (default: when stderr is a terminal) draws a progress bar within the epoch.
    Raises TrainingDiverged on a non-finite loss, before writing anything for that epoch.
    ``native_kernels``: use the fused C kernels of ``step.fused_bbb_gradients`` (None: where
    they are built and the context is a CPU; False: MXNet operators only; True:
    raise ConfigError where they cannot). Both give the same run up to float rounding.
    """
    if config.seed is None and not resume:
        config = dataclasses.replace(config, seed=int(np.random.SeedSequence().entropy % 2 ** 31))
    if progress is None:
        progress = sys.stderr.isatty()
    train_images, train_labels = data.train_images, data.train_labels
    if config.validation >= train_images.shape[0]:
        raise ConfigError("validation", config.validation,
                          "less than the %d training images" % train_images.shape[0])
    if config.validation:
        X_val = nd.array(train_images[-config.validation:], ctx=ctx, dtype="float32")
        y_val = nd.array(train_labels[-config.validation:], ctx=ctx, dtype="float32")
        train_images = train_images[:-config.validation]
        train_labels = train_labels[:-config.validation]
    if config.train_size is not None:
        train_images = train_images[:config.train_size]
        train_labels = train_labels[:config.train_size]
    num_train = train_images.shape[0]
    num_batches = math.ceil(num_train / config.batch_size)
    batch_kl_weights = [config.kl_scale * weight
                        for weight in kl_weights(num_batches, config.kl_weighting)]

    shapes = config.layer_shapes()
    start_epoch, num_update, history, saved_states = 0, 0, [], None
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        checkpoint_path = os.path.join(out_dir, CHECKPOINT_FILE)
        if resume:
            config, state, history = _load_run(out_dir, config, ctx, shapes)
            mus, rhos = state["mus"], state["rhos"]
            start_epoch, num_update = state["epoch"], state["num_update"]
            saved_states = state["optimizer_states"]
        elif os.path.exists(checkpoint_path):
            raise CheckpointError("%s already holds a run; pass --resume to continue it or "
                                  "choose another --out" % out_dir)
        write_json(os.path.join(out_dir, CONFIG_FILE),
                    dict(config.to_dict(), ctx=context_name(ctx)))
    elif resume:
        raise CheckpointError("resume needs an output directory holding a checkpoint")
    layout = FlatLayout(shapes)
    if start_epoch == 0:
        mus, rhos = init_variational_params(shapes, ctx, config.mu_scale, config.rho_offset,
                                            seed=config.seed)
    # training works on two flat vectors (FlatLayout's storage); mus and rhos, in the model's
    # shapes, are copied out of them after every epoch
    mu, rho = layout.flatten(mus), layout.flatten(rhos)

    optimizer = make_optimizer(config, num_update)
    params = [mu, rho]
    optimizer_states = [optimizer.create_state(i, p) for i, p in enumerate(params)]
    if saved_states is not None:
        _restore_states(optimizer_states, saved_states, layout)
    prior = prior_for(config)
    use_native = (native_kernels is not False
                  and fused_supported(ctx))
    if native_kernels and not use_native:
        raise ConfigError("native_kernels", native_kernels,
                          "None or False here: the kernels serve CPU contexts only (%s)"
                          % (native.unavailable_reason() or "and they are built"))

    X_all = nd.array(train_images, ctx=ctx, dtype="float32")
    y_all = nd.array(train_labels, ctx=ctx, dtype="float32")
    X_test = nd.array(data.test_images, ctx=ctx, dtype="float32")
    y_test = nd.array(data.test_labels, ctx=ctx, dtype="float32")

    for epoch in range(start_epoch, config.epochs):
        started = time.time()
        learning_rate = config.learning_rate_at(epoch)
        optimizer.set_learning_rate(learning_rate)
        order = np.random.default_rng([config.seed, epoch]).permutation(num_train)
        order_nd = nd.array(order, ctx=ctx, dtype="int32")
        X_epoch = nd.take(X_all, order_nd)
        y_epoch = nd.one_hot(nd.take(y_all, order_nd), config.num_outputs)
        sample_normal = NormalSampler(layout.size, ctx, seed=[config.seed, epoch, 1])
        loss_sum = _train_epoch(config, epoch, X_epoch, y_epoch, mu, rho, layout, prior,
                                batch_kl_weights, sample_normal, optimizer, optimizer_states,
                                progress, check_every, use_native,
                                update_natively=native_kernels is not False)
        epoch_seconds = time.time() - started
        mus, rhos = layout.unflatten(mu), layout.unflatten(rho)
        record = {"epoch": epoch + 1, "loss": loss_sum / num_batches,
                  "test_accuracy": evaluate_accuracy(X_test, y_test, mus),
                  "epoch_seconds": epoch_seconds, "learning_rate": learning_rate}
        if config.validation:
            record["validation_accuracy"] = evaluate_accuracy(X_val, y_val, mus)
        if eval_train:
            record["train_accuracy"] = evaluate_accuracy(X_all, y_all, mus)
        history.append(record)
        if out_dir is not None:
            model_order_states = [[layout.to_model_order(a) for a in state_arrays(state)]
                                  for state in optimizer_states]
            save_checkpoint(checkpoint_path, mus, rhos, model_order_states,
                            optimizer.num_update, epoch + 1)
            write_json(os.path.join(out_dir, HISTORY_FILE), history)
        if progress:
            sys.stderr.write("\r" + " " * 60 + "\r")
        log("epoch %d/%d  loss %.1f  test accuracy %.4f%s%s  %.1f s" % (
            epoch + 1, config.epochs, record["loss"], record["test_accuracy"],
            "  validation accuracy %.4f" % record["validation_accuracy"]
            if config.validation else "",
            "  train accuracy %.4f" % record["train_accuracy"] if eval_train else "",
            epoch_seconds))
    return TrainResult(config=config, mus=mus, rhos=rhos, history=history)


def _train_epoch(config, epoch, X_epoch, y_epoch, mu, rho, layout, prior, batch_kl_weights,
                 sample_normal, optimizer, optimizer_states, progress, check_every,
                 use_native=False, update_natively=False):
    """One pass over the shuffled data, updating ``mu`` and ``rho`` in place; the loss sum.
    ``use_native``: the step of ``fused_bbb_gradients``; ``update_natively``: the optimizer
    update of ``native.optimizer_update`` (which itself falls back where it cannot serve)."""
    num_train, num_batches = X_epoch.shape[0], len(batch_kl_weights)

    def update(index, param, grad):
        if update_natively:
            native.optimizer_update(optimizer, index, param, grad, optimizer_states[index])
        else:
            optimizer.update(index, param, grad, optimizer_states[index])

    pending, loss_sum = [], 0.0
    workspace = (FusedWorkspace(layout, mu.context,
                                config.batch_size if config.estimator == "lrt" else 0)
                 if use_native else None)
    for batch in range(num_batches):
        lo, hi = batch * config.batch_size, min((batch + 1) * config.batch_size, num_train)
        X, y = X_epoch[lo:hi], y_epoch[lo:hi]
        if config.model == "mlp":
            loss, grad_mu = likelihood_grads(X, y, mu, layout)
        elif use_native:
            loss, grad_mu, grad_rho = fused_bbb_gradients(
                X, y, mu, rho, layout, prior, batch_kl_weights[batch], sample_normal,
                config.num_samples, workspace, config.estimator, config.kl)
        else:
            epsilons = [step_noise(sample_normal, layout, hi - lo, config.estimator, config.kl)
                        for _ in range(config.num_samples)]
            loss, grad_mu, grad_rho = bbb_gradients(
                X, y, mu, rho, layout, prior, batch_kl_weights[batch], epsilons,
                config.estimator, config.kl, config.sigma_p)
        update(0, mu, grad_mu)
        if config.model != "mlp":
            update(1, rho, grad_rho)
        pending.append(loss)
        # reading a loss waits for MXNet's queue, so check for NaN only every check_every steps
        if len(pending) == check_every or batch == num_batches - 1:
            loss_sum += _check_finite(pending, epoch, batch)
            pending = []
            if progress:
                _draw_progress(epoch + 1, config.epochs, batch + 1, num_batches)
    return loss_sum


def _check_finite(losses, epoch, last_batch):
    """Sum of the pending per-batch losses; raises TrainingDiverged naming the first bad one."""
    values = nd.concat(*losses, dim=0).asnumpy().astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        first_batch = last_batch - len(losses) + 1 + int(bad[0])
        raise TrainingDiverged(epoch + 1, first_batch + 1, values[bad[0]])
    return float(values.sum())


def _draw_progress(epoch, epochs, batch, num_batches, width=30):
    filled = width * batch // num_batches
    sys.stderr.write("\repoch %d/%d [%s%s] %d/%d" % (
        epoch, epochs, "#" * filled, "." * (width - filled), batch, num_batches))
    sys.stderr.flush()


def _restore_states(fresh_states, saved_states, layout):
    """Copy a checkpoint's optimizer state (flat, in model order) into the fresh state arrays
    (flat, in ``layout``'s storage order)."""
    for i, fresh in enumerate(fresh_states):
        targets = state_arrays(fresh)
        saved = saved_states[i] if i < len(saved_states) else []
        if len(targets) != len(saved):
            raise CheckpointError("checkpoint optimizer state for parameter %d has %d arrays, "
                                  "this optimizer needs %d" % (i, len(saved), len(targets)))
        for target, array in zip(targets, saved):
            if array.shape != target.shape:
                raise CheckpointError("checkpoint optimizer state for parameter %d has shape %s, "
                                      "this run needs %s" % (i, array.shape, target.shape))
            target[:] = layout.from_model_order(array)


def _load_run(out_dir, config, ctx, shapes):
    """Checkpoint, history and the run's own config, checked against ``config``."""
    config_path = os.path.join(out_dir, CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise CheckpointError("cannot resume: %s does not exist" % config_path)
    saved = load_run_config(out_dir).to_dict()
    for name, value in config.to_dict().items():
        if name in RESUMABLE_CHANGES + SCHEDULE_FIELDS or (name == "seed" and value is None):
            continue
        if saved[name] != value:
            raise CheckpointError("cannot resume %s: it was trained with %s=%r, not %r"
                                  % (out_dir, name, saved[name], value))
    saved = Config.from_dict(saved)
    resumed = dataclasses.replace(saved, epochs=config.epochs,
                                  **{name: getattr(config, name) for name in SCHEDULE_FIELDS})
    state = load_checkpoint(os.path.join(out_dir, CHECKPOINT_FILE), ctx)
    changed = [e + 1 for e in range(state["epoch"])
               if resumed.learning_rate_at(e) != saved.learning_rate_at(e)]
    if changed:
        raise CheckpointError("cannot resume %s: the new learning-rate schedule changes the "
                              "rate of epochs already trained (epoch %d)" % (out_dir, changed[0]))
    check_shapes(state["mus"], shapes, os.path.join(out_dir, CHECKPOINT_FILE))
    history_path = os.path.join(out_dir, HISTORY_FILE)
    history = []
    if os.path.isfile(history_path):
        with open(history_path) as f:
            history = json.load(f)[:state["epoch"]]
    return resumed, state, history


def load_run_config(run_dir):
    """The ``Config`` a run directory was trained with (its config.json)."""
    path = os.path.join(run_dir, CONFIG_FILE)
    try:
        with open(path) as f:
            values = json.load(f)
    except (OSError, ValueError) as exc:
        raise CheckpointError("cannot read %s: %s" % (path, exc)) from None
    values.pop("ctx", None)
    return Config.from_dict(values)


def check_shapes(arrays, shapes, source):
    """Raise CheckpointError unless ``arrays`` have exactly ``shapes``."""
    found = [tuple(a.shape) for a in arrays]
    if found != [tuple(s) for s in shapes]:
        raise CheckpointError("%s holds parameters of shapes %s, the model needs %s"
                              % (source, found, [tuple(s) for s in shapes]))

"""The training loop: Bayes by Backprop with SGD or Adam, checkpoints every epoch, resume.

Callable from a notebook (``train(config, load_mnist(), mx.cpu())``); ``train_mnist.py``
is the command-line wrapper around it.
"""
import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from mxnet import nd

from .checkpoint import (BEST_CHECKPOINT_FILE, CHECKPOINT_FILE, load_checkpoint,
                         save_checkpoint, write_json)
from .config import Config
from .context import context_name
from .errors import CheckpointError, ConfigError, TrainingDiverged
from .model import evaluate_accuracy, transform_rhos
from .rundir import check_output_dir, locked
from .step import TrainingStep

CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
# Fields that may differ between a run and its resumption (training longer is allowed).
RESUMABLE_CHANGES = ("epochs",)
# may change on resume if the epochs already trained keep their learning rates
SCHEDULE_FIELDS = ("lr_decay_every", "lr_decay_factor")
# Test hook: the epoch after whose history write the process kills itself, as a crash would.
CRASH_AFTER_HISTORY = "GLUON_BBB_CRASH_AFTER_HISTORY"


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


def train(config, data, ctx, out_dir=None, resume=False, eval_train=False,
          log=print, progress=None, check_every=50, backend=None):
    """Train a Bayes-by-Backprop MLP (or, with ``config.model == "mlp"``, its deterministic
    baseline); returns a ``TrainResult``.

    config: a ``Config``; data: an ``MNIST`` tuple of NumPy arrays (``load_mnist()``);
    ctx: the MXNet context everything runs on. With ``out_dir``, writes config.json,
    history.json and an atomic checkpoint after every epoch there; ``resume`` continues
    from that checkpoint. The same seed gives the same parameters whether or not the run
    was interrupted and resumed. ``log`` receives the backend line, then one line per epoch;
    ``progress`` (default: when stderr is a terminal) draws a progress bar within the epoch.
    Raises TrainingDiverged on a non-finite loss, before writing anything for that epoch.
    ``backend``: ``native``, ``ndarray`` or None (native wherever it serves; see
    ``step.choose_backend``); both give the same run up to float rounding. With
    ``config.validation`` it also keeps best.params, the parameters at the epoch of the
    highest validation accuracy.
    """
    if config.seed is None and not resume:
        config = dataclasses.replace(config, seed=int(np.random.SeedSequence().entropy % 2 ** 31))
    if progress is None:
        progress = sys.stderr.isatty()
    _split(config, data)  # checks the sizes before anything is written
    if config.epochs == 0 and not resume:
        raise ConfigError("epochs", 0, "at least 1 for a new run (nothing to train)")
    with contextlib.ExitStack() as run_dir_lock:
        if out_dir is not None:
            run_dir_lock.enter_context(locked(check_output_dir(out_dir)))
        return _train(config, data, ctx, out_dir, resume, eval_train, log, progress,
                      check_every, backend)


def _split(config, data):
    """(training images, their labels, validation images, their labels) of ``data`` as the
    config asks: the last ``validation`` images held out, then the first ``train_size``."""
    images, labels = data.train_images, data.train_labels
    if config.validation >= images.shape[0]:
        raise ConfigError("validation", config.validation,
                          "less than the %d training images" % images.shape[0])
    split = images.shape[0] - config.validation
    train_images = images[:split][:config.train_size]
    train_labels = labels[:split][:config.train_size]
    if config.batch_size > train_images.shape[0]:
        raise ConfigError("batch_size", config.batch_size, "at most the %d training images "
                          "(after --train-size and --validation)" % train_images.shape[0])
    return train_images, train_labels, images[split:], labels[split:]


def _train(config, data, ctx, out_dir, resume, eval_train, log, progress, check_every, backend):
    """``train`` once its inputs are checked and the run directory, if any, is locked."""
    train_images, train_labels, val_images, val_labels = _split(config, data)
    num_train = train_images.shape[0]
    num_batches = math.ceil(num_train / config.batch_size)
    batch_kl_weights = [config.kl_scale * weight
                        for weight in kl_weights(num_batches, config.kl_weighting)]
    start_epoch, history, state = 0, [], None
    if out_dir is not None:
        checkpoint_path = os.path.join(out_dir, CHECKPOINT_FILE)
        if resume:
            config, state, history = _load_run(out_dir, config, ctx, config.layer_shapes())
            start_epoch = state["epoch"]
            if config.epochs <= start_epoch:
                raise CheckpointError("%s has trained %d epochs already; pass --epochs N with "
                                      "N > %d to train on" % (out_dir, start_epoch, start_epoch))
        elif os.path.exists(checkpoint_path):
            raise CheckpointError("%s already holds a run; pass --resume to continue it or "
                                  "choose another --out" % out_dir)
        write_json(os.path.join(out_dir, CONFIG_FILE),
                    dict(config.to_dict(), ctx=context_name(ctx)))
    elif resume:
        raise CheckpointError("resume needs an output directory holding a checkpoint")
    if state is None:
        step = TrainingStep(config, ctx, backend=backend)
    else:
        step = TrainingStep(config, ctx, state["mus"], state["rhos"], backend,
                            num_update=state["num_update"])
        step.load_state_arrays(state["optimizer_states"])
    log(step.describe())

    X_all = nd.array(train_images, ctx=ctx, dtype="float32")
    y_all = nd.array(train_labels, ctx=ctx, dtype="float32")
    X_test = nd.array(data.test_images, ctx=ctx, dtype="float32")
    y_test = nd.array(data.test_labels, ctx=ctx, dtype="float32")

    for epoch in range(start_epoch, config.epochs):
        started = time.time()
        step.start_epoch(epoch)
        order = np.random.default_rng([config.seed, epoch]).permutation(num_train)
        order_nd = nd.array(order, ctx=ctx, dtype="int32")
        X_epoch = nd.take(X_all, order_nd)
        y_epoch = nd.one_hot(nd.take(y_all, order_nd), config.num_outputs)
        loss_sum = _train_epoch(step, epoch, X_epoch, y_epoch, batch_kl_weights, progress,
                                check_every)
        epoch_seconds = time.time() - started
        mus = step.mus
        record = {"epoch": epoch + 1, "loss": loss_sum / num_batches,
                  "test_accuracy": evaluate_accuracy(X_test, y_test, mus),
                  "epoch_seconds": epoch_seconds,
                  "learning_rate": config.learning_rate_at(epoch)}
        if config.validation:
            record["validation_accuracy"] = evaluate_accuracy(val_images, val_labels, mus)
        if eval_train:
            record["train_accuracy"] = evaluate_accuracy(X_all, y_all, mus)
        history.append(record)
        if out_dir is not None:
            # history first: a crash between the two writes leaves a history row past the
            # checkpoint, which resume drops and trains again, never a row missing
            write_json(os.path.join(out_dir, HISTORY_FILE), history)
            if os.environ.get(CRASH_AFTER_HISTORY) == str(epoch + 1):
                os.kill(os.getpid(), signal.SIGKILL)
            # before the checkpoint: an epoch trained again after a crash rewrites the same
            if best_validation_epoch(history) is record:
                save_checkpoint(os.path.join(out_dir, BEST_CHECKPOINT_FILE), step.mus,
                                step.rhos, [], step.num_update, epoch + 1)
            save_checkpoint(checkpoint_path, step.mus, step.rhos, step.state_arrays(),
                            step.num_update, epoch + 1)
        if progress:
            sys.stderr.write("\r" + " " * 60 + "\r")
        log("epoch %d/%d  loss %.1f  test accuracy %.4f%s%s  %.1f s" % (
            epoch + 1, config.epochs, record["loss"], record["test_accuracy"],
            "  validation accuracy %.4f" % record["validation_accuracy"]
            if config.validation else "",
            "  train accuracy %.4f" % record["train_accuracy"] if eval_train else "",
            epoch_seconds))
    return TrainResult(config=config, mus=step.mus, rhos=step.rhos, history=history)


def best_validation_epoch(history):
    """The history record with the highest validation accuracy, the earliest of equals; None
    for a run without validation."""
    records = [record for record in history if "validation_accuracy" in record]
    return max(records, key=lambda record: record["validation_accuracy"], default=None)


def _train_epoch(step, epoch, X_epoch, y_epoch, batch_kl_weights, progress, check_every):
    """One pass of ``step`` over the shuffled data; the sum of the mini-batch losses."""
    num_train, num_batches = X_epoch.shape[0], len(batch_kl_weights)
    batch_size, epochs = step.config.batch_size, step.config.epochs
    pending, loss_sum = [], 0.0
    for batch in range(num_batches):
        lo, hi = batch * batch_size, min((batch + 1) * batch_size, num_train)
        pending.append(step(X_epoch[lo:hi], y_epoch[lo:hi], batch_kl_weights[batch]))
        # reading a loss waits for MXNet's queue, so check for NaN only every check_every steps
        if len(pending) == check_every or batch == num_batches - 1:
            loss_sum += _check_finite(pending, epoch, batch)
            pending = []
            if progress:
                _draw_progress(epoch + 1, epochs, batch + 1, num_batches)
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

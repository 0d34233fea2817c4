"""The training loop: Bayes by Backprop with SGD or Adam, checkpoints every epoch, resume."""
import contextlib
import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from mxnet import nd

from ..family.kl import kl_weighting
from ..shipping.writer import best_gated_units, keep_gated_units, units_left
from .config import IMPLIED, Config, flat_defaults
from .context import context_name
from ..family.elementwise import total
from ..errors import (CheckpointError, ConfigError, DataError, Interrupted, ResourceError,
                      TrainingDiverged)
from ..outputs import signals_deferred
from ..tutorial import evaluate_accuracy, evaluate_nll
from .rundir import RunDirectory, best_validation_epoch, first_non_finite
from .step import TrainingStep, choose_backend, training_memory_bytes

# Where no progress bar is drawn (stderr is not a terminal), a line at most this often within
# an epoch says how far it has come.
PROGRESS_LINE_SECONDS = 60.0


@dataclass
class TrainResult:
    """What ``train`` returns: the variational parameters and one history record per epoch."""
    config: Config
    mus: list
    rhos: list
    history: list = field(default_factory=list)

    @property
    def sigmas(self):
        return self.config.parametrization_kind.sigmas(self.rhos)


def kl_weights(num_batches, scheme):
    """Weight of the KL term for each mini-batch i = 1..M of an epoch (list of M floats), by
    the weighting ``scheme`` names (``family.kl.KLWeighting``): ``uniform``, 1/M each, or
    ``blundell`` (paper section 3.4), 2^(M-i) / (2^M - 1)."""
    return kl_weighting(scheme).weights(num_batches)


def train(config, data, ctx, out_dir=None, resume=False, eval_train=False,
          log=print, progress=None, check_every=50, backend=None):
    """Train the network ``config`` describes as its model kind says (Bayes by Backprop, Monte
    Carlo dropout or a deterministic baseline); returns a ``TrainResult``."""
    if config.seed is None and not resume:
        config = dataclasses.replace(config, seed=int(np.random.SeedSequence().entropy % 2 ** 31))
    if config.init_from is not None:
        # the run records where its means came from wherever it is read from
        config = dataclasses.replace(config, init_from=os.path.abspath(config.init_from))
    if progress is None:
        progress = sys.stderr.isatty()
    check_training(config, data, resume, ctx, backend)
    if out_dir is None and resume:
        raise CheckpointError("resuming needs a run directory ({out_dir}) holding a checkpoint")
    run = (out_dir if isinstance(out_dir, RunDirectory) or out_dir is None
           else RunDirectory(out_dir).create())
    saved = _Saved()
    with run.locked() if run is not None else contextlib.nullcontext():
        try:
            try:
                return _train(config, data, ctx, run, resume, eval_train, log, progress,
                              check_every, backend, saved)
            except BaseException:
                if run is not None and not resume and saved.epochs == 0:
                    run.discard_unsaved()
                raise
        except KeyboardInterrupt as exc:
            raise Interrupted(getattr(exc, "signal_name", "SIGINT"), _kept(run, saved.epochs),
                              resumable=run is not None and saved.epochs > 0) from None


class _Saved:
    """How many epochs of the run its checkpoint holds, as training goes on."""
    epochs = 0


def check_training(config, data, resume=False, ctx=None, backend=None):
    """The checks a run passes before anything is written: the data split, something to
    train, memory for the network and, given ``ctx``, a ``backend`` that can serve it."""
    split_data(config, data)
    if not config.build_likelihood().classifies:
        raise ConfigError("likelihood", config.likelihood, "categorical to classify images "
                          "(regression: gluon-bbb regression)")
    if config.epochs == 0 and not resume:
        raise ConfigError("epochs", 0, "at least 1 for a new run (nothing to train)")
    check_memory(config)
    if ctx is not None:
        choose_backend(config.build_plan(), ctx, backend)
    if config.init_from is not None and not resume:
        initial_means(config)
        check_start_held_out(config, data)


def check_start_held_out(config, data):
    """CheckpointError where ``config.init_from`` is a run (its config.json beside the parameter
    file) that trained on images this run holds out for validation: this run's validation
    figures, the best epoch they choose and compress's proportions would be measured on images
    its means have fitted already."""
    from .rundir import CONFIG_FILE, resolve_checkpoint
    if not config.validation:
        return
    run, _ = resolve_checkpoint(config.init_from, alone=True)
    if not os.path.isfile(run.file(CONFIG_FILE)):
        return
    record = run.read_record()
    count = data.train_images.shape[0]
    held_out, train_size = record.get("validation", 0), record.get("train_size")
    if not isinstance(held_out, int) or not isinstance(train_size, (int, type(None))):
        return  # not a run's record this check can read; the start's shapes are checked
    trained_on = count - held_out if train_size is None else min(count - held_out, train_size)
    if trained_on > count - config.validation:
        raise CheckpointError("{init_from} %s trained on the first %d training images, among "
                              "them the last %d, which this run holds out ({validation} %d): "
                              "its validation figures would score images its start has fitted; "
                              "start from a run that held out at least as many", config.init_from,
                              trained_on, trained_on - (count - config.validation),
                              config.validation)


def initial_means(config, ctx=None):
    """The means ``config.init_from`` starts mu from (its parameter file's mus, checked against
    the shapes of the config's network); CheckpointError on one line where it holds none."""
    from .rundir import load_checkpoint
    if not os.path.exists(config.init_from):
        raise CheckpointError("{init_from} %s does not exist (a run directory or a parameter "
                              "file of one)", config.init_from)
    if config.init_best_units:
        return _best_units_of_start(config, ctx)
    mus = load_checkpoint(config.init_from, ctx)["mus"]
    found, needed = [tuple(m.shape) for m in mus], [tuple(s) for s in config.layer_shapes()]
    network = config.build_network()
    gates = network.gate_positions()
    ungated = [shape for i, shape in enumerate(needed) if i not in gates]
    if gates and found == ungated:
        # the same network without its gates: each gate starts at 1 (the network as it was)
        given = iter(mus)
        return [nd.ones(shape, ctx=ctx) if i in gates else next(given)
                for i, shape in enumerate(needed)]
    if found != needed:
        raise CheckpointError("{init_from} %s holds means of shapes %s; this run's network "
                              "needs %s%s", config.init_from, found, needed,
                              " (or %s, without its gates)" % (ungated,) if gates else "")
    return mus


def _best_units_of_start(config, ctx=None):
    """``initial_means`` with ``config.init_best_units``: of the gated run ``init_from``, the
    means of the units whose gates have the highest |mu| / sigma, as many in each gated layer as
    the config's network has (``writer.best_gated_units``, ``keep_gated_units``)."""
    from .rundir import CONFIG_FILE, load_checkpoint, resolve_checkpoint
    run, _ = resolve_checkpoint(config.init_from, alone=True)
    if not os.path.isfile(run.file(CONFIG_FILE)):
        raise CheckpointError("{init_best_units} reads the network of {init_from} from its "
                              "run's %s, which is not beside %s", CONFIG_FILE, config.init_from)
    start = run.read_config()
    wide, network = start.build_network(), config.build_network()
    state = load_checkpoint(config.init_from)
    counts = [network.param_shapes()[position][0] for position in network.gate_positions()]
    try:
        if len(wide.gate_positions()) != len(counts):
            raise ValueError("not gated as this run's network is")
        mus = [m.asnumpy() for m in state["mus"]]
        sigmas = [s.asnumpy() for s in state["parametrization"].sigmas(state["rhos"])]
        narrow = keep_gated_units(wide, mus, best_gated_units(wide, mus, sigmas, counts))
        if [m.shape for m in narrow] != [tuple(s) for s in config.layer_shapes()]:
            raise ValueError("shapes")
    except ValueError:
        raise CheckpointError("{init_best_units}: {init_from} %s is a run of %s, not of this "
                              "run's network %s with as many units or more in its gated "
                              "layers", config.init_from, start.network, config.network) from None
    return [nd.array(mu, ctx=ctx) for mu in narrow]


def available_memory(root="/"):
    """``(bytes, where)``: the memory this process may still take, the least of what the
    system can give (Linux's MemAvailable), what its address-space limit leaves (``ulimit -v``,
    as batch schedulers set it, less what the process maps already) and what its cgroup's
    memory limit leaves (v2's ``memory.max``, v1's ``memory.limit_in_bytes``, less their
    usage); ``where`` names the limit that binds. (None, None) where none is known."""
    import resource
    found = []
    meminfo = _read_numbers(os.path.join(root, "proc/meminfo"), "MemAvailable:")
    if meminfo:
        found.append((meminfo * 1024, "available"))
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    mapped = _read_numbers(os.path.join(root, "proc/self/status"), "VmSize:")
    if soft != resource.RLIM_INFINITY:
        found.append((soft - (mapped or 0) * 1024, "left by the process's address-space limit "
                      "(ulimit -v)"))
    try:
        with open(os.path.join(root, "proc/self/cgroup")) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        directory = (os.path.join(root, "sys/fs/cgroup", path.lstrip("/")) if controllers == ""
                     else os.path.join(root, "sys/fs/cgroup", controllers, path.lstrip("/"))
                     if "memory" in controllers.split(",") else None)
        if directory is None:
            continue
        names = (("memory.max", "memory.current") if controllers == ""
                 else ("memory.limit_in_bytes", "memory.usage_in_bytes"))
        limit, used = (_read_numbers(os.path.join(directory, name)) for name in names)
        if limit is not None and limit < 2 ** 60:  # v1 says "no limit" with a huge number
            found.append((limit - (used or 0), "left by its cgroup's memory limit"))
    return min(found) if found else (None, None)


def _read_numbers(path, prefix=None):
    """The first whole number of the file ``path`` (of its line starting with ``prefix``), or
    None where there is none ("max", no such line, no such file)."""
    try:
        with open(path) as f:
            for line in f:
                if prefix is None or line.startswith(prefix):
                    words = line[len(prefix or ""):].split()
                    return int(words[0]) if words and words[0].isdigit() else None
    except (OSError, ValueError):
        pass
    return None


def check_memory(config, available=None):
    """ResourceError, before anything is allocated, where ``config``'s network needs more
    memory than is ``available`` (``(bytes, where)``, default ``available_memory()``)."""
    available, where = available_memory() if available is None else available
    needed = training_memory_bytes(config.build_plan())
    if available is not None and needed > available:
        size = sum(math.prod(shape) for shape in config.layer_shapes())
        shaped_by = ("{num_hidden_layers} %d, {num_hidden_units} %d" % (
            config.num_hidden_layers, config.num_hidden_units) if config.sized_by_fields
            else "{network} %s" % config.network.replace("%", "%%"))
        raise ResourceError("a network of %s parameters (" + shaped_by + ") needs about %.1f "
                            "GiB of memory to train, %.1f GiB are %s",
                            "{:,}".format(size), needed / 2 ** 30, max(available, 0) / 2 ** 30,
                            where)


def check_data(config, data):
    """DataError unless ``data``'s training and test images are (N, ``num_inputs``) arrays of
    finite numbers with N labels each, whole numbers from 0 to ``num_outputs`` - 1."""
    for part in ("train", "test"):
        images = np.asarray(getattr(data, part + "_images"))
        labels = np.asarray(getattr(data, part + "_labels"))
        if images.ndim != 2 or images.shape[1] != config.num_inputs:
            raise DataError("the %s images must be an array (N, %d), not %s", part,
                            config.num_inputs, images.shape)
        if labels.shape != (images.shape[0],):
            raise DataError("%d %s images with labels of shape %s: one label each", images.shape[0],
                            part, labels.shape)
        if not (np.issubdtype(images.dtype, np.number) and np.isfinite(images).all()):
            raise DataError("the %s images must be finite numbers", part)
        if labels.size and not (np.issubdtype(labels.dtype, np.number)
                                and np.all(labels == np.round(labels)) and labels.min() >= 0
                                and labels.max() < config.num_outputs):
            raise DataError("the %s labels must be whole numbers from 0 to %d", part,
                            config.num_outputs - 1)


def split_data(config, data):
    """(training images, their labels, validation images, their labels) of ``data`` as the
    config asks: the last ``validation`` images held out, then the first ``train_size``."""
    check_data(config, data)
    images, labels = data.train_images, data.train_labels
    if config.validation >= images.shape[0]:
        raise ConfigError("validation", config.validation,
                          "less than the %d training images" % images.shape[0])
    split = images.shape[0] - config.validation
    if config.train_size is not None and config.train_size > split:
        raise ConfigError("train_size", config.train_size, "at most the %d training images "
                          "(after {validation})" % split)
    train_images = images[:split][:config.train_size]
    train_labels = labels[:split][:config.train_size]
    if config.batch_size > train_images.shape[0]:
        raise ConfigError("batch_size", config.batch_size, "at most the %d training images "
                          "(after {train_size} and {validation})" % train_images.shape[0])
    return train_images, train_labels, images[split:], labels[split:]


def _train(config, data, ctx, run, resume, eval_train, log, progress, check_every, backend,
           saved):
    """``train`` once its inputs are checked and the run directory, if any, is locked; keeps
    ``saved.epochs``, the epochs whose checkpoint is written, up to date."""
    train_images, train_labels, val_images, val_labels = split_data(config, data)
    num_train = train_images.shape[0]
    num_batches = math.ceil(num_train / config.batch_size)
    batch_kl_weights = [config.kl_scale * weight
                        for weight in config.kl_weighting_kind.weights(num_batches)]
    config, step, history, start_epoch = _start(config, data, ctx, run, resume, backend,
                                                num_train, log)
    saved.epochs, changed = start_epoch, changed_start(config)
    table = EpochTable(config, eval_train, step.prior.has_switched_off_rule, log)
    X_all, y_all = (nd.array(a, ctx=ctx, dtype="float32") for a in (train_images, train_labels))
    test = [nd.array(a, ctx=ctx, dtype="float32") for a in (data.test_images, data.test_labels)]
    for epoch in range(start_epoch, config.epochs):
        started = time.time()
        step.start_epoch(epoch)
        order = nd.array(np.random.default_rng([config.seed, epoch]).permutation(num_train),
                         ctx=ctx, dtype="int32")
        kl_factor = step.plan.schedule.kl_factor_at(epoch)
        loss_sum = _train_epoch(step, epoch, nd.take(X_all, order),
                                nd.one_hot(nd.take(y_all, order), config.num_outputs),
                                [kl_factor * weight for weight in batch_kl_weights], progress,
                                check_every, log, changed)
        record = _epoch_record(step, config, epoch, loss_sum / num_batches,
                               time.time() - started, kl_factor, test,
                               (val_images, val_labels), (X_all, y_all), eval_train)
        history.append(record)
        if run is not None:
            # a signal waits for the epoch's files and its count: the message it ends the
            # run with names every epoch on disk, and history.json never runs past the
            # checkpoint
            with signals_deferred():
                run.save_epoch(step, history, best=best_validation_epoch(history) is record)
                saved.epochs = epoch + 1
        if progress:
            sys.stderr.write("\r" + " " * 60 + "\r")
        log(table.row(record, kl_factor))
    return TrainResult(config=config, mus=step.mus, rhos=step.rhos, history=history)


def _start(config, data, ctx, run, resume, backend, num_train, log):
    """``(config, step, history, start_epoch)`` of a run about to train: its config (a resumed
    run's own), its training step (new, from ``init_from``'s means, or from the checkpoint's
    state), the history so far and the epoch it starts at; config.json written into ``run``."""
    start_epoch, history, state = 0, [], None
    if run is not None:
        if resume:
            run.check_data(data)
            config, state, history = run.resume(config, ctx)
            start_epoch = state["epoch"]
        elif run.holds_run():
            raise CheckpointError("%s already holds a run; resume it ({resume}) or choose "
                                  "another {out_dir}", run.path)
        run.write_config(config, ctx=context_name(ctx), data_dir=data.directory,
                         data_fingerprint=data.fingerprint)
        # said once the directory is known to be this run's: a refused run never claims it
        log("training on %s, writing to %s" % (ctx, run.path))
    plan = config.build_plan()
    if state is None:
        means = initial_means(config, ctx) if config.init_from is not None else None
        step = TrainingStep(plan, ctx, means, backend=backend, num_train=num_train)
    else:
        step = TrainingStep(plan, ctx, state["mus"], state["rhos"], backend,
                            num_update=state["num_update"], num_train=num_train)
        step.load_state_arrays(state["optimizer_states"])
    log(step.describe())
    if start_epoch == config.epochs:
        log("%s has trained all its %d epochs: nothing to train" % (run.path, config.epochs))
    return config, step, history, start_epoch


def _epoch_record(step, config, epoch, loss, seconds, kl_factor, test, held_out, train,
                  eval_train):
    """Epoch ``epoch``'s history record (0-based; the record counts from 1): its mean loss,
    ``seconds``, the accuracies of the mean weights on ``test``, the ``held_out`` validation
    images and, with ``eval_train``, the ``train`` images (each ``(images, labels)``), and
    what the prior's rule has switched off."""
    mus, network = step.mus, step.network
    record = {"epoch": epoch + 1, "loss": loss,
              "test_accuracy": evaluate_accuracy(*test, mus, network=network),
              "epoch_seconds": seconds, "threads": step.threads.segments,
              "learning_rate": step.plan.schedule.learning_rate_at(epoch)}
    if config.kl_warmup_epochs:
        # the loss of a warm-up epoch weighs its KL term by this factor
        record["kl_factor"] = kl_factor
    # the parameters the prior's rule keeps (step.kept), once an epoch, for the share it
    # has switched off and the validation objective
    kept = step.kept() if step.prior.has_switched_off_rule else None
    if kept is not None:
        record["switched_off"] = 1.0 - float(nd.mean(kept).asscalar())
        left = _structure_left(step, kept)
        if left is not None:
            record["units_left"], record["multiply_adds_left"] = left
    if config.validation:
        record["validation_accuracy"] = evaluate_accuracy(*held_out, mus, network=network)
        objective = validation_objective(step, *held_out, train[0].shape[0], kept)
        if objective is not None:
            record["validation_objective"] = objective
    if eval_train:
        record["train_accuracy"] = evaluate_accuracy(*train, mus, network=network)
    return record


class EpochTable:
    """The epoch lines a person reads: a header naming the columns the run has (validation,
    train accuracy, the prior's rule, the KL warm-up), then a row an epoch, each line at most
    about 140 characters."""

    def __init__(self, config, eval_train, has_rule, log):
        width = len("epoch %d/%d" % (config.epochs, config.epochs))
        self.columns = [("epoch", width), ("loss", 10)]
        if config.kl_warmup_epochs:
            self.columns.append(("KL weight", 9))
        self.columns.append(("test accuracy (mean weights)", 28))
        if config.validation:
            self.columns.append(("validation", 10))
        if eval_train:
            self.columns.append(("train", 6))
        if has_rule:
            self.columns += [("switched off", 12), ("units left (multiply-adds)", 26)]
        self.columns.append(("seconds", 7))
        self.log, self.epochs, self.header_shown = log, config.epochs, False

    def row(self, record, kl_factor):
        """The line of epoch ``record`` (after the header, the first time)."""
        units = record.get("units_left")
        cells = {"epoch": "epoch %d/%d" % (record["epoch"], self.epochs),
                 "loss": "%.1f" % record["loss"], "KL weight": "%.2f" % kl_factor,
                 "test accuracy (mean weights)": "%.4f" % record["test_accuracy"],
                 "validation": "%.4f" % record.get("validation_accuracy", float("nan")),
                 "train": "%.4f" % record.get("train_accuracy", float("nan")),
                 "switched off": "%.2f%%" % (100 * record.get("switched_off", 0.0)),
                 "units left (multiply-adds)": "%s (%.1f%%)" % (
                     "-".join(map(str, units[:-1])), 100 * record["multiply_adds_left"])
                 if units else "", "seconds": "%.1f" % record["epoch_seconds"]}
        line = "  ".join(("%-*s" if name == "epoch" else "%*s") % (width, cells[name])
                         for name, width in self.columns)
        if not self.header_shown:
            self.header_shown = True
            header = "  ".join(("%-*s" if name == "epoch" else "%*s") % (width, name)
                               for name, width in self.columns)
            return header + "\n" + line
        return line


def _structure_left(step, kept):
    """``(units, share of the multiply-adds)`` of the network the prior's rule keeps (``kept``,
    ``step.kept()``) as ``compress`` would store it: the units of each layer with weights, the
    output layer's last, once those that read nothing or are read by nothing are removed."""
    network = step.network
    pruned = [(mu * keep).asnumpy() for mu, keep in zip(step.mus, step.layout.views(kept))]
    try:
        units, multiply_adds = units_left(network, pruned)
    except ValueError:
        return None
    return (units, multiply_adds / network.multiply_adds()) if len(units) > 1 else None


def _kept(run, saved_epochs):
    """What an interrupted run keeps, in words."""
    if run is None:
        return "nothing is saved (no run directory)"
    if saved_epochs == 0:
        return "no epoch was completed, so nothing is saved"
    return "%d completed epoch%s saved in %s" % (
        saved_epochs, " is" if saved_epochs == 1 else "s are", run.path)


def validation_objective(step, images, labels, num_train, kept):
    """For a prior that prunes as it trains (its ``switched_off``, sparse variational dropout's
    log alpha > 3) and has a closed-form KL: the run's objective on held-out images, in nats:
    ``num_train`` times their mean negative log-likelihood under the means with the switched-off
    parameters zeroed (the network the prior's rule keeps: ``kept``, ``step.kept()``), plus
    KL(q || P) of all the parameters, weighed by ``kl_scale`` as training weighs it after its
    warm-up."""
    if kept is None or not step.prior.has_closed_form_kl:
        return None
    sigma = step.parametrization.sigma(step.rho)
    kl = float(nd.sum(step.prior.closed_form_kl(step.mu, sigma)[0]).asscalar())
    kept_means = step.layout.views(step.mu * kept)
    return (num_train * evaluate_nll(images, labels, kept_means, network=step.network)
            + step.plan.kl_scale * kl)


def _train_epoch(step, epoch, X_epoch, y_epoch, batch_kl_weights, progress, check_every, log,
                 changed):
    """One pass of ``step`` over the shuffled data; the sum of the mini-batch losses."""
    num_train, num_batches = X_epoch.shape[0], len(batch_kl_weights)
    batch_size, epochs = step.plan.batch_size, step.plan.schedule.epochs
    pending, loss_sum = [], 0.0
    started = last_line = time.time()
    for batch in range(num_batches):
        lo, hi = batch * batch_size, min((batch + 1) * batch_size, num_train)
        pending.append(step(X_epoch[lo:hi], y_epoch[lo:hi], batch_kl_weights[batch]))
        # reading a loss waits for MXNet's queue, so check for NaN only every check_every steps
        if len(pending) == check_every or batch == num_batches - 1:
            first = batch - len(pending) + 1
            positions = [(epoch, b) for b in range(first, batch + 1)]
            loss_sum += check_finite(pending, step, positions, changed)
            check_parameters_finite(step, positions)
            pending = []
            if progress:
                _draw_progress(epoch + 1, epochs, batch + 1, num_batches)
        if not progress and time.time() - last_line >= PROGRESS_LINE_SECONDS:
            last_line = time.time()
            log("epoch %d/%d: batch %d/%d, %.0f s" % (epoch + 1, epochs, batch + 1,
                                                      num_batches, last_line - started))
    return loss_sum


def check_finite(losses, step, positions, changed=()):
    """Sum of the pending losses of ``step``'s last updates, made at ``positions`` (0-based
    (epoch, batch) pairs); raises TrainingDiverged naming the first bad one, how many
    updates had been made before it and the settings ``changed`` from their defaults
    (``changed_start``)."""
    values = nd.concat(*losses, dim=0).asnumpy().astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        epoch, batch = positions[int(bad[0])]
        updates_before = step.num_update - len(losses) + int(bad[0])
        # the run's first loss is known where these losses begin the run
        first_loss = values[0] if step.num_update == len(losses) and bad[0] > 0 else None
        raise TrainingDiverged(epoch + 1, batch + 1, values[bad[0]], updates_before,
                               step.plan.schedule.learning_rate_at(epoch), first_loss,
                               changed=changed)
    return float(values.sum())


def changed_start(config):
    """The settings of ``config`` that set the first loss and differ from the defaults (those
    of its choices where they bring their own: ``config.IMPLIED``)."""
    values, defaults = config.to_flat(), flat_defaults()
    for (name, value), settings in IMPLIED:
        if values[name] == value:
            defaults.update(settings)
    return [(field, values[field]) for field in TrainingDiverged.START_FIELDS
            if field in values and values[field] != defaults[field]]


def check_parameters_finite(step, positions):
    """Raises TrainingDiverged naming the parameter array and the updates ``positions`` (0-based
    (epoch, batch) pairs, the last made) where one of ``step``'s mu and rho turned non-finite
    with a finite loss (an update that overflows a parameter): nothing is computed, or saved,
    on NaN."""
    sums = nd.concat(total(step.mu), total(step.rho), dim=0)
    if np.isfinite(sums.asnumpy()).all():
        return
    found = first_non_finite(step.mus, step.rhos)
    if found:
        name, count, size, value = found
        (epoch, first), (_, last) = positions[0], positions[-1]
        raise TrainingDiverged(epoch + 1, last + 1, value, since_batch=first + 1,
                               parameter="%s (%d of its %d entries)" % (name, count, size))


def _draw_progress(epoch, epochs, batch, num_batches, width=30):
    filled = width * batch // num_batches
    sys.stderr.write("\repoch %d/%d [%s%s] %d/%d" % (
        epoch, epochs, "#" * filled, "." * (width - filled), batch, num_batches))
    sys.stderr.flush()

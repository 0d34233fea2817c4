"""The run directory: what it holds, how each file is read, checked and written (its parameter
files, ``nd.save``'s format, at the end), the lock on it, and what a resumed run may change.
Training, ``prune.py`` and ``evaluate`` reach a run's files only through ``RunDirectory``.
MXNet is imported where a parameter file is read or written, never by importing this module (a
sweep's process reads runs without it)."""
import contextlib
import dataclasses
import errno
import fcntl
import os
import zlib

from .config import Config, import_recorded_classes
from .. import jsonfile, outputs
from ..errors import CheckpointError, ConfigError, DataError, OutputError, RunDirectoryBusy
from ..family.parametrizations import SOFTPLUS, parametrization

CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
CHECKPOINT_FILE = "checkpoint.params"
BEST_CHECKPOINT_FILE = "best.params"
LOCK_FILE = ".lock"
REGRESSION_METRICS_FILE = "metrics.json"
UNCERTAINTY_FILE = "uncertainty.json"  # the uncertainty report (analysis/report.py), unprefixed
RUN_FILES = (CONFIG_FILE, HISTORY_FILE, CHECKPOINT_FILE, BEST_CHECKPOINT_FILE, LOCK_FILE,
             REGRESSION_METRICS_FILE, outputs.RUN_MARKER)
# what a training run's own files hold, claimed before it writes them (``outputs.py``)
TRAINING_FILES = {CONFIG_FILE: outputs.RUN_CONFIG, HISTORY_FILE: outputs.HISTORY,
                  CHECKPOINT_FILE: outputs.PARAMETERS, BEST_CHECKPOINT_FILE: outputs.PARAMETERS}
# config.json's entries beside the Config's fields: how the run was made, not what it learns
RUN_RECORD = ("ctx", "data_dir", "data_fingerprint", "problem", "scaling")
# What config.json records beside the Config's fields (which the Config checks), and what an
# epoch's record in history.json holds
RECORD_SCHEMA = {"ctx": jsonfile.optional(jsonfile.text),
                 "data_dir": jsonfile.optional(jsonfile.path_of),
                 "data_fingerprint": jsonfile.optional(jsonfile.text),
                 "problem": jsonfile.optional(jsonfile.text),
                 "scaling": jsonfile.optional(jsonfile.record(
                     {name: jsonfile.number() for name in ("x_mean", "x_sd", "y_mean", "y_sd")}))}
_COUNT, _SHARE = jsonfile.optional(jsonfile.number(0)), jsonfile.optional(jsonfile.proportion)
EPOCH_SCHEMA = dict(
    loss=jsonfile.number(), learning_rate=jsonfile.number(0), epoch_seconds=_COUNT,
    kl_factor=_SHARE, switched_off=_SHARE, multiply_adds_left=_SHARE,
    validation_objective=jsonfile.optional(jsonfile.number()),
    threads=jsonfile.optional(jsonfile.list_of(jsonfile.list_of(jsonfile.whole(), 2, 2))),
    units_left=jsonfile.optional(jsonfile.list_of(jsonfile.whole())),
    **{name: _SHARE for name in ("test_accuracy", "validation_accuracy", "train_accuracy")})
# Fields that may differ between a run and its resumption (training longer is allowed).
RESUMABLE_CHANGES = ("epochs",)
# may change on resume if the epochs already trained keep their learning rates
SCHEDULE_FIELDS = ("lr_schedule", "lr_decay_every", "lr_decay_factor")
# fields a resume may leave unset (None), meaning the run's own: the seed, where the means began
UNSET_MEANS_THE_RUNS = ("seed", "init_from")


def best_validation_epoch(history):
    """The history record of a run's best validation epoch, the one best.params holds: the
    lowest validation objective where the records hold one (a prior that prunes as it trains,
    ``loop.validation_objective``: there the means' validation accuracy is highest before
    the KL term has switched anything off), else the highest validation accuracy; the earliest
    of equals; None for a run without validation."""
    objectives = [record for record in history if "validation_objective" in record]
    if objectives:
        return min(objectives, key=lambda record: record["validation_objective"])
    records = [record for record in history if "validation_accuracy" in record]
    return max(records, key=lambda record: record["validation_accuracy"], default=None)


class RunDirectory:
    """The files of one run directory ``path``: ``with run.locked():`` around the work."""

    def __init__(self, path):
        if not isinstance(path, str) or not path.strip():
            raise ConfigError("out_dir", path, "a directory path")
        self.path = path
        self._lock_file = None
        self._made = []

    def file(self, name):
        return os.path.join(self.path, name)

    def create(self, field="out_dir", files=None, own_runs=None, sources=None):
        """Claim the directory for ``files`` (``{name: outputs.FileKind}``, default a training
        run's own) as ``outputs.claim_directory`` rules: never inside another run's directory
        than ``own_runs`` (default this run's own), never over a link, a special file or a file
        of another kind, reports only over reports on ``sources`` (default ``own_runs``); then
        make it if needed and check that it can be written."""
        own_runs = (self.path,) if own_runs is None else tuple(own_runs)
        if sources is None:
            sources = frozenset(os.path.realpath(run) for run in own_runs)
        outputs.claim_directory(self.path, TRAINING_FILES if files is None else files, field,
                                own_runs, sources)
        self._made = outputs.make_directory(self.path, field)
        return self

    @contextlib.contextmanager
    def locked(self):
        """Hold the directory's lock for the ``with`` block; inside a block of the same object
        it is held already and is not taken again."""
        if self._lock_file is not None:
            yield self
            return
        path = self.file(LOCK_FILE)
        try:
            lock_file = outputs.open_lock_file(path)
        except OutputError:
            self._remove_made()
            raise
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = outputs.lock_holder(lock_file)
            lock_file.close()
            raise RunDirectoryBusy("%s is in use by another process (pid %s); wait for it to "
                                   "end or choose another directory", self.path, holder) from None
        try:
            outputs.write_holder(lock_file, path)
        except OutputError:
            lock_file.close()
            self._remove_made()
            raise
        self._lock_file = lock_file
        try:
            yield self
        finally:
            self._lock_file = None
            lock_file.close()  # releases the lock

    def discard_unsaved(self):
        """Remove what a new run wrote before its first epoch was saved (config.json, the
        history), and the directories ``create`` made where nothing else is in them: a run that
        failed or was stopped before it saved anything leaves nothing behind."""
        if self.holds_run():
            return
        for name in (CONFIG_FILE, HISTORY_FILE, outputs.RUN_MARKER):
            with contextlib.suppress(OSError):
                os.remove(self.file(name))
        self._remove_made()

    def _remove_made(self):
        """Remove what ``create`` made, where nothing but the lock file is in it."""
        if self._made and os.listdir(self.path) in ([], [LOCK_FILE]):
            with contextlib.suppress(OSError):
                os.remove(self.file(LOCK_FILE))
            outputs.remove_made(self._made)

    def files(self):
        """The paths of the files that make up the run (its config, history, parameters, lock
        and metrics): what no command may write over while reading the run
        (``outputs.check_not_an_input``)."""
        return [self.file(name) for name in RUN_FILES]

    def holds_run(self):
        """True once a checkpoint has been written here."""
        return os.path.lexists(self.file(CHECKPOINT_FILE))

    # config.json

    def read_record(self):
        """config.json as a dict, checked to be a JSON object."""
        path = self.file(CONFIG_FILE)
        if not os.path.lexists(path):
            raise CheckpointError("%s holds no run: %s does not exist", self.path, path)
        problem = outputs.path_problem(path)
        if problem:
            raise CheckpointError("%s is %s, not a run's config.json", path, problem)
        return jsonfile.check(jsonfile.read(path, CheckpointError), RECORD_SCHEMA, path,
                              CheckpointError, "object of a run's settings")

    def read_config(self):
        """The ``Config`` the run was trained with; a bad entry is named with its file."""
        values = {k: v for k, v in self.read_record().items() if k not in RUN_RECORD}
        path = self.file(CONFIG_FILE)
        unknown = Config.unknown_keys(values)
        if unknown:
            raise CheckpointError("%s: unknown field(s) %s", path, ", ".join(unknown))
        import_recorded_classes(values, self.path)
        try:
            return Config.from_dict(values)
        except ConfigError as exc:
            raise CheckpointError("%s: %s", path, exc.describe(lambda f: "field " + f)) from None

    def read_classifier_config(self):
        """``read_config()`` of a run that classifies images (an MNIST run, not a regression
        run); CheckpointError saying what the run is otherwise."""
        config = self.read_config()
        if not config.build_likelihood().classifies:
            problem = self.read_record().get("problem")
            raise CheckpointError(
                "%s is a regression run (%slikelihood %s), not an image classifier: its figures "
                "are in its %s, written by gluon-bbb regression, and "
                "gluon_bbb.toy_problems.predict_regression predicts with it", self.path,
                "problem %s, " % problem if problem else "", config.likelihood,
                REGRESSION_METRICS_FILE)
        return config

    def recorded_data_dir(self):
        """The MNIST directory the run was trained on, while it still exists; else None (then
        ``load_mnist`` searches as usual)."""
        recorded = self.read_record().get("data_dir")
        return recorded if recorded and os.path.isdir(recorded) else None

    def load_data(self, data_dir=None, remedy=None):
        """MNIST as the run's readers take it: from ``data_dir``, else from the directory the run
        was trained on while it exists, else where ``load_mnist`` searches; ``check_data``'d."""
        from ..data import load_mnist
        data = load_mnist(data_dir or self.recorded_data_dir())
        self.check_data(data, remedy)
        return data

    def check_data(self, data, remedy=None):
        """DataError on one line where ``data`` (an ``MNIST``) holds other files than the run
        recorded it trained on: a run's figures, its validation images and its resumed epochs
        are those of its own data."""
        recorded = self.read_record().get("data_fingerprint")
        found = data.fingerprint
        if recorded and found and recorded != found:
            raise DataError("%s holds other MNIST files than %s was trained on (SHA-256 %s..., "
                            "not the run's %s...): " + (remedy or "name the directory it was "
                                                        "trained on with {data_dir}"),
                            data.directory, self.path, found[:12], recorded[:12])

    def write_config(self, config, **record):
        """Write config.json, the directory marked as a run's first (``outputs.mark_run``)."""
        outputs.mark_run(self.path)
        outputs.write_json(self.file(CONFIG_FILE), dict(config.to_dict(), **record),
                           outputs.RUN_CONFIG)

    # history.json

    def read_history(self, epochs):
        """The records of the first ``epochs`` epochs; CheckpointError where the file is missing,
        unreadable, not a list of epoch records or shorter than that."""
        path = self.file(HISTORY_FILE)
        if not os.path.lexists(path):
            raise CheckpointError("%s does not exist, but the checkpoint has %d epochs: the "
                                  "run's history is lost", path, epochs)
        problem = outputs.path_problem(path)
        if problem:
            raise CheckpointError("%s is %s, not a run's history.json", path, problem)
        history = jsonfile.read(path, CheckpointError)
        if not (isinstance(history, list) and all(
                isinstance(r, dict) and r.get("epoch") == i + 1 for i, r in enumerate(history))):
            raise CheckpointError("%s is not a list of epoch records 1, 2, ...", path)
        history = [jsonfile.check(r, EPOCH_SCHEMA, "%s, epoch %d" % (path, i + 1),
                                  CheckpointError) for i, r in enumerate(history)]
        if len(history) < epochs:
            raise CheckpointError("%s holds %d epochs, the checkpoint %d: the run's history is "
                                  "incomplete", path, len(history), epochs)
        # a crash between the history and the checkpoint writes leaves one record more
        return history[:epochs]

    def write_history(self, history):
        outputs.write_json(self.file(HISTORY_FILE), history, outputs.HISTORY)

    # parameters

    def save_parameters(self, step, epoch, best=False):
        """Write ``step``'s parameters after ``epoch`` epochs: checkpoint.params with the
        optimizer state, or best.params without it."""
        save_checkpoint(self.file(BEST_CHECKPOINT_FILE if best else CHECKPOINT_FILE), step.mus,
                        step.rhos, [] if best else step.state_arrays(), step.num_update, epoch,
                        step.parametrization, trained_as(step.plan.model_kind,
                                                         step.plan.optimizer))

    def save_epoch(self, step, history, best=False):
        """Write the epoch ``step`` has just completed: history.json (``history``, its last
        record that epoch), best.params when ``best``, then checkpoint.params."""
        epoch = history[-1]["epoch"]
        # history first: a crash between the writes leaves a history row past the
        # checkpoint, which resume drops and trains again, never a row missing
        self.write_history(history)
        # before the checkpoint: an epoch trained again after a crash rewrites the same
        if best:
            self.save_parameters(step, epoch, best=True)
        self.save_parameters(step, epoch)

    def load_parameters(self, config, ctx=None, path=None):
        """A parameter file of this run (default checkpoint.params), checked against the shapes
        of ``config``'s network."""
        path = path or self.file(CHECKPOINT_FILE)
        state = read_checkpoint(path, ctx)
        check_shapes(state["mus"], config.layer_shapes(), path)
        check_shapes(state["rhos"], config.layer_shapes(), path)
        if state["parametrization"] != config.parametrization_kind:
            raise CheckpointError("%s holds rhos of parametrization %s, its run's config.json "
                                  "says %s", path, state["parametrization"].name,
                                  config.parametrization)
        recorded = trained_as(config.model_kind, config.update_rule)
        if state["trained_as"] not in (None, recorded):
            raise CheckpointError("%s was trained as %s (model, optimizer), its run's "
                                  "config.json says %s: the file or config.json was changed "
                                  "after the run wrote them", path, state["trained_as"],
                                  recorded)
        return state

    def load_predictive(self, config, ctx=None, path=None):
        """``load_parameters`` with ``sigmas``, the standard deviations the run predicts with
        (``Config.predictive_sigmas``: None for a kind that learns none): what every reader
        that predicts takes."""
        state = self.load_parameters(config, ctx, path)
        state["sigmas"] = config.predictive_sigmas(state["mus"], state["rhos"],
                                                   state["parametrization"])
        return state

    # resuming

    def resume(self, requested, ctx):
        """``(config, state, history)`` to continue this run with ``requested`` (a Config whose
        fields must match the run's, but for the resume rules of docs/DESIGN.md)."""
        saved = self.read_config()
        config = resume_config(saved, requested, self.path)
        path = self.file(CHECKPOINT_FILE)
        if not os.path.lexists(path):
            raise CheckpointError("cannot resume %s: it holds no checkpoint (%s)", self.path,
                                  CHECKPOINT_FILE)
        state = self.load_parameters(saved, ctx)
        rates, saved_rates = config.build_schedule(), saved.build_schedule()
        changed = [e + 1 for e in range(state["epoch"])
                   if rates.learning_rate_at(e) != saved_rates.learning_rate_at(e)]
        if changed:
            raise CheckpointError("cannot resume %s: the new learning-rate schedule (%s, "
                                  "{epochs}) changes the rate of epochs already trained (epoch "
                                  "%%d)" % ("%s", ", ".join("{%s}" % name
                                                             for name in SCHEDULE_FIELDS)),
                                  self.path, changed[0])
        if config.epochs < state["epoch"]:
            raise CheckpointError("%s has trained %d epochs already; {epochs} must be at least "
                                  "%d (more trains on; as many trains nothing and draws the "
                                  "run's reports again)", self.path, state["epoch"],
                                  state["epoch"])
        return config, state, self.read_history(state["epoch"])


def trained_as(model_kind, update_rule):
    """A run's model kind and update rule (``plan.UpdateRule``), as its checkpoints record
    them."""
    return "%s %s" % (model_kind.name, update_rule.name)


def resume_config(saved, requested, where="the run"):
    """The config a resumed run trains with: ``saved`` with ``requested``'s epochs and schedule;
    CheckpointError naming the first other field where ``requested`` differs (an unset seed or
    init_from means the run's)."""
    trained = saved.to_flat()
    for name, value in requested.to_flat().items():
        if name in RESUMABLE_CHANGES + SCHEDULE_FIELDS or (name in UNSET_MEANS_THE_RUNS
                                                           and value is None):
            continue
        if trained.get(name) != value:
            raise CheckpointError("cannot resume %%s: it was trained with {%s} %%r, not %%r"
                                  % name, where, trained.get(name), value)
    return dataclasses.replace(saved, epochs=requested.epochs,
                               **{name: getattr(requested, name) for name in SCHEDULE_FIELDS})


def check_shapes(arrays, shapes, source):
    """Raise CheckpointError unless ``arrays`` have exactly ``shapes``."""
    found = [tuple(a.shape) for a in arrays]
    if found != [tuple(s) for s in shapes]:
        raise CheckpointError("%s holds parameters of shapes %s, the model needs %s",
                              source, found, [tuple(s) for s in shapes])


def resolve_checkpoint(path, alone=False):
    """``(RunDirectory, parameter file)`` named by ``path``: a run directory, read at its
    checkpoint.params, or a parameter file in one (checkpoint.params, best.params), or with
    ``alone`` (only its arrays are read) anywhere."""
    problem = outputs.path_problem(path)
    if problem and not os.path.isdir(path):  # a directory, through links too, is a run's
        raise CheckpointError("%s is %s, not a run directory or a parameter file", path, problem)
    if os.path.isdir(path):
        run = RunDirectory(path)
        params = path if path.rstrip(os.sep).endswith(".params") else run.file(CHECKPOINT_FILE)
        if os.path.isdir(params):
            raise CheckpointError("%s is a directory, not a checkpoint file", params)
        return run, params
    if os.path.isfile(path):
        if is_compressed_model(path):
            raise CheckpointError("%s is a compressed model, not a run: classify images with it "
                                  "with gluon-bbb predict %s IMAGE...", path, path)
        run = RunDirectory(os.path.dirname(path) or ".")
        if not alone and not os.path.lexists(run.file(CONFIG_FILE)):
            raise CheckpointError("%s is a file outside a run directory (%s holds no %s): name "
                                  "a run directory, or its %s or best.params", path, run.path,
                                  CONFIG_FILE, CHECKPOINT_FILE)
        return run, path
    raise CheckpointError("checkpoint %s does not exist", path)


def is_compressed_model(path):
    """True for a file that starts as the files gluon_bbb.commands.compress writes do."""
    from ..shipping.model_file import MAGIC
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def load_checkpoint(path, ctx=None):
    """The parameters, optimizer state and epoch of a checkpoint: a run directory's
    checkpoint.params, or a parameter file (``read_checkpoint``)."""
    return read_checkpoint(resolve_checkpoint(path, alone=True)[1], ctx)


def report_prefix(params_path):
    """Prefix of the report files written about ``params_path``: none for a run's
    checkpoint.params, else the file's stem and a dash (``best-pruning.json`` for best.params),
    so that reports on the best epoch sit beside those on the last without replacing them."""
    name = os.path.basename(params_path)
    return "" if name == CHECKPOINT_FILE else os.path.splitext(name)[0] + "-"


# the parameter files: nd.save of mu, rho, the optimizer state and what they were trained as
LAYOUT_OUTPUTS_INPUTS = 1
# the key of the CRC-32 of a file's other arrays (files written before it have none)
CHECKSUM = "checksum"


def save_checkpoint(path, mus, rhos, optimizer_states, num_update, epoch,
                    sigma_parametrization=SOFTPLUS, trained_as=None):
    """Write a checkpoint atomically."""
    from mxnet import nd
    arrays = {"epoch": nd.array([epoch], dtype="int64"),
              "num_update": nd.array([num_update], dtype="int64"),
              "layout": nd.array([LAYOUT_OUTPUTS_INPUTS], dtype="int64"),
              "parametrization": _ascii(sigma_parametrization.name)}
    if trained_as is not None:
        arrays["trained_as"] = _ascii(trained_as)
    for i, (mu, rho) in enumerate(zip(mus, rhos)):
        arrays["mu:%d" % i] = mu
        arrays["rho:%d" % i] = rho
    for i, state in enumerate(optimizer_states):
        for j, array in enumerate(state):
            arrays["opt:%d:%d" % (i, j)] = array
    arrays[CHECKSUM] = nd.array([_checksum(arrays)], dtype="int64")
    outputs.write_atomically(path, lambda tmp: nd.save(tmp, arrays), outputs.PARAMETERS)


def _checksum(arrays):
    """CRC-32 of every array of a checkpoint but its checksum: keys, dtypes, shapes and bytes."""
    import numpy as np
    crc = 0
    for key in sorted(k for k in arrays if k != CHECKSUM):
        values = arrays[key].asnumpy()
        crc = zlib.crc32(("%s %s %s" % (key, values.dtype, values.shape)).encode(), crc)
        crc = zlib.crc32(np.ascontiguousarray(values).tobytes(), crc)
    return crc


def read_checkpoint(path, ctx=None):
    """Read a checkpoint file; returns dict with ``mus``, ``rhos``, ``optimizer_states``
    (list of lists of NDArrays), ``num_update``, ``epoch`` and ``parametrization`` (the object
    that turns its rhos into sigmas)."""
    import mxnet as mx
    from mxnet import nd
    ctx = ctx or mx.cpu()
    problem = outputs.path_problem(path)
    if problem:
        raise CheckpointError("%s is %s, not a checkpoint file", path, problem)
    if not os.path.isfile(path):
        raise CheckpointError("checkpoint %s does not exist", path)
    if not outputs.PARAMETERS.holds(path):  # told by its first bytes, before MXNet's C++ message
        raise CheckpointError("checkpoint %s is not %s: it does not begin as MXNet's nd.save "
                              "files do", path, outputs.PARAMETERS.words)
    try:
        arrays = nd.load(path)
    except mx.base.MXNetError as exc:
        # MXNet's message carries a C++ traceback; its last line says what is wrong (a damaged
        # length reads as "Failed to allocate CPU Memory")
        reason = str(exc).strip().splitlines()[-1].replace("MXNetError: ", "")
        raise CheckpointError("checkpoint %s is damaged or cut short: MXNet cannot read its "
                              "arrays (%s)", path, reason[:200]) from None
    if not isinstance(arrays, dict) or "mu:0" not in arrays or "epoch" not in arrays:
        raise CheckpointError("checkpoint %s does not hold gluon_bbb parameters", path)
    if "num_update" not in arrays:
        raise CheckpointError("checkpoint %s lacks 'num_update'", path)
    if CHECKSUM in arrays and int(arrays[CHECKSUM].asscalar()) != _checksum(arrays):
        raise CheckpointError("checkpoint %s is damaged: its arrays do not match the checksum "
                              "it was written with", path)
    count = sum(1 for key in arrays if key.startswith("mu:"))
    try:
        mus = [arrays["mu:%d" % i].as_in_context(ctx) for i in range(count)]
        rhos = [arrays["rho:%d" % i].as_in_context(ctx) for i in range(count)]
    except KeyError as exc:
        raise CheckpointError("checkpoint %s lacks %s", path, exc) from None
    opt_keys = [k for k in arrays if k.startswith("opt:")]
    states = [[] for _ in range(1 + max([int(k.split(":")[1]) for k in opt_keys], default=-1))]
    for key in opt_keys:
        _, i, j = key.split(":")
        states[int(i)].append((int(j), arrays[key].as_in_context(ctx)))
    states = [[a for _, a in sorted(s, key=lambda t: t[0])] for s in states]
    check_finite_parameters(path, mus, rhos)
    if "layout" not in arrays:
        mus, rhos, states = _from_inputs_outputs(mus, rhos, states)
    return {"mus": mus, "rhos": rhos, "optimizer_states": states,
            "num_update": int(arrays["num_update"].asscalar()),
            "epoch": int(arrays["epoch"].asscalar()),
            "parametrization": _parametrization_of(path, arrays),
            "trained_as": _text(arrays["trained_as"]) if "trained_as" in arrays else None}


def _ascii(text):
    from mxnet import nd
    return nd.array(list(text.encode("ascii")), dtype="uint8")


def _text(array):
    import numpy as np
    return bytes(array.asnumpy().astype(np.uint8).tolist()).decode("ascii", "replace")


def _parametrization_of(path, arrays):
    """The parametrization a file's ``parametrization`` key names (softplus without one)."""
    if "parametrization" not in arrays:
        return SOFTPLUS
    name = _text(arrays["parametrization"])
    try:
        return parametrization(name)
    except ConfigError:
        raise CheckpointError("checkpoint %s holds rhos of parametrization %r, which this "
                              "process does not define (a parametrization of the user's own: "
                              "define that class first)", path, name) from None


def first_non_finite(mus, rhos):
    """Where ``mus`` and ``rhos`` (NDArrays) first hold NaN or infinity: ``(name, count, size,
    value)``, the array by its key here (``mu:i``, ``rho:i``), how many of its entries, of how
    many, and the first such value; None where all are finite."""
    import numpy as np
    named = [("mu:%d" % i, m) for i, m in enumerate(mus)] + [
        ("rho:%d" % i, r) for i, r in enumerate(rhos)]
    for name, array in named:
        values = array.asnumpy()
        bad = ~np.isfinite(values)
        if bad.any():
            return name, int(bad.sum()), values.size, values[bad][0]
    return None


def check_finite_parameters(path, mus, rhos):
    """CheckpointError naming the first array of ``mus`` and ``rhos`` holding NaN or infinity:
    nothing is pruned, evaluated, compressed or resumed from such a file."""
    found = first_non_finite(mus, rhos)
    if found:
        raise CheckpointError("%s holds non-finite parameters: %d of the %d entries of %s are "
                              "NaN or infinite; nothing is computed on them", path, found[1],
                              found[2], found[0])


def _from_inputs_outputs(mus, rhos, states):
    """Parameters and flat optimizer state with weights (inputs, outputs) turned to (outputs,
    inputs)."""
    from mxnet import nd
    shapes = [m.shape for m in mus]

    def turn_flat(flat):
        blocks, offset = [], 0
        for shape in shapes:
            size = int(shape[0] * (shape[1] if len(shape) == 2 else 1))
            block = flat[offset:offset + size].reshape(shape)
            blocks.append((block.T if len(shape) == 2 else block).reshape((-1,)))
            offset += size
        return nd.concat(*blocks, dim=0)
    turn = lambda arrays: [a.T.copy() if a.ndim == 2 else a for a in arrays]
    return turn(mus), turn(rhos), [[turn_flat(a) for a in state] for state in states]

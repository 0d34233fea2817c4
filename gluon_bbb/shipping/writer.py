"""Compression of a trained run into a file a NumPy-only program predicts with
(``shipping/model_file.py`` reads it): pruning by signal-to-noise ratio, the removal of whole units and
channels the pruning leaves without inputs or outputs, means quantized no finer than the
posterior's own uncertainty, compact indices and, optionally, the kept weights' sigmas at low
precision for a Monte Carlo predictive."""
import math

import numpy as np

from . import model_file as compressed
from .model_file import FORMAT_NAME, encode_varints, gaps_from_positions
from ..data import IMAGE_SHAPE, PIXEL_SCALE
from ..errors import CheckpointError, ConfigError, is_real
from ..networks.network import parse_network

# the proportions --max-error-increase chooses among
SEARCH_PROPORTIONS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.975, 0.98,
                      0.985, 0.99, 0.993, 0.995, 0.997, 0.998, 0.999)


# The network as a chain of layers with weights and what lies between them.

class _Stage:
    """A layer with weights and the layers without weights after it (up to the next one)."""

    def __init__(self, layer, W, b, sW, sb, position):
        self.layer, self.after = layer, []
        self.W, self.b, self.sW, self.sb = W, b, sW, sb
        # where W and its gate's factors (None: no gate follows) lie among the parameters
        self.position, self.gate = position, None

    @property
    def units(self):
        return self.W.shape[0]

    def incoming_pruned(self):
        """Units whose incoming weights are all 0."""
        return ~np.any(self.W.reshape(self.units, -1) != 0, axis=1)

    def constant_output(self, unit):
        """What unit ``unit`` puts out once its incoming weights are all 0: its bias through the
        layers that follow (a ReLU clips it; max pooling and flattening keep a constant)."""
        value = float(self.b[unit])
        for layer in self.after:
            value = layer.constant_through(value)
        return value

    def keep_units(self, keep):
        self.W, self.b = self.W[keep], self.b[keep]
        if self.sW is not None:
            self.sW, self.sb = self.sW[keep], self.sb[keep]

    def columns_of(self, previous):
        """For each unit of ``previous``, the indices of this layer's inputs that read it (along
        axis 1 of W), as a (units, k) array."""
        return self.layer.input_columns(previous.units, self.W.shape[1])

    def reads_nothing_of(self, previous):
        """Units of ``previous`` whose every weight in this layer is 0."""
        columns = self.columns_of(previous)
        W = np.moveaxis(self.W, 1, 0)  # (inputs, outputs, ...)
        return np.array([not np.any(W[cols] != 0) for cols in columns])

    def add_constant_input(self, previous, unit, value):
        """Fold a constant ``value`` put out by ``previous``'s unit ``unit`` into the biases."""
        cols = self.columns_of(previous)[unit]
        W = np.moveaxis(self.W, 1, 0)[cols]  # (k, outputs, ...)
        self.b = self.b + value * W.reshape(len(cols), self.units, -1).sum(axis=(0, 2))

    def drop_inputs_of(self, previous, keep):
        cols = self.columns_of(previous)[keep].reshape(-1)
        self.W = np.take(self.W, cols, axis=1)
        if self.sW is not None:
            self.sW = np.take(self.sW, cols, axis=1)


class _Chain:
    """The stages of a network as compression walks it, layer by layer: each layer kind says
    which of these steps it takes (its ``compression_step``)."""

    def __init__(self, mus, sigmas, fold_gates):
        self.mus, self.sigmas, self.fold_gates = mus, sigmas, fold_gates
        self.stages, self.index = [], 0

    def _param(self, arrays, offset=0):
        return None if arrays is None else arrays[self.index + offset]

    def add_weights(self, layer):
        self.stages.append(_Stage(layer, self.mus[self.index], self.mus[self.index + 1],
                                  self._param(self.sigmas), self._param(self.sigmas, 1),
                                  self.index))
        self.index += 2

    def add_gate(self, layer):
        if not self.stages or self.stages[-1].after:
            raise ValueError("a gate comes right after a layer with weights")
        if self.fold_gates:
            fold_gate(self.stages[-1], self.mus[self.index], self._param(self.sigmas))
        self.stages[-1].gate = self.index
        self.index += 1

    def add_after(self, layer):
        if not self.stages:
            raise ValueError("%s before any layer with weights" % layer)
        self.stages[-1].after.append(layer)


def _stages(network, mus, sigmas, fold_gates=True):
    """The network's layers with weights as ``_Stage``s, each gate folded into the layer before
    it (``fold_gate``) unless ``fold_gates`` is False; ValueError for a layer compression cannot
    take."""
    chain = _Chain(mus, sigmas, fold_gates)
    for layer in network.without_dropout().layers:
        step = getattr(layer, "compression_step", None)
        try:
            if step is None:
                raise ValueError("it has no compression step")
            step(chain)
        except ValueError as exc:
            raise ValueError("compression takes dense, conv, gate, relu, pool, flatten and "
                             "dropout layers after a layer with weights (a gate right after "
                             "one), not %s (%s)" % (layer, exc)) from None
    return chain.stages


def fold_gate(stage, gate, gate_sigma):
    """Fold a gate (one factor per unit, mean ``gate``) into the layer before it: unit u's
    outputs ``(W_u h + b_u) g_u`` are those of weights ``W_u g_u`` and bias ``b_u g_u``, exactly
    for the mean network."""
    per_unit = (-1,) + (1,) * (stage.W.ndim - 1)
    g, W, b = gate.reshape(per_unit), stage.W, stage.b
    stage.W, stage.b = W * g, b * gate
    if stage.sW is not None:
        product_sigma = lambda m, s, gm, gs: np.sqrt(  # noqa: E731
            np.square(m * gs) + np.square(gm * s) + np.square(s * gs))
        gs = gate_sigma.reshape(per_unit)
        stage.sW = product_sigma(W, stage.sW, g, gs)
        stage.sb = product_sigma(b, stage.sb, gate, gate_sigma)


def remove_units(stages):
    """Step 2 in place: remove the hidden units that read nothing or are read by nothing.
    Returns the counts removed per stage."""
    removed = [0] * len(stages)
    changed = True
    while changed:
        changed = False
        for i in range(len(stages) - 1):
            stage, following = stages[i], stages[i + 1]
            constant = stage.incoming_pruned()
            for unit in np.flatnonzero(constant):
                value = stage.constant_output(unit)
                if value:
                    following.add_constant_input(stage, unit, value)
            keep = ~(constant | following.reads_nothing_of(stage))
            if keep.all():
                continue
            silenced = not keep.any()
            if silenced:  # a layer keeps one unit, which then puts out 0
                keep[0] = True
            following.drop_inputs_of(stage, keep)
            stage.keep_units(keep)
            if silenced:
                stage.W[0], stage.b[0] = 0.0, 0.0
            removed[i] += int((~keep).sum())
            changed = not silenced
    return removed


def _described(network, stages):
    """The description of ``network`` with each layer's units as ``stages`` left them (a gate
    is folded into the layer before it)."""
    parts, stage = [], iter(stages)
    for layer in network.without_dropout().layers:
        if hasattr(layer, "described_with"):
            parts.append(layer.described_with(next(stage).units))
        elif hasattr(layer, "constant_through"):
            parts.append(str(layer))
    return ",".join(parts)


def narrowed(network, pruned_mus, sigmas=None):
    """Step 2 on ``network`` whose pruned parameters are 0 in ``pruned_mus`` (NumPy arrays,
    with their ``sigmas`` or None): ``(stages, units before, units removed)``, the stages
    each gate folded in and the units step 2 removes taken out."""
    stages = _stages(network, pruned_mus, sigmas)
    before = [stage.units for stage in stages]
    return stages, before, remove_units(stages)


def units_left(network, pruned_mus):
    """What compression keeps of ``network`` whose pruned parameters are 0 in ``pruned_mus``
    (NumPy arrays, left unchanged): ``(units, multiply_adds)``, the units of each layer with
    weights once step 2 has removed those that read nothing or are read by nothing, and the
    multiply-adds of that narrower network for one input, as ``compress_parameters`` stores
    it."""
    stages = narrowed(network, [np.array(mu) for mu in pruned_mus])[0]
    narrower = parse_network(_described(network, stages), math.prod(network.input_shape),
                             network.num_outputs)
    return [stage.units for stage in stages], narrower.multiply_adds()


def best_gated_units(network, mus, sigmas, counts):
    """For each gate of ``network`` in order, the indices (ascending) of the ``counts`` units
    whose gates have the highest signal-to-noise ratio |mu| / sigma (the lowest log alpha),
    from its parameters' means and sigmas (NumPy arrays)."""
    positions = network.gate_positions()
    if len(positions) != len(counts):
        raise ValueError("%d gates, %d counts of units to keep" % (len(positions), len(counts)))
    kept = []
    for position, count in zip(positions, counts):
        snr = np.abs(mus[position]) / sigmas[position]
        if not 0 < count <= snr.size:
            raise ValueError("a gate of %d units cannot keep %d" % (snr.size, count))
        # stable, so that equal ratios keep the lower index
        kept.append(np.sort(np.argsort(-snr, kind="stable")[:count]))
    return kept


def keep_gated_units(network, mus, kept):
    """``network``'s parameters ``mus`` (NumPy arrays) with each gated layer's units cut to
    those ``kept`` names (one index array per gate, in order): the layer's outputs (weights,
    bias), its gate's factors and the next layer's inputs that read them, as a narrower network
    of the same description holds them; the gates stay gates."""
    stages = _stages(network, mus, None, fold_gates=False)
    out = [np.array(mu) for mu in mus]
    chosen = iter(kept)
    for stage, following in zip(stages, stages[1:] + [None]):
        if stage.gate is None:
            continue
        if following is None:
            raise ValueError("the last layer's gate cannot remove outputs")
        units = next(chosen)
        following.drop_inputs_of(stage, units)
        stage.keep_units(units)
        out[stage.gate] = out[stage.gate][units]
    for stage in stages:
        out[stage.position], out[stage.position + 1] = np.array(stage.W), np.array(stage.b)
    return out


# Quantization and the file's arrays.

def _narrowest_int(values):
    largest = int(np.abs(values).max()) if values.size else 0
    for dtype in (np.int8, np.int16, np.int32):
        if largest <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise ValueError("a quantized value does not fit 32 bits")


def encode_tensor(mu, sigma, precision, sigma_bits):
    """(tensor header, blobs) of one array: its nonzero means as gaps and integers times a
    step of ``precision`` times the median of their ``sigma`` (float32
    where either is 0 or None), and, with ``sigma_bits``, their sigmas' codes."""
    flat = mu.reshape(-1).astype(np.float32)
    positions = np.flatnonzero(flat)
    values = flat[positions]
    indices = encode_varints(gaps_from_positions(positions))
    tensor, blobs = {"kept": int(positions.size), "index_bytes": len(indices)}, [indices]
    kept_sigmas = (sigma.reshape(-1)[positions].astype(np.float64) if sigma is not None
                   else None)
    step = 0.0
    if precision and values.size and kept_sigmas is not None:
        step = float(precision * np.median(kept_sigmas))
    if step > 0:
        q = np.round(values / step)
        largest = float(np.abs(q).max())
        if not largest <= np.iinfo(np.int32).max:
            raise ConfigError("precision", precision, "at least %.3g for these weights (a finer "
                              "step gives integers beyond 32 bits; 0 keeps float32 means)"
                              % (precision * largest / np.iinfo(np.int32).max))
        dtype = _narrowest_int(q)
        blobs.append(q.astype(dtype).tobytes())
    else:
        dtype = np.dtype(np.float32)
        blobs.append(values.tobytes())
    tensor.update(step=step, value_dtype=dtype.name)
    if sigma_bits and kept_sigmas is not None:
        logs = np.log(np.maximum(kept_sigmas, 1e-30))
        low, high = (float(logs.min()), float(logs.max())) if logs.size else (0.0, 0.0)
        levels = (1 << sigma_bits) - 1
        codes = np.round((logs - low) / (high - low) * levels) if high > low else 0 * logs
        tensor.update(sigma_bits=sigma_bits, log_sigma_range=[low, high])
        blobs.append(codes.astype(np.uint8).tobytes())
    return tensor, blobs


def compress_parameters(network, mus, sigmas, ranking_sigmas, proportion, precision=1.0,
                        sigma_bits=0, num_classes=10, keep=None):
    """The compressed model of a network with means ``mus`` and posterior ``sigmas`` (NumPy
    arrays; None for a model without them), pruned at ``proportion`` of all parameters by
    |mu| / ``ranking_sigmas``: ``(CompressedModel, header, blobs, report)``, ``report`` saying
    what each step kept."""
    from ..analysis.snr import keep_masks
    if keep is None:
        keep = keep_masks(mus, ranking_sigmas, proportion)
    stages, before, removed = narrowed(network, [mu * k for mu, k in zip(mus, keep)], sigmas)
    description = _described(network, stages)
    features = math.prod(network.input_shape)
    header = {"format": FORMAT_NAME, "network": description, "classes": num_classes,
              "likelihood": "categorical",
              "input": {"features": features, "pixel_scale": PIXEL_SCALE,
                        "image": list(IMAGE_SHAPE) if features == math.prod(IMAGE_SHAPE)
                        else None,
                        "polarity": "light digits on a dark background, as MNIST's"},
              "tensors": []}
    blobs = []
    for stage in stages:
        for mu, sigma in ((stage.W, stage.sW), (stage.b, stage.sb)):
            tensor, tensor_blobs = encode_tensor(mu, sigma, precision, sigma_bits)
            header["tensors"].append(tensor)
            blobs += tensor_blobs
    model = compressed.decode(compressed.pack(dict(header, unsure_entropy_bits=None), blobs))
    total = sum(mu.size for mu in mus)
    report = {"proportion": proportion, "parameters": total,
              "kept_after_pruning": int(sum(k.sum() for k in keep)),
              "kept_after_structure": int(sum(int(np.count_nonzero(s.W)) + s.b.size
                                              for s in stages)),
              "units_before": before, "units_removed": removed, "network": description,
              "multiply_adds_before": network.multiply_adds(),
              "multiply_adds_after": model.network.multiply_adds(),
              "precision": precision, "sigma_bits": sigma_bits if sigmas is not None else 0}
    return model, header, blobs, report


def calibrate_unsure(model, X, num_samples, seed=0):
    """The predictive entropy (bits) above which ``model_file.UNSURE_SHARE`` of ``X`` lies."""
    return compressed.unsure_entropy(model.predict(X, num_samples, seed))


def error_rate(model, X, labels, num_samples=0, seed=0):
    return float(np.mean(model.predict(X, num_samples, seed).argmax(axis=1) != labels))


def write_model(path, header, blobs):
    """Write the file atomically; returns its size in bytes."""
    from ..outputs import COMPRESSED, write_atomically
    data = compressed.pack(header, blobs)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)
    write_atomically(path, write, COMPRESSED)
    return len(data)


# The run's side (MXNet).

def run_parameters(run, checkpoint_path):
    """``(config, network, mus, sigmas, ranking sigmas, state)`` of a run's parameter file as
    NumPy arrays: ``sigmas`` those it predicts with, None for a model kind without a posterior;
    ``ranking sigmas`` the posterior's (ones where it has none), which rank by |mu| / sigma."""
    config = run.read_classifier_config()
    state = run.load_predictive(config, None, checkpoint_path)
    mus = [m.asnumpy() for m in state["mus"]]
    sigmas = None if state["sigmas"] is None else [s.asnumpy() for s in state["sigmas"]]
    # the posterior's own: a weight the run removed in training (mean and predictive sigma 0)
    # ranks lowest, at |mu| / sigma = 0
    ranking = [s.asnumpy() for s in config.model_kind.ranking_sigmas(
        state["mus"], state["rhos"], state["parametrization"])]
    if config.build_likelihood().head:
        raise CheckpointError("%s: a network with a learned noise head cannot be compressed",
                              run.path)
    return config, config.build_network(), mus, sigmas, ranking, state


def load_compressed(path, ctx=None):
    """A compressed file in MXNet: ``(network, mus, sigmas or None, header)``, the arrays
    NDArrays on ``ctx``, for ``net``, ``evaluate_accuracy`` and ``uncertainty.predict``."""
    import mxnet as mx
    from mxnet import nd
    ctx = ctx or mx.cpu()
    model = compressed.read(path)
    to = lambda arrays: [nd.array(a, ctx=ctx, dtype="float32") for a in arrays]  # noqa: E731
    return (model.network, to(model.mus), None if model.sigmas is None else to(model.sigmas),
            model.header)


# the coarsest quantization step, in median sigmas: a step a thousand times the posterior's
# own uncertainty rounds all but outlying means to 0
MAX_PRECISION = 1000.0


def check_precision(precision, sigma_bits):
    if not (is_real(precision) and 0 <= precision <= MAX_PRECISION):
        raise ConfigError("precision", precision, "a number from 0 (float32 means) to %g "
                          "(median sigmas a quantization step)" % MAX_PRECISION)
    if sigma_bits not in range(0, 9):
        raise ConfigError("sigma_bits", sigma_bits, "an integer in [0, 8] (0: no sigmas)")

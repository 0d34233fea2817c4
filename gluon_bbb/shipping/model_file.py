"""A compressed model, read and run with NumPy alone: the file ``gluon_bbb.commands.compress`` writes,
and the predictor that a program without MXNet uses (``load``, ``CompressedModel.predict``)."""
import json
import lzma
import math
import struct
import zlib

import numpy as np

from ..analysis.metrics import predictive_entropy as entropy_bits, softmax
from .. import jsonfile
from ..errors import MAX_PREDICTIVE_SAMPLES, GluonBBBError, is_real, require_whole
from ..networks.network import parse_network
from ..outputs import COMPRESSED, path_problem

MAGIC = COMPRESSED.magic
VERSION = 1
# raw LZMA2 with a dictionary of 1 MiB: the payloads are far smaller, and a raw stream has no
# container header (an .xz file spends about 60 bytes on one)
FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 1 << 20}]
DECODE_FILTERS = [{"id": lzma.FILTER_LZMA2, "dict_size": 1 << 20}]
FORMAT_NAME = "gluon-bbb compressed model"
VALUE_DTYPES = ("int8", "int16", "int32", "float32")
# what a header is believed for: its JSON at most 1 MiB, its network at most 2^28 weights (1 GiB
# of float32 means; the package's largest network, the 2x1200 MLP, has 2.4 million)
MAX_HEADER_BYTES = 1 << 20
MAX_WEIGHTS = 1 << 28
# the most classes a header may name, and its largest divisor of raw pixel values (MNIST's 126)
MAX_CLASSES, MAX_PIXEL_SCALE = 10000, 1e4
# A prediction whose class has a probability below this is flagged unsure in absolute terms
# (see ``unsure``); files may name another in their header's ``unsure_probability``.
UNSURE_PROBABILITY = 0.5
# the share of validation digits a calibrated entropy threshold flags unsure
UNSURE_SHARE = 0.05


class ModelFileError(GluonBBBError):
    """A file that is not a compressed model of a version this package reads."""


# LEB128 varints, vectorized.

def encode_varints(values):
    """Non-negative integers as LEB128: 7 bits a byte, low bits first, the high bit set on every
    byte but a number's last. Returns bytes."""
    values = np.asarray(values, dtype=np.uint64)
    if values.size == 0:
        return b""
    lengths = np.ones(values.size, dtype=np.int64)
    rest = values >> np.uint64(7)
    while np.any(rest):
        lengths += rest > 0
        rest >>= np.uint64(7)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    for k in range(int(lengths.max())):
        has = lengths > k
        byte = ((values[has] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        byte |= np.where(lengths[has] > k + 1, 0x80, 0).astype(np.uint8)
        out[starts[has] + k] = byte
    return out.tobytes()


def decode_varints(data, count):
    """``count`` integers from LEB128 bytes ``data`` (int64)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw < 0x80)
    if ends.size != count or (count and ends[-1] != raw.size - 1):
        raise ModelFileError("the file's indices do not hold %d varints", count)
    starts = np.concatenate([[0], ends[:-1] + 1])
    values = np.zeros(count, dtype=np.int64)
    for k in range(int((ends - starts).max()) + 1 if count else 0):
        has = starts + k <= ends
        values[has] |= (raw[starts[has] + k].astype(np.int64) & 0x7F) << (7 * k)
    return values


def positions_from_gaps(gaps):
    return np.cumsum(gaps) - 1


def gaps_from_positions(positions):
    return np.diff(np.concatenate([[-1], positions]))


# The operators a network description's layers call, on NumPy arrays.

# the most multiply-adds, as a multiple of the convolution's, ConvolutionMaxPool's product
# may take: (kh + pool - 1) * (kw + pool - 1) / (kh * kw), 1.44 for 5x5 kernels under pool:2
FUSED_MULTIPLY_ADDS = 3.0


class NumPyOperators:
    """The few MXNet operators that ``networks.network.Network`` calls, written in NumPy
    (float32, NCHW), so that the same network description runs without MXNet."""

    @staticmethod
    def reshape(h, shape):
        return h.reshape(shape)

    @staticmethod
    def flatten(h):
        return h.reshape(h.shape[0], -1)

    @staticmethod
    def relu(h):
        return np.maximum(h, 0.0)

    @staticmethod
    def broadcast_mul(a, b):  # a gate's factors (compress scores the unpruned gated network)
        return np.multiply(a, b)

    @staticmethod
    def FullyConnected(h, W, b, num_hidden, flatten=True):
        if flatten:
            h = h.reshape(h.shape[0], -1)
        return h @ W.T + b

    @staticmethod
    def Convolution(h, W, b, num_filter, kernel, stride=(1, 1), pad=(0, 0), dilate=(1, 1)):
        if any(p for p in pad):
            h = np.pad(h, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
        (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilate
        out_h = (h.shape[2] - dh * (kh - 1) - 1) // sh + 1
        out_w = (h.shape[3] - dw * (kw - 1) - 1) // sw + 1
        patches = _patches(h, kernel, (out_h, out_w), stride, dilate)
        out = np.tensordot(W, patches, axes=([1, 2, 3], [1, 2, 3]))  # (filters, n, oh, ow)
        out += b[:, None, None, None]  # in place: the product is a new array
        return out.transpose(1, 0, 2, 3)

    @staticmethod
    def ConvolutionMaxPool(h, W, b, num_filter, kernel, pool, relu=False):
        """``Pooling(Convolution(h, W, b), (pool, pool) windows at stride pool)`` in one product
        (a convolution of stride 1, no padding; ``networks.network.Network`` calls it for a ``conv``
        right before a ``pool``): the pool x pool outputs under a window all come from one patch
        of (kh + pool - 1) x (kw + pool - 1) inputs, so the patches are taken at stride pool
        and multiplied by pool * pool copies of W, each shifted to its output's place in the
        patch; the window's largest is then the largest of the pool * pool products."""
        n, channels, height, width = h.shape
        kh, kw = kernel
        rows, cols = (height - kh + 1) // pool, (width - kw + 1) // pool
        extent = (kh + pool - 1, kw + pool - 1)
        if extent[0] * extent[1] > FUSED_MULTIPLY_ADDS * kh * kw:
            # a small kernel under a wide window: the shifted copies' zeros would cost more
            # than the patches save
            out = NumPyOperators.Pooling(
                NumPyOperators.Convolution(h, W, b, num_filter, kernel), (pool, pool),
                (pool, pool))
            return np.maximum(out, 0.0) if relu else out
        shifted = np.zeros((pool, pool, num_filter, channels) + extent, dtype=np.float32)
        for i in range(pool):
            for j in range(pool):
                shifted[i, j, :, :, i:i + kh, j:j + kw] = W
        patches = _patches(h, extent, (rows, cols), (pool, pool))
        # (pool * pool, filters, n, rows, cols): each offset's convolution outputs
        outputs = np.tensordot(shifted.reshape((-1, channels) + extent), patches,
                               axes=([1, 2, 3], [1, 2, 3])).reshape(
                                   (pool * pool, num_filter, n, rows, cols))
        out = np.maximum(outputs[0], outputs[1]) if pool > 1 else outputs[0]
        for offset in range(2, pool * pool):
            np.maximum(out, outputs[offset], out=out)
        out += b[:, None, None, None]  # the bias is the same under the window: added once
        if relu:
            np.maximum(out, 0.0, out=out)
        return out.transpose(1, 0, 2, 3)

    @staticmethod
    def Pooling(h, kernel, stride, pool_type="max"):
        if pool_type != "max" or tuple(kernel) != tuple(stride):
            raise ValueError("the NumPy operators pool with non-overlapping max windows only")
        k0, k1 = kernel
        height, width = h.shape[2] // k0 * k0, h.shape[3] // k1 * k1
        # the maximum of strided views, first over a window's rows, then over its columns
        rows = h[:, :, 0:height:k0, :width]
        for i in range(1, k0):
            rows = np.maximum(rows, h[:, :, i:height:k0, :width])
        out = rows[:, :, :, 0::k1]
        for j in range(1, k1):
            out = np.maximum(out, rows[:, :, :, j::k1])
        return out


def _patches(h, extent, sides, stride, dilate=(1, 1)):
    """The patches of NCHW ``h`` as a view (n, channels, extent rows, extent columns, sides):
    the values under each of sides[0] x sides[1] positions, ``stride`` apart, of a window of
    ``extent`` values ``dilate`` apart."""
    s = h.strides
    return np.lib.stride_tricks.as_strided(
        h, h.shape[:2] + tuple(extent) + tuple(sides),
        (s[0], s[1], s[2] * dilate[0], s[3] * dilate[1], s[2] * stride[0], s[3] * stride[1]),
        writeable=False)


class SeparateOperators(NumPyOperators):
    """NumPy's operators with every convolution and max pooling computed apart (no
    ``ConvolutionMaxPool``): the plain reference the one product is measured against."""
    ConvolutionMaxPool = None


# The model.

class CompressedModel:
    """A compressed model: ``network`` (a ``networks.network.Network``), ``mus`` and, where the file
    keeps them, ``sigmas`` (dense float32 arrays, pruned entries 0), the positions of the kept
    entries (``kept``) and the file's ``header``."""

    def __init__(self, header, network, mus, sigmas, kept):
        self.header, self.network, self.mus, self.sigmas, self.kept = (
            header, network, mus, sigmas, kept)

    @property
    def num_classes(self):
        return self.header["classes"]

    @property
    def unsure_entropy(self):
        """The predictive entropy (bits) above which a prediction is flagged unsure."""
        return self.header["unsure_entropy_bits"]

    @property
    def unsure_probability(self):
        """The probability of the predicted class below which a prediction is flagged unsure,
        whatever its entropy (``UNSURE_PROBABILITY`` unless the file says otherwise)."""
        return self.header.get("unsure_probability", UNSURE_PROBABILITY)

    def unsure(self, probs):
        """Which predictive distributions (N, classes) are flagged unsure (N,): ``unsure(probs,
        self.unsure_entropy, self.unsure_probability)``."""
        return unsure(_finite_matrix("probs", probs, self.num_classes), self.unsure_entropy,
                      self.unsure_probability)

    def inputs(self, pixels):
        """Raw pixel values 0 to 255 of N images (N, H, W) or (N, H * W), or of one (H, W) or
        (H * W,), as the network takes them (N, H * W); ValueError for another shape or values
        that are not such pixels (``pixel_problem``)."""
        pixels = np.asarray(pixels)
        features = self.header["input"]["features"]
        side = int(round(math.sqrt(features)))
        one = [(features,)] + ([(side, side)] if side * side == features else [])
        if pixels.shape in one:
            pixels = pixels.reshape(1, features)
        elif not (pixels.ndim in (2, 3) and math.prod(pixels.shape[1:]) == features
                  and pixels.shape[1:] in [(features,)] + one[1:]):
            raise ValueError("pixels of shape %s: give N images (N, %s) or (N, %d), or one %s"
                             % (pixels.shape, "%d, %d" % (side, side), features,
                                " or ".join(str(shape) for shape in reversed(one))))
        problem = pixel_problem(pixels)
        if problem:
            raise ValueError("pixel values: " + problem)
        return (pixels.reshape(pixels.shape[0], -1).astype(np.float32)
                / np.float32(self.header["input"]["pixel_scale"]))

    def logits(self, X, params=None, operators=NumPyOperators):
        """The network's outputs for scaled inputs X (N, features), with the mean weights."""
        return self.network(X, self.mus if params is None else params, F=operators)

    def predict(self, X, num_samples=0, seed=0, batch_size=100, operators=NumPyOperators):
        """The predictive probabilities (N, classes) for scaled inputs ``X``: softmax of the
        mean network (``num_samples=0``), or the mean of ``num_samples`` draws of the kept
        weights from N(mu, sigma^2) (the file must keep sigmas), computed with ``operators``
        (``SeparateOperators``: each convolution and max pooling apart, to compare)."""
        num_samples = require_whole("num_samples", num_samples, 0, MAX_PREDICTIVE_SAMPLES)
        batch_size, seed = require_whole("batch_size", batch_size, 1), require_whole("seed", seed)
        if num_samples and self.sigmas is None:
            raise ModelFileError("this file keeps no sigmas: it predicts with its mean weights "
                                 "only (num_samples 0)")
        X = _finite_matrix("X", X, math.prod(self.network.input_shape))
        if num_samples == 0:
            return np.concatenate([softmax(self.logits(X[i:i + batch_size], None, operators))
                                   for i in range(0, X.shape[0], batch_size)])
        rng = np.random.default_rng(seed)
        total = np.zeros((X.shape[0], self.num_classes), dtype=np.float64)
        for _ in range(num_samples):
            weights = []
            for mu, sigma, kept in zip(self.mus, self.sigmas, self.kept):
                w = mu.copy().reshape(-1)
                w[kept] += sigma.reshape(-1)[kept] * rng.standard_normal(kept.size,
                                                                        dtype=np.float32)
                weights.append(w.reshape(mu.shape))
            for i in range(0, X.shape[0], batch_size):
                total[i:i + batch_size] += softmax(self.logits(X[i:i + batch_size], weights,
                                                               operators))
        return (total / num_samples).astype(np.float32)


def pixel_problem(pixels):
    """What keeps ``pixels`` from being raw pixel values 0 to 255 as MNIST's, in words (None
    where nothing does): NaN or infinity, values outside 0-255, or values within 0-1 that are
    not all 0, which are images scaled to [0, 1] (floats, or a binary image of 0s and 1s):
    every one would be read as nearly black."""
    pixels = np.asarray(pixels)
    if not np.issubdtype(pixels.dtype, np.number) or np.issubdtype(pixels.dtype,
                                                                   np.complexfloating):
        return "they hold %s, not numbers" % pixels.dtype
    values = pixels.astype(np.float64)
    if not np.isfinite(values).all():
        return "%d of them are NaN or infinite" % int(np.sum(~np.isfinite(values)))
    if values.size == 0:
        return None
    low, high = values.min(), values.max()
    if low < 0 or high > 255:
        return "they must lie in [0, 255] (MNIST's raw values), these run from %g to %g" % (
            low, high)
    if 0 < high <= 1:
        return ("they run from %g to %g, as images scaled to [0, 1] do; the model takes MNIST's "
                "raw values 0 to 255 (multiply the array by 255)" % (low, high))
    return None


def unsure(probs, entropy_bits_above, probability_below=UNSURE_PROBABILITY):
    """Which predictive distributions (N, classes) are unsure (N,): those whose entropy passes
    the model's calibrated threshold (relative: the entropy that 5% of its validation digits
    exceed; None for none), and those whose predicted class has a probability below
    ``probability_below`` (absolute: a model that is poor everywhere, and so calibrated to its
    own poor entropies, still says so)."""
    probs = _finite_matrix("probs", probs)
    if np.any(probs < 0) or np.any(probs > 1):
        raise ValueError("probs must be probabilities, in [0, 1]")
    flagged = probs.max(axis=1) < probability_below
    if entropy_bits_above is not None:
        flagged |= entropy_bits(probs) > entropy_bits_above
    return flagged


def _finite_matrix(name, values, columns=None):
    """``values`` as a float32 array (N, columns); ValueError for another shape, or values
    that are not finite numbers."""
    array = np.asarray(values)
    if array.ndim != 2 or not array.shape[0] or (columns is not None
                                                 and array.shape[1] != columns):
        raise ValueError("%s must be an array (N, %s) of at least one row, got shape %s" % (
            name, columns if columns is not None else "classes", array.shape))
    if not np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype,
                                                                  np.complexfloating):
        raise ValueError("%s must hold numbers, not %s" % (name, array.dtype))
    array = array.astype(np.float32)
    bad = int(np.sum(~np.isfinite(array)))
    if bad:
        raise ValueError("%s holds %d NaN or infinite values; nothing is computed" % (name, bad))
    return array


def unsure_entropy(probs):
    """The predictive entropy (bits) that ``UNSURE_SHARE`` of the distributions ``probs``
    exceed: a model's calibrated threshold."""
    return float(np.quantile(entropy_bits(probs), 1.0 - UNSURE_SHARE))


# Reading and writing the file.

def pack(header, blobs):
    """The file's bytes for ``header`` (a dict; each tensor's blobs named in it) and ``blobs``
    (bytes, in order)."""
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    payload = lzma.compress(struct.pack("<I", len(text)) + text + b"".join(blobs),
                            format=lzma.FORMAT_RAW, filters=FILTERS)
    return MAGIC + struct.pack("<HI", VERSION, zlib.crc32(payload)) + payload


def unpack(data, source="the file", body_limit=None):
    """``(header, body)`` of a file's bytes; ModelFileError saying what is wrong.
    ``body_limit(header)``: the most bytes the header's arrays take (ValueError for a header
    that is not as written); the body is decompressed no further than that, so a small file
    that expands to gigabytes is refused without them."""
    if len(data) < len(MAGIC) + 6 or not data.startswith(MAGIC):
        raise ModelFileError("%s is not a compressed gluon-bbb model (it does not start with "
                             "%r)", source, MAGIC.decode())
    version, crc = struct.unpack("<HI", data[len(MAGIC):len(MAGIC) + 6])
    if version != VERSION:
        raise ModelFileError("%s is a compressed model of format version %d; this gluon-bbb "
                             "reads version %d", source, version, VERSION)
    payload = data[len(MAGIC) + 6:]
    if zlib.crc32(payload) != crc:
        raise ModelFileError("%s is damaged: its checksum does not match its contents", source)
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=DECODE_FILTERS)
    try:
        raw = decompressor.decompress(payload, max_length=4 + MAX_HEADER_BYTES)
        (length,) = struct.unpack("<I", raw[:4])
        if length > MAX_HEADER_BYTES:
            raise ValueError("its header is said to take %d bytes" % length)
        header = jsonfile.parse(raw[4:4 + length], "its header", _header_error)
        body = raw[4 + length:]
        limit = None if body_limit is None else body_limit(header)
        if not decompressor.eof and (limit is None or len(body) <= limit):
            body += decompressor.decompress(b"", max_length=-1 if limit is None
                                            else limit - len(body) + 1)
        if limit is not None and len(body) > limit:
            raise ValueError("it holds more than the %d bytes its header's arrays take" % limit)
    except (lzma.LZMAError, struct.error, ValueError) as exc:
        raise ModelFileError("%s cannot be read: %s", source, exc) from None
    return header, body


def read(path):
    """The ``CompressedModel`` in the file ``path``."""
    problem = path_problem(path)
    if problem:
        raise ModelFileError("%s is %s, not a compressed model's file", path, problem)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ModelFileError("cannot read %s: %s", path, exc.strerror or exc) from None
    return decode(data, path)


load = read


def decode(data, source="the file"):
    """The ``CompressedModel`` of a file's bytes; its header is believed only as far as it is
    checked: the network it names at most ``MAX_WEIGHTS`` weights, its arrays no more bytes
    than their counts take."""
    found = {}

    def body_limit(header):
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise _HeaderProblem(None)
        try:
            found["network"], found["shapes"] = _network_of(header)
            return _body_bytes(header, found["shapes"])
        except (KeyError, TypeError, ValueError, GluonBBBError) as exc:
            raise _HeaderProblem(exc.describe() if isinstance(exc, GluonBBBError) else exc)
    try:
        header, body = unpack(data, source, body_limit)
    except _HeaderProblem as problem:
        if problem.args[0] is None:
            raise ModelFileError("%s holds no compressed model", source) from None
        raise ModelFileError("%s is not a model this gluon-bbb can read: %s", source,
                             problem.args[0]) from None
    network, shapes, tensors = found["network"], found["shapes"], header["tensors"]
    try:
        mus, sigmas, kept, offset = [], [], [], 0
        for shape, tensor in zip(shapes, tensors):
            mu, sigma, positions, offset = _decode_tensor(tuple(shape), tensor, body, offset)
            mus.append(mu)
            sigmas.append(sigma)
            kept.append(positions)
    except (KeyError, TypeError, ValueError, GluonBBBError) as exc:
        raise ModelFileError("%s is not a model this gluon-bbb can read: %s", source,
                             exc.describe() if isinstance(exc, GluonBBBError) else exc) from None
    for i, (mu, sigma) in enumerate(zip(mus, sigmas)):
        for name, array in (("means", mu), ("sigmas", sigma)):
            if array is not None and not np.isfinite(array).all():
                raise ModelFileError("%s holds non-finite %s in array %d; nothing is computed "
                                     "on them", source, name, i)
    return CompressedModel(header, network, mus,
                           sigmas if all(s is not None for s in sigmas) else None, kept)


class _HeaderProblem(Exception):
    """What ``decode``'s check finds wrong in a header (None: not a model's header at all)."""


def _network_of(header):
    """The network a header that passed its checksum names, and its parameter shapes;
    ValueError where the header is not as this package writes it."""
    _check_header(header)
    network = parse_network(header["network"], header["input"]["features"], header["classes"])
    shapes = network.param_shapes()
    if len(header["tensors"]) != len(shapes):
        raise ValueError("%d arrays for a network of %d" % (len(header["tensors"]), len(shapes)))
    weights = sum(math.prod(shape) for shape in shapes)
    if weights > MAX_WEIGHTS:
        raise ValueError("its header names a network of %d weights, more than this reader "
                         "takes (%d)" % (weights, MAX_WEIGHTS))
    return network, shapes


def _body_bytes(header, shapes):
    """The bytes a header's arrays take after it, from their counts."""
    total = 0
    for shape, tensor in zip(shapes, header["tensors"]):
        count, index_bytes = tensor["kept"], tensor["index_bytes"]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                   for n in (count, index_bytes)) or count > math.prod(shape):
            raise ValueError("a tensor's 'kept' or 'index_bytes' is not as written")
        if tensor["value_dtype"] not in VALUE_DTYPES:
            raise ValueError("a tensor's 'kept', 'step' or 'value_dtype' is not as written")
        itemsize = np.dtype(tensor["value_dtype"]).itemsize
        total += index_bytes + count * itemsize + (count if "sigma_bits" in tensor else 0)
    return total


def _check_header(header):
    """ValueError saying which entry of a header that passed its checksum is not as this
    package writes it (``HEADER_SCHEMA``, each field by its kind's rule)."""
    if header.get("likelihood", "categorical") != "categorical":
        raise ValueError("its header's 'likelihood' is %r: this reader predicts classes (the "
                         "categorical likelihood) only" % (header["likelihood"],))
    if "unsure_entropy_bits" not in header:
        raise ValueError("its header's 'unsure_entropy_bits' is missing")
    jsonfile.check(header, HEADER_SCHEMA, "its header", _header_error)
    if header["unsure_entropy_bits"] is not None and not (
            0 <= header["unsure_entropy_bits"] <= math.log2(header["classes"])):
        raise ValueError("its header's 'unsure_entropy_bits' is not an entropy of %d classes "
                         "(from 0 to %.3g bits)" % (header["classes"],
                                                    math.log2(header["classes"])))


def _header_error(template, *values):
    return ValueError(template % values)


# what a file's header holds, each field by its kind's rule: a header is believed only as far
# as it is checked (a pixel scale of 1e300 would make every image black)
_TENSOR = jsonfile.record(dict(
    kept=jsonfile.whole(), index_bytes=jsonfile.whole(),
    step=jsonfile.number(0.0), value_dtype=jsonfile.one_of(*VALUE_DTYPES),
    sigma_bits=jsonfile.optional(jsonfile.whole(0, 8)),
    log_sigma_range=jsonfile.optional(jsonfile.list_of(jsonfile.number(-200.0, 200.0), 2, 2))))
HEADER_SCHEMA = dict(
    network=jsonfile.text, classes=jsonfile.whole(2, MAX_CLASSES),
    input=jsonfile.record(dict(pixel_scale=jsonfile.number(1.0, MAX_PIXEL_SCALE),
                               features=jsonfile.whole(1, MAX_WEIGHTS))),
    tensors=jsonfile.list_of(_TENSOR, 1),
    unsure_entropy_bits=lambda value, name: None if value is None else jsonfile.number(0.0)(
        value, name),
    unsure_probability=jsonfile.optional(jsonfile.number(0.0, 1.0 - 2.0 ** -24)),
    predictive_samples=jsonfile.optional(jsonfile.whole(0, MAX_PREDICTIVE_SAMPLES)))


def _take(body, offset, size):
    if offset + size > len(body):
        raise ValueError("the file ends %d bytes early" % (offset + size - len(body)))
    return body[offset:offset + size], offset + size


def _decode_tensor(shape, tensor, body, offset):
    size = math.prod(shape)
    count = tensor["kept"]
    if not isinstance(count, int) or not 0 <= count <= size or not is_real(tensor["step"]) \
            or tensor["value_dtype"] not in VALUE_DTYPES:
        raise ValueError("a tensor's 'kept', 'step' or 'value_dtype' is not as written")
    data, offset = _take(body, offset, tensor["index_bytes"])
    positions = positions_from_gaps(decode_varints(data, count))
    if count != positions.size or (count and (positions[0] < 0 or positions[-1] >= size)):
        raise ValueError("kept positions outside an array of %d entries" % size)
    dtype = np.dtype(tensor["value_dtype"])
    data, offset = _take(body, offset, count * dtype.itemsize)
    values = np.frombuffer(data, dtype=dtype).astype(np.float32)
    if tensor["step"]:
        values = values * np.float32(tensor["step"])
    mu = np.zeros(size, dtype=np.float32)
    mu[positions] = values
    sigma = None
    if "sigma_bits" in tensor:
        data, offset = _take(body, offset, count)
        codes = np.frombuffer(data, dtype=np.uint8).astype(np.float32)
        low, high = tensor["log_sigma_range"]
        levels = (1 << tensor["sigma_bits"]) - 1
        sigma = np.zeros(size, dtype=np.float32)
        sigma[positions] = np.exp(low + codes * np.float32((high - low) / levels if levels
                                                           else 0.0))
        sigma = sigma.reshape(shape)
    return mu.reshape(shape), sigma, positions, offset

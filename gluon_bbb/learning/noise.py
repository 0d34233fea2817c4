"""Standard-normal noise, seeded per run: where the training step and the predictive draw eps."""
import mxnet as mx
import numpy as np
from mxnet import nd

from ..native import library as native

CHUNK = 8192              # entries per chunk of draws; must match _fused.c
BLOCKS_PER_CHUNK = 1024   # Philox blocks (4 words) reserved per chunk


def philox_key(seed):
    """The (2,) uint64 Philox key for ``seed`` (an int, a list of ints, or None for fresh
    entropy), derived with ``np.random.SeedSequence``."""
    return np.random.SeedSequence(seed).generate_state(2, dtype=np.uint64)


def philox_normals_reference(size, key, stream):
    """(size,) float32 standard normals of ``stream``, written in NumPy: the definition the
    C kernels follow (and the draws where they are not built)."""
    out = np.empty(size, dtype=np.float32)
    scale = np.float32(2.0 ** -24)
    for lo in range(0, size, CHUNK):
        length = min(CHUNK, size - lo)
        half = (length + 1) // 2
        words = np.random.Philox(key=key, counter=[lo // CHUNK * BLOCKS_PER_CHUNK, stream, 0, 0]
                                 ).random_raw(half)
        uniforms = np.empty(2 * half, dtype=np.float32)
        uniforms[0::2] = ((words >> np.uint64(40)).astype(np.float32) + 0.5) * scale
        uniforms[1::2] = (((words >> np.uint64(8)) & np.uint64(0xFFFFFF)).astype(np.float32)
                          + 0.5) * scale
        radius = np.sqrt(np.float32(-2.0) * np.log(uniforms[:half]))
        angle = np.float32(2 * np.pi) * uniforms[half:]
        out[lo:lo + half] = radius * np.cos(angle)
        out[lo + half:lo + length] = (radius * np.sin(angle))[:length - half]
    return out


class PhiloxNoise:
    """Philox streams under one seed's key, drawn on the host and placed on ``ctx``."""

    def __init__(self, ctx, seed=None):
        self.ctx, self.key, self.stream = ctx, philox_key(seed), 0

    def next_stream(self):
        """The number of the next unused stream, marked used (the native kernels draw it)."""
        self.stream += 1
        return self.stream - 1

    def normal(self, shape):
        """Standard normals of ``shape`` from the next stream, a float32 NDArray on ``ctx``."""
        size, stream = int(np.prod(shape)), self.next_stream()
        if native.available() and self.ctx.device_type == "cpu":
            # drawn where they are used, without a host copy
            out = nd.empty(shape, ctx=self.ctx, dtype="float32")
            native.normals_into(out, self.key, stream)
            return out
        if native.available():
            draws = native.normals(size, self.key, stream)
        else:
            draws = philox_normals_reference(size, self.key, stream)
        return nd.array(draws.reshape(shape), ctx=self.ctx, dtype="float32")


class DeviceNoise:
    """MXNet's sampler on ``ctx``, its generator seeded from ``seed`` when made."""

    def __init__(self, ctx, seed=None):
        self.ctx = ctx
        seed_generator(ctx, seed)

    def normal(self, shape):
        """Standard normals of ``shape``, drawn on ``ctx``."""
        return nd.random.normal(shape=shape, ctx=self.ctx, dtype="float32")


def seed_generator(ctx, seed):
    """Seed MXNet's generator on ``ctx`` (the device draws and the dropout masks) from ``seed``
    (an int or a list of ints)."""
    mx.random.seed(int(np.random.SeedSequence(seed).generate_state(1)[0] % 2 ** 31), ctx=ctx)


NOISE_SOURCES = {"philox": PhiloxNoise, "device": DeviceNoise}


def noise_for(ctx, seed=None, kind=None):
    """The noise source for ``ctx``: ``philox`` on a CPU, ``device`` elsewhere, unless ``kind``
    names one."""
    kind = kind or ("philox" if ctx.device_type == "cpu" else "device")
    return NOISE_SOURCES[kind](ctx, seed)

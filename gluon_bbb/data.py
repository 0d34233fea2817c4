"""MNIST from the four standard IDX files, checked, as whole NumPy arrays."""
import contextlib
import gzip
import hashlib
import io
import math
import os
import struct
import zlib
from collections import namedtuple

import numpy as np

from .errors import DataError, DataNotFound
from .outputs import path_problem

PIXEL_SCALE = 126.0
IMAGE_SHAPE = (28, 28)
# the four files of an MNIST-format dataset: MNIST's 60,000 and 10,000 images, or as many as
# another dataset of 28x28 images holds (Fashion-MNIST's, EMNIST's digits)
IDX_FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
             "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
DEFAULT_DATA_DIR = os.path.join("~", ".mxnet", "datasets", "mnist")
_IDX_MAGIC = {1: 0x00000801, 3: 0x00000803}

MNIST = namedtuple("MNIST", "train_images train_labels test_images test_labels directory "
                   "fingerprint", defaults=(None, None))
MNIST.__doc__ = """Images (N, 784) float32 in [0, 255/126]; labels (N,) int32 in 0..9; the
directory they were read from and the fingerprint of the four files' contents (``load_mnist``;
None for arrays made otherwise)."""


def read_idx(path, ndim):
    """Read an IDX file of unsigned bytes (gzipped if the name ends in .gz)."""
    problem = path_problem(path)
    if problem:
        raise DataError("%s is %s, not an IDX file", path, problem)
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if path.endswith(".gz"):
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError("%s: cannot read (%s)", path, exc) from None
    header_size = 4 + 4 * ndim
    if len(raw) < 4:
        raise DataError("%s: %d bytes is shorter than an IDX file's magic number", path,
                        len(raw))
    magic = struct.unpack(">I", raw[:4])[0]
    if magic != _IDX_MAGIC[ndim]:
        raise DataError("%s: bad magic number 0x%08x, expected 0x%08x (not an IDX file of "
                        "%d-dimensional unsigned bytes)", path, magic, _IDX_MAGIC[ndim], ndim)
    if len(raw) < header_size:
        raise DataError("%s: %d bytes is shorter than the %d of its IDX header", path,
                        len(raw), header_size)
    dims = struct.unpack(">%dI" % ndim, raw[4:header_size])
    expected = math.prod(dims)  # Python's integers: no product of the dimensions overflows
    found = len(raw) - header_size
    if math.prod(d for d in dims if d) > np.iinfo(np.intp).max:  # beside a 0: no data
        raise DataError("%s: header declares %s, a shape no array holds", path,
                        "x".join(map(str, dims)))
    if found != expected:
        what = "truncated" if found < expected else "has trailing bytes"
        raise DataError("%s: %s: header declares %s = %d data bytes, file holds %d",
                        path, what, "x".join(map(str, dims)), expected, found)
    return np.frombuffer(raw, dtype=np.uint8, offset=header_size).reshape(dims)


def find_idx_file(directory, stem):
    """Path of ``stem`` or ``stem.gz`` in ``directory``, or None; DataError where the name is
    taken by something that is not a file (a FIFO would never be read to its end)."""
    for candidate in (stem, stem + ".gz"):
        path = os.path.join(directory, candidate)
        problem = path_problem(path)
        if problem:
            raise DataError("%s is %s, not an IDX file", path, problem)
        if os.path.isfile(path):
            return path
    return None


def idx_paths(directory):
    """The paths of the MNIST files present in ``directory``."""
    paths = [find_idx_file(directory, stem) for stem in IDX_FILES.values()]
    return [path for path in paths if path]


def _has_all_files(directory):
    return all(find_idx_file(directory, stem) for stem in IDX_FILES.values())


def resolve_data_dir(data_dir=None, download=True):
    """The directory holding all four MNIST files."""
    if data_dir is not None:
        searched = [os.path.expanduser(data_dir)]
        problem = path_problem(searched[0], "directory")
        if problem:
            raise DataError("{data_dir} %s is %s, not a directory of MNIST files", data_dir,
                            problem)
    else:
        env_dir = os.environ.get("GLUON_BBB_DATA")
        searched = ([os.path.expanduser(env_dir)] if env_dir else []) + \
            [os.path.expanduser(DEFAULT_DATA_DIR)]
    for directory in searched:
        if _has_all_files(directory):
            return directory
    if data_dir is None and download:
        default_dir = searched[-1]
        problem = _download_with_gluon(default_dir)
        if problem is None and _has_all_files(default_dir):
            return default_dir
    else:
        problem = "a directory named explicitly is not downloaded into"
    stems = list(IDX_FILES.values())
    partly = [d for d in searched if os.path.isdir(d) and idx_paths(d)]
    if partly:  # a directory of some of the files: which it lacks
        problem = "%s lacks %s" % (partly[0], ", ".join(
            stem for stem in stems if not find_idx_file(partly[0], stem)))
    raise DataNotFound("MNIST not found in %s (%s); name a directory of its four IDX files "
                       "(%s[.gz] and the others) with {data_dir} or $GLUON_BBB_DATA",
                       " or ".join(searched), problem, stems[0])


# What the download's exception says, and what it means for the user (the exception's own
# text is a long urllib3 message naming the host, the URL and the retries).
_DOWNLOAD_FAILURES = (
    (("NameResolutionError", "Failed to resolve", "Name or service not known",
      "Temporary failure in name resolution"), "no network"),
    (("ConnectTimeout", "timed out", "Connection refused", "Network is unreachable",
      "ConnectionError"), "the download host cannot be reached"),
)


def _download_with_gluon(root):
    """Let MXNet download MNIST into ``root``; returns None or a one-line reason it failed."""
    import mxnet as mx
    try:
        # gluon prints every retry; keep the console to our own one-line error
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            for train in (True, False):
                mx.gluon.data.vision.MNIST(root=root, train=train)
    except Exception as exc:  # any network or file error: report it, do not crash
        text = "%s: %s" % (type(exc).__name__, exc)
        cause = next((meaning for markers, meaning in _DOWNLOAD_FAILURES
                      if any(marker in text for marker in markers)), None)
        if cause is None:
            lines = text.strip().splitlines()
            cause = lines[0][:160]
        return "the download failed: %s" % cause
    return None


def load_mnist(data_dir=None, download=True):
    """Load and check an MNIST-format dataset (MNIST's, or another's of 28x28 images and labels
    0-9: each split's images and labels as many); returns ``MNIST(train_images, train_labels,
    test_images, test_labels, directory, fingerprint)``."""
    directory = resolve_data_dir(data_dir, download)
    arrays, counts = {}, {}
    # the four files' contents (gzipped or not), which a run records, so that the commands
    # that read it can tell other files of the same shapes (Fashion-MNIST's, say) from its own
    contents = hashlib.sha256()
    for key, stem in IDX_FILES.items():
        path = find_idx_file(directory, stem)
        is_images = key.endswith("images")
        array = read_idx(path, ndim=3 if is_images else 1)
        contents.update(np.array(array.shape, dtype=">u4").tobytes() + array.tobytes())
        split = key.split("_")[0]
        if array.shape[0] == 0:
            raise DataError("%s: holds no %s", path, "images" if is_images else "labels")
        if counts.setdefault(split, (array.shape[0], path))[0] != array.shape[0]:
            raise DataError("%s: holds %d labels, %s %d images: one label each", path,
                            array.shape[0], counts[split][1], counts[split][0])
        if is_images:
            if array.shape[1:] != IMAGE_SHAPE:
                raise DataError("%s: images are %s, expected 28x28", path, array.shape[1:])
            array = array.reshape(-1, 784).astype(np.float32) / np.float32(PIXEL_SCALE)
        else:
            if array.max() > 9:
                raise DataError("%s: label %d outside 0..9", path, array.max())
            array = array.astype(np.int32)
        arrays[key] = array
    return MNIST(directory=os.path.abspath(directory), fingerprint=contents.hexdigest(), **arrays)

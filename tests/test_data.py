import gzip
import hashlib
import math
import os
import struct

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from gluon_bbb import DataError, load_mnist, read_idx, resolve_data_dir
from gluon_bbb.data import IDX_FILES, find_idx_file

from commands import mnist_copy


def idx_bytes(array):
    header = struct.pack(">I", 0x800 + array.ndim) + struct.pack(">%dI" % array.ndim, *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write(path, payload):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(payload)
    return str(path)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_idx_images_and_labels(tmp_path, suffix):
    images = np.arange(3 * 28 * 28).reshape(3, 28, 28) % 256
    labels = np.array([7, 0, 9])
    got_images = read_idx(write(str(tmp_path / ("imgs" + suffix)), idx_bytes(images)), ndim=3)
    got_labels = read_idx(write(str(tmp_path / ("lbls" + suffix)), idx_bytes(labels)), ndim=1)
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)


def test_truncated_file_is_named(tmp_path):
    payload = idx_bytes(np.zeros((4, 28, 28)))[:-10]
    path = write(str(tmp_path / "train-images-idx3-ubyte.gz"), payload)
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz: truncated.*3136.*3126"):
        read_idx(path, ndim=3)


def test_bad_magic_is_named(tmp_path):
    path = write(str(tmp_path / "labels"), idx_bytes(np.zeros((2, 2))))
    with pytest.raises(DataError, match="labels: bad magic number 0x00000802"):
        read_idx(path, ndim=1)


def test_corrupt_gzip_is_named(tmp_path):
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00garbage that is not deflate data")
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz: cannot read"):
        read_idx(str(path), ndim=1)


def test_short_header_is_named(tmp_path):
    path = write(str(tmp_path / "tiny"), b"\x00\x00")
    with pytest.raises(DataError, match="2 bytes is shorter than an IDX file's magic number"):
        read_idx(path, ndim=3)
    # a valid label file of 13 bytes is a label file, not a short image file
    path = write(str(tmp_path / "labels"), idx_bytes(np.arange(5)))
    np.testing.assert_array_equal(read_idx(path, ndim=1), np.arange(5))
    with pytest.raises(DataError, match="bad magic number 0x00000801, expected 0x00000803"):
        read_idx(path, ndim=3)
    path = write(str(tmp_path / "images"), struct.pack(">II", 0x803, 1))
    with pytest.raises(DataError, match="8 bytes is shorter than the 16 of its IDX header"):
        read_idx(path, ndim=3)


@given(st.lists(st.integers(0, 2 ** 32 - 1), min_size=3, max_size=3), st.integers(0, 3000))
@example([0, 3_036_988_439, 3_037_012_561], 0)  # no array holds that shape, empty or not
def test_an_idx_header_is_held_to_the_bytes_the_file_holds(tmp_path_factory, dims, size):
    """Any declared shape against any payload: read where they agree, else truncated or
    trailing bytes with both counts as whole numbers (the product of the dimensions never
    overflows)."""
    path = write(str(tmp_path_factory.mktemp("idx") / "x"),
                 struct.pack(">4I", 0x803, *dims) + bytes(size))
    declared, held = dims[0] * dims[1] * dims[2], math.prod(d for d in dims if d) < 2 ** 63
    if declared == size and held:
        assert read_idx(path, ndim=3).shape == tuple(dims)
        return
    with pytest.raises(DataError) as info:
        read_idx(path, ndim=3)
    if not held:
        assert str(info.value).endswith("declares %s, a shape no array holds" % "x".join(
            map(str, dims)))
        return
    assert str(info.value).endswith(": %s: header declares %s = %d data bytes, file holds %d" % (
        "truncated" if size < declared else "has trailing bytes", "x".join(map(str, dims)),
        declared, size))


def test_explicit_directory_without_files_says_what_is_expected(tmp_path):
    with pytest.raises(DataError) as info:
        resolve_data_dir(str(tmp_path / "nowhere"))
    message = str(info.value)
    assert "its four IDX files (train-images-idx3-ubyte[.gz] and the others)" in message
    assert str(tmp_path / "nowhere") in message and "\n" not in message
    # a directory of some of them: the ones it lacks, by name
    (tmp_path / "some").mkdir()
    for stem in ("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (tmp_path / "some" / stem).write_bytes(b"")
    with pytest.raises(DataError) as info:
        resolve_data_dir(str(tmp_path / "some"))
    assert "some lacks train-labels-idx1-ubyte, t10k-images-idx3-ubyte" in str(info.value)


def test_a_data_directory_that_is_a_file_or_holds_a_fifo_is_named_as_such(tmp_path):
    from commands import TRAIN, assert_one_line_error, run
    (tmp_path / "file").write_text("not a directory")
    assert_one_line_error(run(TRAIN, "--data-dir", tmp_path / "file", "--out", tmp_path / "run"),
                          "--data-dir %s is a file, not a directory of MNIST files"
                          % (tmp_path / "file"))
    (tmp_path / "mnist").mkdir()
    os.mkfifo(tmp_path / "mnist" / "train-images-idx3-ubyte.gz")
    assert_one_line_error(run(TRAIN, "--data-dir", tmp_path / "mnist", "--out", tmp_path / "run"),
                          "train-images-idx3-ubyte.gz is a FIFO, not an IDX file")
    assert not (tmp_path / "run").exists()


def test_environment_directory_is_used(tmp_path, monkeypatch):
    for stem in IDX_FILES.values():
        (tmp_path / (stem + ".gz")).write_bytes(b"")
    monkeypatch.setenv("GLUON_BBB_DATA", str(tmp_path))
    assert resolve_data_dir() == str(tmp_path)


def test_missing_everywhere_without_download(tmp_path, monkeypatch):
    monkeypatch.setenv("GLUON_BBB_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(DataError) as info:
        resolve_data_dir(download=False)
    assert str(tmp_path / "env") in str(info.value)
    assert str(tmp_path / "home") in str(info.value)


def test_real_mnist(full_mnist):
    mnist = full_mnist
    assert mnist.train_images.shape == (60000, 784) and mnist.test_images.shape == (10000, 784)
    assert mnist.train_images.dtype == np.float32
    assert mnist.train_labels.shape == (60000,) and mnist.test_labels.shape == (10000,)
    for labels in (mnist.train_labels, mnist.test_labels):
        assert labels.min() == 0 and labels.max() == 9
        assert set(np.unique(labels)) == set(range(10))
    assert mnist.train_images.min() == 0.0
    assert mnist.train_images.max() == pytest.approx(255 / 126)
    # canonical first labels of the training set
    np.testing.assert_array_equal(mnist.train_labels[:5], [5, 0, 4, 1, 9])


def test_fingerprint_is_the_sha256_of_the_files_shapes_and_bytes(mnist, tmp_path):
    expected = hashlib.sha256()
    for stem in IDX_FILES.values():
        path = find_idx_file(mnist.directory, stem)
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            content = f.read()
        ndim = content[3]
        shape = struct.unpack(">%dI" % ndim, content[4:4 + 4 * ndim])
        expected.update(struct.pack(">%dI" % ndim, *shape) + content[4 + 4 * ndim:])
    assert mnist.fingerprint == expected.hexdigest()
    # links to the same files elsewhere: the same; one pixel changed (uncompressed): another
    assert load_mnist(mnist_copy(str(tmp_path / "same"))).fingerprint == mnist.fingerprint
    changed = load_mnist(mnist_copy(str(tmp_path / "changed"), changed_pixel=True))
    assert changed.fingerprint != mnist.fingerprint
    assert np.sum(changed.test_images != mnist.test_images) == 1


def test_load_mnist_takes_any_count_of_images_with_one_label_each(tmp_path):
    for key, stem in IDX_FILES.items():
        shape = (3 if key.startswith("train") else 2,) + ((28, 28) if key.endswith("images")
                                                           else ())
        write(str(tmp_path / stem), idx_bytes(np.full(shape, 7)))
    data = load_mnist(str(tmp_path))
    assert data.train_images.shape == (3, 784) and data.test_labels.tolist() == [7, 7]
    write(str(tmp_path / IDX_FILES["test_labels"]), idx_bytes(np.zeros(3)))
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte: holds 3 labels, .*"
                                        "t10k-images-idx3-ubyte 2 images: one label each"):
        load_mnist(str(tmp_path))
    write(str(tmp_path / IDX_FILES["test_labels"]), idx_bytes(np.zeros(0)))
    with pytest.raises(DataError, match="holds no labels"):
        load_mnist(str(tmp_path))

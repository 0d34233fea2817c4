"""learning/loop.py: what ``train`` checks before it trains (the training itself is tested end
to end in test_train.py)."""
import numpy as np
import pytest

from gluon_bbb import Config, DataError, train
from gluon_bbb.data import MNIST


def data_of(train_images, train_labels, test_images=None, test_labels=None):
    rng = np.random.default_rng(0)
    test_images = rng.random((20, 784)) if test_images is None else test_images
    test_labels = rng.integers(0, 10, 20) if test_labels is None else test_labels
    return MNIST(train_images, train_labels, test_images, test_labels, directory="x",
                 fingerprint="x")


@pytest.mark.parametrize("change, words", [
    (lambda d: d._replace(train_labels=d.train_labels[:90]),
     "100 train images with labels of shape (90,): one label each"),
    (lambda d: d._replace(test_labels=d.test_labels[:, None]),
     "20 test images with labels of shape (20, 1)"),
    (lambda d: d._replace(train_images=d.train_images[:, :700]),
     "the train images must be an array (N, 784), not (100, 700)"),
    (lambda d: d._replace(train_labels=d.train_labels + 10),
     "the train labels must be whole numbers from 0 to 9"),
    (lambda d: d._replace(train_labels=d.train_labels + 0.5),
     "the train labels must be whole numbers from 0 to 9"),
    (lambda d: d._replace(test_images=np.full((20, 784), np.nan)),
     "the test images must be finite numbers")])
def test_train_refuses_data_whose_images_and_labels_do_not_match(ctx, change, words):
    rng = np.random.default_rng(1)
    data = change(data_of(rng.random((100, 784)), rng.integers(0, 10, 100)))
    with pytest.raises(DataError) as info:
        train(Config(epochs=1, batch_size=10, num_hidden_units=8), data, ctx, log=None)
    assert words in str(info.value)


def test_train_refuses_a_likelihood_that_does_not_classify_naming_the_command_that_fits(ctx,
                                                                                       tmp_path):
    rng = np.random.default_rng(1)
    data = data_of(rng.random((100, 784)), rng.integers(0, 10, 100))
    from gluon_bbb import ConfigError
    with pytest.raises(ConfigError, match=r"likelihood must be categorical to classify images "
                                          r"\(regression: gluon-bbb regression\), got "
                                          r"'gaussian:learned'"):
        train(Config(epochs=1, batch_size=10, num_hidden_units=8, likelihood="gaussian:learned",
                     num_outputs=20), data, ctx, out_dir=str(tmp_path / "run"), log=None)
    assert not (tmp_path / "run").exists()

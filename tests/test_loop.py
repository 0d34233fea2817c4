"""learning/loop.py: what ``train`` checks before it trains, what its epochs record, and (the
slow tier) what it learns on real MNIST against accuracy floors."""
import numpy as np
import pytest

from gluon_bbb import Config, DataError, train
from gluon_bbb.data import MNIST

QUIET = dict(log=lambda line: None, progress=False)


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


def test_a_validation_split_holds_out_the_last_images(mnist, ctx):
    from gluon_bbb import evaluate_accuracy
    result = train(Config(train_size=300, epochs=1, seed=0, validation=1000,
                          num_hidden_units=20), mnist, ctx, **QUIET)
    held_out = evaluate_accuracy(mnist.train_images[-1000:], mnist.train_labels[-1000:],
                                 result.mus)
    assert result.history[0]["validation_accuracy"] == pytest.approx(held_out)
    with pytest.raises(ValueError, match="validation must be less than the 6000"):
        train(Config(validation=6000), mnist, ctx)


def test_kl_scale_multiplies_the_kl_term_only(mnist, ctx):
    # one plain-SGD step on the same batch and noise: the update is -lr (data + s * KL
    # gradient), linear in s, and s = 1 is the paper's objective (the default)
    def step(kl_scale):
        config = Config(train_size=128, epochs=1, seed=2, num_hidden_units=30,
                        prior="scale_mixture", kl_scale=kl_scale)
        result = train(config, mnist, ctx, **QUIET)
        return np.concatenate([p.asnumpy().ravel() for p in result.mus + result.rhos])
    one, two, three = step(1.0), step(2.0), step(3.0)
    assert Config().kl_scale == 1.0
    assert np.abs(two - one).max() > 1e-3
    np.testing.assert_allclose(three - one, 2 * (two - one), rtol=1e-3, atol=2e-6)


@pytest.mark.parametrize("channels", [8, 32])
def test_a_first_convolution_of_any_width_trains_to_finite_parameters(tmp_path, mnist, ctx,
                                                                      channels):
    """README's network (conv:32:3 first): 8 and 32 channels, where oneDNN's inference
    convolution used to reorder a view of mu in place and fill the run with NaN."""
    from gluon_bbb import load_checkpoint
    config = Config(network="conv:%d:3,relu,pool:2,dense:16,relu,dense:10" % channels,
                    train_size=256, epochs=1, seed=0, optimizer="adam", learning_rate=0.002,
                    rho_offset=-5.0)
    result = train(config, mnist, ctx, out_dir=str(tmp_path), **QUIET)
    state = load_checkpoint(str(tmp_path))
    for array in state["mus"] + state["rhos"]:
        assert np.isfinite(array.asnumpy()).all()
    np.testing.assert_array_equal(state["mus"][2].asnumpy(), result.mus[2].asnumpy())


def test_training_stops_when_a_parameter_turns_non_finite_with_a_finite_loss(
        tmp_path, mnist, monkeypatch, ctx):
    # the last update of the epoch overflows one mean: its loss was finite, the checkpoint
    # must not be written with it
    from gluon_bbb import TrainingDiverged, TrainingStep
    update = TrainingStep._update

    def overflowing(step, index, param, grad):
        update(step, index, param, grad)
        if index == 0 and step.num_update == 5:
            param[3] = np.inf
    monkeypatch.setattr(TrainingStep, "_update", overflowing)
    with pytest.raises(TrainingDiverged) as info:
        train(Config(train_size=640, epochs=1, seed=0, num_hidden_units=20), mnist, ctx,
              out_dir=str(tmp_path), **QUIET)
    assert str(info.value).startswith(
        "mu:0 (1 of its 15680 entries) became non-finite (inf) at epoch 1, in batches 1 to 5, "
        "while the losses were finite; stopping.")
    assert not (tmp_path / "checkpoint.params").exists()


# What training learns, on real MNIST, against floors below what was measured.

@pytest.mark.slow
@pytest.mark.parametrize("settings, floor", [
    # seeds 0-5 measured 0.805-0.852 (the Gaussian prior) and 0.775-0.847 (the scale mixture)
    (dict(), 0.78), (dict(prior="scale_mixture"), 0.75),
    (dict(estimator="lrt", kl="analytic"), 0.78), (dict(estimator="sample", kl="analytic"), 0.78),
    (dict(estimator="lrt", kl="mc"), 0.78)])
def test_bayes_by_backprop_learns(full_mnist, ctx, settings, floor):
    result = train(Config(train_size=3000, epochs=2, seed=0, **settings), full_mnist, ctx,
                   **QUIET)
    assert all(np.isfinite(r["loss"]) for r in result.history)
    assert result.history[-1]["test_accuracy"] >= floor
    assert all(m.context == ctx for m in result.mus + result.rhos)


@pytest.mark.slow
def test_a_lenet_learns_from_the_command_line(tmp_path, full_mnist_dir):
    from commands import TRAIN, run
    out = tmp_path / "lenet"
    proc = run(TRAIN, "--out", out, "--network", "lenet", "--epochs", "1", "--train-size",
               "10000", "--seed", "1", "--test-samples", "0", "--data-dir", full_mnist_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (
        "a network with convolutions takes --optimizer adam, --learning-rate 0.002, "
        "--rho-offset -5.0 (where no flag or preset sets them)")
    import json
    with open(out / "history.json") as f:
        assert json.load(f)[-1]["test_accuracy"] >= 0.95  # 0.9506 measured, seed 1

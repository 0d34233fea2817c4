"""Priors that prune, in training: sparse variational dropout's runs switch weights off and keep
their accuracy, prune and compress read the prior's rule, gates switch whole units off, a
narrower run starts from a gated one's best units (the priors' formulas: test_priors.py)."""
import json
import os

import numpy as np
import pytest
from mxnet import nd

import mxnet as mx
from gluon_bbb import Config, train
from gluon_bbb.errors import ConfigError
from gluon_bbb.family.priors import LogUniformPrior
from gluon_bbb.native import library as native_library

K1, K2, K3 = 0.63576, 1.87320, 1.48695


def numpy_kl(mu, sigma):
    log_alpha = np.clip(np.log(sigma ** 2) - np.log(mu ** 2 + 1e-8), -10, 10)
    return K1 - K1 / (1 + np.exp(-(K2 + K3 * log_alpha))) + 0.5 * np.log1p(np.exp(-log_alpha))


SPARSE = dict(prior="log-uniform", kl="analytic", parametrization="log_variance",
              estimator="lrt", network="dense:100,relu,dense:10", optimizer="adam",
              learning_rate=1e-3, rho_offset=-10.0, mu_scale=0.05, seed=0)


@pytest.mark.slow
def test_sparse_variational_dropout_switches_weights_off_and_keeps_accuracy(full_mnist):
    mnist = full_mnist
    config = Config(prior="log-uniform", kl="analytic", parametrization="log_variance",
                    estimator="lrt", network="dense:100,relu,dense:10", optimizer="adam",
                    learning_rate=1e-3, rho_offset=-10.0, mu_scale=0.05, epochs=3,
                    train_size=20000, seed=0)
    result = train(config, mnist, mx.cpu(), log=lambda line: None, progress=False)
    prior = LogUniformPrior()
    log_alphas = np.concatenate([prior.log_alpha(m, s).asnumpy().ravel()
                                 for m, s in zip(result.mus, result.sigmas)])
    switched_off = np.mean(log_alphas > prior.PRUNE_LOG_ALPHA)
    assert result.history[-1]["test_accuracy"] > 0.9
    # at the start log alpha = -10 - log mu^2 is above 3 for the 2% of means below 0.0015
    assert switched_off > 0.6, switched_off  # 0.89 measured


def test_prune_and_compress_read_the_priors_rule_from_the_run(tmp_path, runs):
    from commands import COMPRESS, PRUNE, run
    from gluon_bbb import RunDirectory
    out = runs.copy("sparse", tmp_path)
    run_directory = RunDirectory(str(out))
    state = run_directory.load_parameters(run_directory.read_config())
    prior = LogUniformPrior()
    masks = [prior.switched_off(m, nd.exp(r / 2)).asnumpy()
             for m, r in zip(state["mus"], state["rhos"])]
    rule = sum(m.sum() for m in masks) / sum(m.size for m in masks)
    assert 0 < rule < 1.0
    proc = run(PRUNE, "--checkpoint", out, "--proportions", "0", "0.5")
    assert proc.returncode == 0, proc.stderr
    with open(out / "pruning.json") as f:
        report = json.load(f)
    assert report["prior_rule_proportion"] == pytest.approx(rule, rel=1e-9)
    assert [row["proportion"] for row in report["rows"]] == pytest.approx(
        sorted([0.0, 0.5, rule]))
    assert "the log-uniform prior has switched off" in proc.stdout
    proc = run(COMPRESS, out, "--out", tmp_path / "model.gbbb")
    assert proc.returncode == 0, proc.stderr
    assert "the log-uniform prior has switched off %.4g of the parameters" % rule in proc.stdout
    assert "proportion %g: error" % rule in proc.stdout


def test_a_sparse_runs_best_epoch_is_chosen_by_its_validation_objective(tmp_path, mnist):
    from gluon_bbb.learning.rundir import best_validation_epoch
    from gluon_bbb.learning.loop import split_data
    # a tempered run (kl_scale 0.5): its objective weighs the KL as its training does
    config = Config(epochs=3, train_size=2000, validation=2000, kl_scale=0.5, **SPARSE)
    out = str(tmp_path / "run")
    result = train(config, mnist, mx.cpu(), out_dir=out, log=lambda line: None,
                   progress=False)
    history = result.history
    # the objective at the last epoch, in NumPy: 2,000 x the mean NLL of the validation
    # images under the means with log alpha > 3 zeroed, plus half the KL of every parameter
    mus = [m.asnumpy().astype(np.float64) for m in result.mus]
    sigmas = [s.asnumpy().astype(np.float64) for s in result.sigmas]
    kept = [np.where(np.log(s ** 2) - np.log(m ** 2 + 1e-8) > 3, 0.0, m)
            for m, s in zip(mus, sigmas)]
    _, _, val_images, val_labels = split_data(config, mnist)
    hidden = np.maximum(val_images @ kept[0].T + kept[1], 0)
    logits = hidden @ kept[2].T + kept[3]
    log_probs = logits - logits.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    nll = -log_probs[np.arange(len(val_labels)), val_labels.astype(int)].mean()
    kl = sum(numpy_kl(m, s).sum() for m, s in zip(mus, sigmas))
    assert history[-1]["validation_objective"] == pytest.approx(2000 * nll + 0.5 * kl,
                                                                rel=1e-4)
    from gluon_bbb.tutorial import evaluate_nll
    kept_nd = [nd.array(k, dtype="float32") for k in kept]
    assert evaluate_nll(val_images, val_labels, kept_nd, batch_size=300,
                        network=config.build_network()) == pytest.approx(nll, rel=1e-5)
    # the KL term falls as weights switch off: the later epochs are the better ones here,
    # while the means' validation accuracy need not rise
    objectives = [record["validation_objective"] for record in history]
    assert objectives[-1] < objectives[0], objectives
    best = best_validation_epoch(history)
    assert best["validation_objective"] == min(objectives)
    with open(os.path.join(out, "history.json")) as f:
        assert best_validation_epoch(json.load(f))["epoch"] == best["epoch"]
    assert int(nd.load(os.path.join(out, "best.params"))["epoch"].asscalar()) == best["epoch"]


def test_the_kl_warm_up_grows_linearly_and_weighs_the_epochs_loss(mnist):
    config = Config(kl_warmup_epochs=4, **SPARSE)
    assert [config.build_schedule().kl_factor_at(e) for e in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert Config.from_dict(SPARSE).build_schedule().kl_factor_at(0) == 1.0
    with pytest.raises(ConfigError, match="kl_warmup_epochs must be an integer >= 0"):
        Config(kl_warmup_epochs=-1)
    small = dict(SPARSE, train_size=2000, epochs=2)
    warm = train(Config(kl_warmup_epochs=2, **small), mnist, mx.cpu(), log=lambda line: None,
                 progress=False)
    cold = train(Config.from_dict(small), mnist, mx.cpu(), log=lambda line: None, progress=False)
    assert [r["kl_factor"] for r in warm.history] == [0.0, 0.5]
    assert "kl_factor" not in cold.history[0]
    # the first epoch of the warm-up is the data term alone, the NLL summed over a mini-batch
    # of 128 images (at most 128 log 10 = 295 at chance; 231 measured); the sparse prior's KL
    # adds about 2.6 nats a weight at the start, over 79,510 weights in 16 mini-batches
    assert warm.history[0]["loss"] < 128 * np.log(10) < 5000 < cold.history[0]["loss"], (
        warm.history[0]["loss"], cold.history[0]["loss"])


def test_init_from_starts_the_means_from_another_run(tmp_path, mnist, monkeypatch):
    from gluon_bbb.errors import CheckpointError
    pretrained = str(tmp_path / "deterministic")
    network = SPARSE["network"]
    first = train(Config(model="deterministic", network=network, optimizer="adam", learning_rate=1e-3,
                 epochs=1, train_size=4000, seed=0), mnist, mx.cpu(), out_dir=pretrained,
          log=lambda line: None, progress=False)
    small = dict(SPARSE, train_size=2000, epochs=1)
    out = str(tmp_path / "sparse")
    monkeypatch.chdir(tmp_path)
    started = train(Config(init_from="deterministic", **small), mnist, mx.cpu(), out_dir=out,
                    log=lambda line: None, progress=False)
    scratch = train(Config.from_dict(small), mnist, mx.cpu(), log=lambda line: None, progress=False)
    # 16 Adam steps from random means against 16 from a network already trained
    # 16 Adam steps from the trained means keep their accuracy (0.913 before, 0.914 after,
    # measured); 16 from random means reach 0.36
    pretrained_accuracy = first.history[0]["test_accuracy"]
    assert started.history[0]["test_accuracy"] > pretrained_accuracy - 0.02
    assert scratch.history[0]["test_accuracy"] < 0.6 < pretrained_accuracy
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["init_from"] == pretrained  # recorded as an absolute path
    # a resume that does not name it takes the run's; a relative path to it is the same
    again = train(Config(init_from=None, **dict(small, epochs=2)), mnist, mx.cpu(), out_dir=out,
                  resume=True, log=lambda line: None, progress=False)
    assert len(again.history) == 2
    with pytest.raises(CheckpointError, match=r"init_from .*deterministic holds means of "
                       r"shapes \[\(100, 784\), \(100,\), \(10, 100\), \(10,\)\]; this run's "
                       r"network needs \[\(50, 784\)"):
        train(Config(init_from=pretrained, **dict(small, network="dense:50,relu,dense:10")),
              mnist, mx.cpu(), log=lambda line: None, progress=False)
    # a gated network starts from the same network without its gates: gates at 1, its outputs
    # those of the pretrained network
    from gluon_bbb.learning.loop import initial_means
    gated = Config(init_from=pretrained, **dict(small, network="dense:100,gate,relu,dense:10"))
    mus = initial_means(gated)
    assert [m.shape for m in mus] == [(100, 784), (100,), (100,), (10, 100), (10,)]
    assert (mus[2].asnumpy() == 1).all()
    X = nd.array(mnist.test_images[:50])
    np.testing.assert_allclose(gated.build_network()(X, mus).asnumpy(),
                               Config(network=network).build_network()(X, first.mus).asnumpy(),
                               rtol=1e-5, atol=1e-5)
    # --gate-rho-offset starts the gates' rho apart from the weights', from scratch and from a
    # pretrained network alike (a rate of 1e-9 leaves them where they started)
    from gluon_bbb.learning.step import TrainingStep
    gated_small = dict(small, network="dense:100,gate,relu,dense:10", gate_rho_offset=-2.0)
    assert Config.from_dict(gated_small).initial_rhos() == [-10.0, -10.0, -2.0, -10.0, -10.0]
    assert [float(r.asnumpy().mean()) for r in TrainingStep(
        Config.from_dict(gated_small).build_plan(), mx.cpu()).rhos] == pytest.approx(
        [-10.0, -10.0, -2.0, -10.0, -10.0])
    still = train(Config(init_from=pretrained, **dict(gated_small, learning_rate=1e-9)), mnist,
                  mx.cpu(), log=lambda line: None, progress=False)
    for rho, start in zip(still.rhos, [-10.0, -10.0, -2.0, -10.0, -10.0]):
        np.testing.assert_allclose(rho.asnumpy(), start, atol=1e-4)
    with pytest.raises(ConfigError, match="gate_rho_offset must be left unset for a network "
                                          "without gates"):
        Config(gate_rho_offset=-2.0)
    with pytest.raises(CheckpointError, match=r"needs .* \(or \[\(50, 784\), \(50,\), "
                                              r"\(10, 50\), \(10,\)\], without its gates\)"):
        initial_means(Config(init_from=pretrained, **dict(
            small, network="dense:50,gate,relu,dense:10")))
    with pytest.raises(CheckpointError, match="init_from .*nowhere does not exist"):
        train(Config(init_from=str(tmp_path / "nowhere"), **small), mnist, mx.cpu(),
              out_dir=str(tmp_path / "never"), log=lambda line: None, progress=False)
    assert not os.path.exists(str(tmp_path / "never"))  # refused before the run was made
    # the start trained on images 0-3,999: a run may hold out 2,000 (4,000-5,999), not
    # 40,001, whose first validation image the start has fitted
    from gluon_bbb.learning.loop import check_training
    unseen = dict(small, train_size=None, validation=2000)
    check_training(Config(init_from=pretrained, **unseen), mnist)
    with pytest.raises(CheckpointError, match=r"init_from .*deterministic trained on the first "
                       r"4000 training images, among them the last 1, which this run holds "
                       r"out \(validation 2001\)"):
        train(Config(init_from=pretrained, **dict(unseen, validation=2001)), mnist, mx.cpu(),
              out_dir=str(tmp_path / "never"), log=lambda line: None, progress=False)
    assert not os.path.exists(str(tmp_path / "never"))
    # a parameter file alone, without its run's config.json, is taken as it is
    import shutil
    shutil.copy(os.path.join(pretrained, "checkpoint.params"), str(tmp_path / "alone.params"))
    check_training(Config(init_from=str(tmp_path / "alone.params"),
                          **dict(unseen, validation=5000)), mnist)


@pytest.mark.slow
def test_gates_switch_whole_units_off_and_compress_removes_them(tmp_path, full_mnist,
                                                                full_mnist_dir):
    """Group sparsity: a gate after the hidden layer under the log-uniform prior. Four epochs
    switch a share of the gates off (log alpha > 3: 25% measured); compress at the prior's rule
    stores a network without those units, whose NumPy predictor gives the pruned gated
    network's labels; the size-error figure draws the run."""
    from commands import COMPRESS, PYTHON, ROOT, run
    from gluon_bbb.shipping import model_file as compressed
    from gluon_bbb.analysis.snr import prune_weights
    out = str(tmp_path / "gated")
    config = Config.from_dict(dict(SPARSE, network="dense:100,gate,relu,dense:10",
                                   learning_rate=1e-2, epochs=4, train_size=20000, validation=2000))
    result = train(config, full_mnist, mx.cpu(), out_dir=out, log=lambda line: None, progress=False)
    prior = LogUniformPrior()
    gates = prior.switched_off(result.mus[2], result.sigmas[2]).asnumpy()
    assert gates.mean() > 0.1, gates.mean()
    assert result.history[-1]["test_accuracy"] > 0.9
    path = tmp_path / "gated.gbbb"
    proc = run(COMPRESS, out, "--out", path)
    assert proc.returncode == 0, proc.stderr
    model = compressed.read(str(path))
    units = int(model.header["network"].split(",")[0].split(":")[1])
    assert units <= 100 - gates.sum(), (model.header["network"], gates.sum())
    assert "multiply-adds an image" in proc.stdout
    proportion = model.header["source"]["proportion"]
    pruned = prune_weights(result.mus, result.sigmas, proportion)
    X = full_mnist.test_images[:500]
    labels = config.build_network()(nd.array(X), pruned).asnumpy().argmax(axis=1)
    # float32 means: the folded gates and the units removed compute the pruned network's labels
    exact = tmp_path / "exact.gbbb"
    proc = run(COMPRESS, out, "--proportion", str(proportion), "--precision", "0", "--out",
               exact)
    assert proc.returncode == 0, proc.stderr
    assert (compressed.read(str(exact)).predict(X).argmax(axis=1) == labels).mean() > 0.998
    # means rounded to a step of their median sigma move the labels of a few images near a
    # boundary (0.986 and 0.994 measured on two versions of this training)
    assert (model.predict(X).argmax(axis=1) == labels).mean() > 0.98
    figure = tmp_path / "size-error.png"
    proc = run([PYTHON, os.path.join(ROOT, "examples", "size_error_figure.py"), figure,
                "group sparsity=%s:%s" % (out, path)], env={"GLUON_BBB_DATA": full_mnist_dir})
    assert proc.returncode == 0, proc.stderr
    assert os.path.getsize(figure) > 10000
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "%" in line]
    assert len(rows) >= 21  # nothing removed and the 20 proportions compress searches
    assert "chosen by compress: %s" % path in proc.stdout


def test_a_narrower_run_starts_from_a_gated_runs_best_ranked_units(tmp_path, mnist):
    """Gates under the log-uniform prior over weights under none (``--prior none``: their KL
    term 0), then a run of the network with fewer units from the units whose gates have the
    highest |mu| / sigma (``init_best_units``), against the ranking and slicing written here."""
    from gluon_bbb.errors import CheckpointError
    from gluon_bbb.family.priors import NoPrior
    from gluon_bbb.learning.loop import initial_means
    mu, sigma = nd.array([0.0, 0.3, -2.0]), nd.array([0.1, 1.0, 5.0])
    assert (NoPrior().closed_form_kl(mu, sigma)[0].asnumpy() == 0).all()
    ranked = str(tmp_path / "ranked")
    gated = dict(SPARSE, prior="none", gate_prior="log-uniform", gate_rho_offset=-2.0,
                 network="dense:100,gate,relu,dense:10", train_size=2000, validation=1000,
                 epochs=1)
    first = train(Config.from_dict(dict(gated, learning_rate=1e-2)), mnist, mx.cpu(),
                  out_dir=ranked, log=lambda line: None, progress=False)
    narrow = dict(gated, network="dense:30,gate,relu,dense:10", init_from=ranked,
                  init_best_units=True)
    mus = [m.asnumpy() for m in initial_means(Config.from_dict(narrow))]
    arrays = nd.load(os.path.join(ranked, "checkpoint.params"))
    wide = [arrays["mu:%d" % i].asnumpy() for i in range(5)]
    gate_sigma = np.exp(arrays["rho:2"].asnumpy() / 2)  # rho is log sigma^2 here
    assert np.std(gate_sigma) > 0  # a ranking to follow, not the gates' common start
    best = np.sort(np.argsort(-np.abs(wide[2]) / gate_sigma)[:30])
    expected = [wide[0][best], wide[1][best], wide[2][best], wide[3][:, best], wide[4]]
    for ours, theirs in zip(mus, expected):
        np.testing.assert_array_equal(ours, theirs)
    out = str(tmp_path / "narrow")
    result = train(Config.from_dict(narrow), mnist, mx.cpu(), out_dir=out, log=lambda line: None,
                   progress=False)
    with open(os.path.join(out, "config.json")) as f:
        record = json.load(f)
    assert record["init_from"] == ranked and record["init_best_units"] is True
    # 16 steps from those units keep the wide run's accuracy; 16 from random means do not
    # (0.843 before, 0.842 after, 0.558 measured)
    scratch = train(Config.from_dict(dict(narrow, init_from=None, init_best_units=False)), mnist,
                    mx.cpu(), log=lambda line: None, progress=False)
    assert result.history[0]["test_accuracy"] > first.history[0]["test_accuracy"] - 0.03
    assert scratch.history[0]["test_accuracy"] < first.history[0]["test_accuracy"] - 0.15
    with pytest.raises(ConfigError, match="init_best_units must be false without init_from"):
        Config.from_dict(dict(narrow, init_from=None))
    with pytest.raises(ConfigError, match="init_best_units must be false for a network "
                                          "without gates"):
        Config.from_dict(dict(narrow, network="dense:30,relu,dense:10", gate_prior=None,
                              gate_rho_offset=None))
    with pytest.raises(CheckpointError, match=r"init_best_units: init_from .*ranked is a run of "
                       r"dense:100,gate,relu,dense:10, not of this run's network "
                       r"dense:200,gate,relu,dense:10 with as many units or more"):
        initial_means(Config.from_dict(dict(narrow, network="dense:200,gate,relu,dense:10")))
    os.remove(os.path.join(ranked, "config.json"))
    with pytest.raises(CheckpointError, match="reads the network of init_from from its run's "
                                              "config.json"):
        initial_means(Config.from_dict(narrow))


def test_a_channel_without_its_bias_on_a_blank_border_draws_finite_gradients(ctx):
    """The local reparametrization's pre-activation variance at a blank border, for a channel
    whose bias is removed, is 0 but for the floor: sqrt's gradient there would be infinite,
    and its product with the zero inputs of the channel's kept weights NaN."""
    from gluon_bbb import combined_loss_gradients
    from gluon_bbb.family import estimators, kl as kl_estimates
    from gluon_bbb.learning.step import NetworkGraph, draw_size
    from gluon_bbb.family.parametrizations import parametrization
    config = Config(network="conv:4:3,relu,pool:2,flatten,dense:3", num_inputs=64,
                    num_outputs=3, **{k: v for k, v in SPARSE.items() if k != "network"})
    graph = NetworkGraph(config.build_network())
    layout = graph.layout
    rng = np.random.default_rng(0)
    images = np.zeros((5, 8, 8))
    images[:, 3:5, 3:5] = rng.random((5, 2, 2))  # blank but for the middle
    X = nd.array(images.reshape(5, 64), ctx=ctx)
    y = nd.array(np.eye(3)[[0, 1, 2, 0, 1]], ctx=ctx)
    mu = nd.array(rng.normal(scale=0.3, size=layout.size), ctx=ctx)
    rho = nd.full(layout.size, -6.0, ctx=ctx)
    keep = np.ones(layout.size, dtype=np.float32)
    keep[:4] = 0  # four of the first channel's 3x3 weights
    keep[36] = 0  # and its bias
    size = draw_size(graph, estimators.estimator("lrt"), kl_estimates.kl_estimate("analytic"), None, 5)
    eps = nd.array(rng.normal(size=size), ctx=ctx)
    loss, grad_mu, grad_rho = combined_loss_gradients(
        X, y, mu, rho, [eps], LogUniformPrior(), 0.1, graph, "lrt", "analytic",
        parametrization("log_variance"), nd.array(keep, ctx=ctx))
    for array in (loss, grad_mu, grad_rho):
        assert np.isfinite(array.asnumpy()).all()
    assert not grad_mu.asnumpy()[keep == 0].any() and not grad_rho.asnumpy()[keep == 0].any()
    assert np.abs(grad_rho.asnumpy()[4:9]).max() > 0  # the channel's kept weights learn


def test_removing_what_the_rule_switches_off_trains_the_pruned_network(tmp_path, mnist):
    """``remove_switched_off``: every parameter the rule has switched off has mean exactly 0
    after every epoch, so the rule keeps it off and the means are the pruned network (the
    validation objective is that network's); the choices it needs are refused on one line each
    (it resumes to the same bits: test_rundir.py)."""
    from gluon_bbb.learning.step import choose_backend
    prior = LogUniformPrior()
    small = dict(SPARSE, train_size=4000, validation=2000, kl_warmup_epochs=1,
                 remove_switched_off=True)
    out = str(tmp_path / "removing")
    result = train(Config(epochs=3, **small), mnist, mx.cpu(), out_dir=out,
                   log=lambda line: None, progress=False)
    off = 0
    for mu, sigma in zip(result.mus, result.sigmas):
        switched = prior.switched_off(mu, sigma).asnumpy().astype(bool)
        assert not mu.asnumpy()[switched].any()
        off += switched.sum()
    assert off > 0.3 * sum(m.size for m in result.mus), off
    assert result.history[-1]["test_accuracy"] > 0.8  # 0.831 measured
    # every epoch records the share switched off, the last one the final parameters' (log
    # alpha = log sigma^2 - log(mu^2 + 1e-8) above 3, or a mean taken out, in NumPy)
    total = sum(m.size for m in result.mus)
    share = sum(np.sum((np.log(s.asnumpy().astype(np.float64) ** 2)
                        - np.log(m.asnumpy().astype(np.float64) ** 2 + 1e-8) > 3)
                       | (m.asnumpy() == 0))
                for m, s in zip(result.mus, result.sigmas)) / total
    assert result.history[-1]["switched_off"] == pytest.approx(share, abs=1.0 / total)
    assert [r["switched_off"] for r in result.history] == sorted(
        r["switched_off"] for r in result.history)  # what removal takes out stays out
    # and the units of the network the rule keeps, as compress stores it at the rule's share:
    # a hidden unit whose weights in or out are all off is gone
    from gluon_bbb.shipping.writer import compress_parameters
    network = Config.from_dict(small).build_network()
    mus = [m.asnumpy() for m in result.mus]
    keep = [m != 0 for m in mus]  # removal has zeroed every mean the rule switched off
    _, _, _, report = compress_parameters(network, mus, None, mus, 0.0, 0.0, keep=keep)
    hidden = int(np.sum(np.any(mus[0] != 0, axis=1) & np.any(mus[2] != 0, axis=0)))
    assert 0 < hidden < 100
    assert result.history[-1]["units_left"] == [hidden, 10] == [
        b - r for b, r in zip(report["units_before"], report["units_removed"])]
    assert result.history[-1]["multiply_adds_left"] == pytest.approx((784 * hidden + hidden * 10)
                                                                     / (784 * 100 + 100 * 10))
    # what predicts from the run draws no noise for them either: it trained without them
    from gluon_bbb.learning.rundir import RunDirectory
    run = RunDirectory(out)
    state = run.load_predictive(run.read_config())
    for mu, sigma, posterior in zip(state["mus"], state["sigmas"], result.sigmas):
        switched = prior.switched_off(mu, posterior).asnumpy().astype(bool)
        assert not sigma.asnumpy()[switched].any()
        np.testing.assert_array_equal(sigma.asnumpy()[~switched],
                                      posterior.asnumpy()[~switched])
    # without removal the same run keeps small means where the rule has switched weights off
    kept = train(Config(epochs=3, **dict(small, remove_switched_off=False)), mnist, mx.cpu(),
                 log=lambda line: None, progress=False)
    assert any(mu.asnumpy()[prior.switched_off(mu, sigma).asnumpy().astype(bool)].any()
               for mu, sigma in zip(kept.mus, kept.sigmas))
    assert kept.history[-1]["switched_off"] == pytest.approx(sum(
        prior.switched_off(mu, sigma).asnumpy().sum()
        for mu, sigma in zip(kept.mus, kept.sigmas)) / total)
    backend, why = choose_backend(Config.from_dict(small).build_plan(), mx.cpu())
    assert backend == ("native" if native_library.available() else "ndarray"), why
    with pytest.raises(ConfigError, match="remove_switched_off must be false with the gaussian "
                                          "prior"):
        Config(remove_switched_off=True, kl="analytic")
    with pytest.raises(ConfigError, match="remove_switched_off must be false with the Monte "
                                          "Carlo KL"):
        Config(remove_switched_off=True)
    with pytest.raises(ConfigError, match="remove_switched_off must be false for model "
                                          "deterministic"):
        Config.from_dict(dict(small, model="deterministic"))
    with pytest.raises(ConfigError, match="remove_switched_off must be true or false"):
        Config.from_dict(dict(small, remove_switched_off="yes"))

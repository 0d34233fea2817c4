"""analysis/report.py: the uncertainty report's figures against the predictive written here, for
a run that learns no sigma and one that does (the command: test_evaluate.py)."""
import numpy as np
import pytest

from gluon_bbb import RunDirectory
from gluon_bbb.analysis.report import uncertainty_report
from gluon_bbb.analysis.uncertainty import (auroc, expected_calibration_error,
                                            negative_log_likelihood, predict,
                                            predictive_entropy)


@pytest.mark.parametrize("kind", ["deterministic", "mlp"])
def test_the_report_holds_the_predictives_figures(runs, mnist, kind):
    run = RunDirectory(str(runs[kind]))
    config = run.read_config()
    state = run.load_predictive(config)
    if kind == "deterministic":  # rho is not trained: sigma is none
        assert state["sigmas"] is None
        np.testing.assert_array_equal(state["rhos"][0].asnumpy(), -3.0)
    images, labels = mnist.test_images[:500], mnist.test_labels[:500]
    ood = np.random.default_rng(0).uniform(0, 2, size=(50, 784)).astype(np.float32)
    samples = 3 if state["sigmas"] is not None else 0
    report, entropies, _ = uncertainty_report(state["mus"], state["sigmas"], images, labels,
                                              samples, ood, seed=0,
                                              network=config.build_network())
    probs = predict(images, state["mus"], state["sigmas"], samples, seed=0,
                    network=config.build_network()).asnumpy()
    figures = report["in_distribution"]
    assert figures["accuracy"] == pytest.approx(np.mean(probs.argmax(1) == labels))
    assert figures["ece"] == pytest.approx(expected_calibration_error(probs, labels))
    assert figures["nll"] == pytest.approx(negative_log_likelihood(probs, labels))
    assert figures["mean_entropy"] == pytest.approx(predictive_entropy(probs).mean())
    assert report["ood"]["auroc"] == pytest.approx(auroc(entropies["MNIST test"],
                                                         entropies["OOD"]))
    assert report["ood"]["mean_entropy"] == pytest.approx(entropies["OOD"].mean())

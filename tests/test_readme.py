"""README's Python API block runs as written, on real MNIST."""
import os
import re

import numpy as np
import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def python_block(containing):
    """README's one Python block that holds ``containing``."""
    with open(README) as f:
        blocks = [block for block in re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
                  if containing in block]
    assert len(blocks) == 1, blocks
    return blocks[0]


@pytest.mark.slow
def test_readme_python_api_block_runs(mnist, capsys):
    namespace = {}
    exec(compile(python_block("from gluon_bbb import (Config"), "README.md", "exec"), namespace)  # load_mnist() reads $GLUON_BBB_DATA
    lines = capsys.readouterr().out.splitlines()
    # the accuracy of the initial mean weights (about chance), then train's log and the result
    assert 0.0 < float(lines[0]) < 0.3
    result = namespace["result"]
    # 2 epochs on 5,000 images: 87.18% measured (seed 0)
    assert len(result.history) == 2 and result.history[-1]["test_accuracy"] > 0.8
    # the block's backward pass wrote real gradients (attach_grad starts them at zero)
    for grad in [m.grad.asnumpy() for m in namespace["mus"] + namespace["rhos"]]:
        assert np.isfinite(grad).all() and np.abs(grad).max() > 0


def test_readme_gluon_block_runs():
    namespace = {}
    exec(compile(python_block("to_bayesian(net)"), "README.md", "exec"), namespace)
    assert [type(layer).__name__ for layer in namespace["net"]] == [
        "BayesianConv2D", "MaxPool2D", "BayesianDense"]
    assert namespace["loss"].shape == (1,) and float(namespace["loss"].asscalar()) > 0


def test_readme_shipping_block_runs(tmp_path, monkeypatch):
    from test_compression import synthetic_model
    synthetic_model(tmp_path / "lenet.gbbb", sigma_bits=4)  # a random network's, with sigmas
    monkeypatch.chdir(tmp_path)
    namespace = {"pixels": np.random.default_rng(0).integers(0, 256, (5, 28, 28))}
    exec(compile(python_block('compressed.read("lenet.gbbb")'), "README.md", "exec"), namespace)
    assert namespace["probs"].shape == (5, 10)
    np.testing.assert_allclose(namespace["probs"].sum(axis=1), 1, rtol=1e-5)
    assert namespace["unsure"].dtype == bool and namespace["unsure"].shape == (5,)

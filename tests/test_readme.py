"""README's Python API block runs as written, on real MNIST."""
import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def python_blocks():
    with open(README) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


@pytest.mark.slow
def test_readme_python_api_block_runs(mnist, capsys):
    blocks = python_blocks()
    assert len(blocks) == 2
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # load_mnist() reads $GLUON_BBB_DATA
    lines = capsys.readouterr().out.splitlines()
    # the accuracy of the initial mean weights (about chance), then train's log and the result
    assert 0.0 < float(lines[0]) < 0.3
    result = namespace["result"]
    # 2 epochs on 5,000 images: 87.18% measured (seed 0)
    assert len(result.history) == 2 and result.history[-1]["test_accuracy"] > 0.8
    assert all(m.grad is not None for m in namespace["mus"])


def test_readme_gluon_block_runs():
    namespace = {}
    exec(compile(python_blocks()[1], "README.md", "exec"), namespace)
    assert [type(layer).__name__ for layer in namespace["net"]] == [
        "BayesianConv2D", "MaxPool2D", "BayesianDense"]
    assert namespace["loss"].shape == (1,) and float(namespace["loss"].asscalar()) > 0

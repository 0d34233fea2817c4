"""The example notebook runs top to bottom in a kernel of this environment, on the tests' small
MNIST (its figures on all of MNIST are the learning checks' to keep: test_loop, test_blocks)."""
import json
import os
import re
import sys

import nbformat
import pytest
from nbclient import NotebookClient


NOTEBOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples", "bayes_by_backprop.ipynb")


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs == [] and cell.execution_count is None for cell in code)


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch, mnist_dirs):
    # a kernel spec naming this interpreter, so the kernel is this environment's and not
    # whatever "python3" a Jupyter install elsewhere on the machine points at
    spec_dir = tmp_path / "jupyter" / "kernels" / "gluon-bbb-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "gluon-bbb test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("MPLBACKEND", "agg")
    monkeypatch.setenv("GLUON_BBB_DATA", mnist_dirs[1])
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # raises CellExecutionError, naming the cell, on any error
    NotebookClient(nb, kernel_name="gluon-bbb-test", timeout=300,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(output.get("text", "") for cell in nb.cells if cell.cell_type == "code"
                     for output in cell.outputs if output.get("output_type") == "stream")
    images = sum("image/png" in output.get("data", {}) for cell in nb.cells
                 if cell.cell_type == "code" for output in cell.outputs)
    assert images == 4  # accuracy curve, SNR histogram, entropy histograms, quartic band
    # 3 epochs of the tutorial's settings on 6,000 images (88.6% measured, seed 0); half the
    # weights pruned cost little; noise is more uncertain than digits
    unpruned = float(re.search(r"removed +0%: +\d+ left, test accuracy ([\d.]+)%", text).group(1))
    half = float(re.search(r"removed +50%: +\d+ left, test accuracy ([\d.]+)%", text).group(1))
    assert unpruned > 85.0 and half > unpruned - 3.0
    digits, noise = map(float, re.search(r"digits ([\d.]+), noise ([\d.]+)", text).groups())
    assert noise > 2 * digits
    # a small Gluon CNN made Bayesian by to_bayesian, 2 epochs with gluon.Trainer (90.7%)
    cnn = float(re.search(r"CNN test accuracy with 10 weight samples: ([\d.]+)%", text).group(1))
    assert cnn > 85.0
    # the quartic: the 95% band about 20 times wider at x = +-4 than at the six inputs
    # (1.26 and 25.8 / 30.9 measured, seed 0)
    at_data, left, right = map(float, re.search(
        r"band width at the data ([\d.]+), at x = \+-4 ([\d.]+) / ([\d.]+)", text).groups())
    assert min(left, right) >= 10 * at_data
    # the network shipped as a compressed file and read back with NumPy alone
    ratio = float(re.search(r"compressed file: \d+ bytes, (\d+) times smaller", text).group(1))
    assert ratio >= 5  # half the weights removed, the means and sigmas in few bits
    digits = re.findall(r"digit (\d): predicted (\d), probability", text)
    assert len(digits) == 8 and sum(truth == label for truth, label in digits) >= 6

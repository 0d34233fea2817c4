"""README's Python blocks run as written, on real MNIST, and print what they did; its layout
section names every module of the package; every link to a heading of README and docs/ lands
on that heading."""
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


def test_readme_gluon_block_runs(capsys):
    namespace = {}
    exec(compile(python_block("to_bayesian(net)"), "README.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert printed.startswith("['BayesianConv2D', 'MaxPool2D', 'BayesianDense'] loss ")
    assert [type(layer).__name__ for layer in namespace["net"]] == [
        "BayesianConv2D", "MaxPool2D", "BayesianDense"]
    assert namespace["loss"].shape == (1,) and float(namespace["loss"].asscalar()) > 0


def test_readme_shipping_block_runs(tmp_path, monkeypatch, capsys, mnist):
    from gluon_bbb.data import find_idx_file
    from test_model_file import synthetic_model
    synthetic_model(tmp_path / "lenet.gbbb", sigma_bits=4)  # a random network's, with sigmas
    images = find_idx_file(os.environ["GLUON_BBB_DATA"], "t10k-images-idx3-ubyte")
    if not images.endswith(".gz"):  # the block reads the gzipped file MNIST's site serves
        import gzip
        with open(images, "rb") as f, gzip.open(tmp_path / "t10k-images-idx3-ubyte.gz",
                                                 "wb") as g:
            g.write(f.read())
    else:
        os.symlink(images, tmp_path / "t10k-images-idx3-ubyte.gz")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(python_block('model_file.read("lenet.gbbb")'), "README.md", "exec"), namespace)
    np.testing.assert_array_equal(namespace["pixels"], (mnist.test_images[:5] * 126).round()
                                  .reshape(5, 28, 28))
    assert namespace["probs"].shape == (5, 10)
    np.testing.assert_allclose(namespace["probs"].sum(axis=1), 1, rtol=1e-5)
    # the labels, then a flag an image for where the model is unsure
    labels, flags = capsys.readouterr().out.strip().split("] [")
    assert len(labels.strip("[").split()) == 5
    assert set(flags.strip("]").split()) <= {"True", "False"} and len(flags.split()) == 5


def test_readme_layout_names_every_module_of_the_package():
    """README's layout section is where a newcomer finds where each thing lives: every source
    file of the package is named in the row of its folder (a top-level module in a row of its
    own), and every command module is a row of ``COMMANDS``, as the commands' row says."""
    from gluon_bbb.commands import COMMANDS
    with open(README) as f:
        section = f.read().split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `gluon_bbb") and len(cells) == 2:
            rows[cells[0]] = cells[1]
    package = os.path.join(os.path.dirname(README), "gluon_bbb")
    unnamed = []
    for folder, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if not d.startswith("__")]
        relative = os.path.relpath(folder, os.path.dirname(package)) + "/"
        for name in files:
            if not name.endswith((".py", ".c", ".cc", ".h")) or name.startswith("__"):
                continue
            if relative == "gluon_bbb/commands/" and name[:-3] in {m for m, _ in
                                                                   COMMANDS.values()}:
                continue
            if relative == "gluon_bbb/":  # a row of its own: named in the first cell
                named = any("`%s`" % name in key or "/%s`" % name in key for key in rows)
            else:  # named in its folder's row
                named = "`%s`" % name in rows.get("| `%s`" % relative, "")
            if not named:
                unnamed.append(relative + name)
    assert len(rows) >= 8 and not unnamed, unnamed


def heading_anchors(text):
    """The anchors GitHub gives ``text``'s headings: lower case, punctuation but hyphens and
    underscores dropped, spaces as hyphens, a repeated anchor numbered from -1."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#+ (.*?)\s*$", re.sub(r"```.*?```", "", text, flags=re.S),
                              flags=re.M):
        anchor = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(anchor if count == 0 else "%s-%d" % (anchor, count))
    return anchors


def test_heading_anchors_follow_githubs_rule():
    text = "# A `gluon-bbb prune` (Table 2)\n```\n# not a heading\n```\n## Sweeps\n## Sweeps\n"
    assert heading_anchors(text) == {"a-gluon-bbb-prune-table-2", "sweeps", "sweeps-1"}


def test_every_link_to_a_heading_of_readme_and_docs_resolves():
    """A link ``FILE.md#anchor`` (or ``#anchor`` within a file) in README or docs/ names a
    heading of that file, so that a renamed heading cannot leave a link landing at the top."""
    root = os.path.dirname(README)
    docs = os.path.join(root, "docs")
    paths = [README] + [os.path.join(docs, name) for name in sorted(os.listdir(docs))
                        if name.endswith(".md")]
    texts = {}
    for path in paths:
        with open(path) as f:
            texts[path] = f.read()
    anchors = {path: heading_anchors(text) for path, text in texts.items()}
    broken, checked = [], 0
    for path, text in texts.items():
        for target, anchor in re.findall(r"\]\(([^)#\s]*\.md)?#([^)\s]+)\)", text):
            linked = os.path.normpath(os.path.join(os.path.dirname(path), target)) \
                if target else path
            checked += 1
            if anchor not in anchors.get(linked, set()):
                broken.append("%s: %s#%s" % (os.path.relpath(path, root), target, anchor))
    assert checked >= 20 and not broken, broken

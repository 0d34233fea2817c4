"""commands/shift.py: the command on a run, an ensemble and a compressed file, and the
example's figure."""
import json
import os

import numpy as np
import pytest

from gluon_bbb.analysis.robustness import SHIFTS, shift_report

from test_robustness import Fixed


@pytest.mark.slow
def test_the_command_on_a_run_an_ensemble_and_a_compressed_file(tmp_path, runs):
    from commands import COMPRESS, SHIFT, TRAIN, run
    from conftest import RUNS
    other = tmp_path / "run1"  # the shared run's network from another seed
    flags = RUNS["mlp"][:]
    flags[flags.index("--seed") + 1] = "1"
    proc = run(TRAIN, "--out", other, *flags)
    assert proc.returncode == 0, proc.stderr
    runs = [runs["mlp"], other]
    proc = run(COMPRESS, runs[0], "--out", tmp_path / "m.gbbb", "--proportion", "0.5",
               "--sigma-bits", "4")
    assert proc.returncode == 0, proc.stderr
    ood_dir = tmp_path / "ood"
    ood_dir.mkdir()
    # the test digits turned upside down: another dataset of 28x28 images
    from gluon_bbb.data import load_mnist
    from test_uncertainty import write_idx_images
    digits = load_mnist(os.environ["GLUON_BBB_DATA"]).test_images[:300] * 126
    write_idx_images(str(ood_dir / "t10k-images-idx3-ubyte.gz"),
                     np.rint(digits.reshape(-1, 28, 28)[:, ::-1, :]))
    for models, extra in (([runs[0]], ["--temperature-scale", "--ood-data-dir", ood_dir]),
                          (runs, []), ([tmp_path / "m.gbbb"], [])):
        report_dir = tmp_path / ("report%d" % len(os.listdir(tmp_path)))
        proc = run(SHIFT, *models, "--out", report_dir, "--test-size", "300",
                   "--test-samples", "2", *extra)
        assert proc.returncode == 0, proc.stderr
        for name, count in (("rotation", 13), ("translation", 15)):
            with open(report_dir / ("shift-%s.json" % name)) as f:
                report = json.load(f)
            assert len(report["rows"]) == count and report["images"] == 300
            accuracy = [row["accuracy"] for row in report["rows"]]
            # the shared run: about 0.85 unshifted, far less shifted most
            assert accuracy[0] > 0.7 and accuracy[-1] < accuracy[0] - 0.3, accuracy
            assert (report_dir / ("shift-%s.png" % name)).read_bytes()[:4] == b"\x89PNG"
        if extra:
            assert 0.05 < report["temperature"] < 20
            # flipped digits are less certain than digits: their entropy tells them apart
            assert report["ood"]["auroc"] > 0.6, report["ood"]
            assert "the 1000 validation images" in report["temperature_fitted_on"]
    proc = run(SHIFT, tmp_path / "m.gbbb", "--out", tmp_path / "r", "--temperature-scale")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--temperature-scale needs a run that holds out validation images" in proc.stderr
    proc = run(SHIFT, tmp_path / "nowhere", "--out", tmp_path / "r")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    # a model file named as a report is never written over
    (tmp_path / "w").mkdir()
    os.link(tmp_path / "m.gbbb", tmp_path / "w" / "shift-rotation.json")
    proc = run(SHIFT, tmp_path / "m.gbbb", "--out", tmp_path / "w", "--shift", "rotation")
    assert proc.returncode == 2 and "which this command reads; it is never written over" in (
        proc.stderr), proc.stderr
    assert (tmp_path / "w" / "shift-rotation.json").read_bytes()[:8] == b"GLUONBBB"


def test_the_example_draws_one_figure_of_several_kinds_of_model(tmp_path):
    from commands import PYTHON, ROOT, run
    rng = np.random.default_rng(3)
    for kind, seeds in (("bbb", 3), ("det", 2)):
        for seed in range(seeds):
            report_dir = tmp_path / ("report-%s-s%d" % (kind, seed))
            report_dir.mkdir()
            model = Fixed(1.0 + seed + 3 * (kind == "det"))
            images = rng.uniform(0, 2, size=(20, 784)).astype(np.float32)
            report = shift_report(model, images, rng.integers(0, 10, size=20),
                                  SHIFTS["rotation"])
            (report_dir / "shift-rotation.json").write_text(json.dumps(report))
    out = tmp_path / "figure.png"
    proc = run([PYTHON, os.path.join(ROOT, "examples", "shift_figure.py"), "rotation", out,
                "BBB=%s" % (tmp_path / "report-bbb-s*"), "det=%s" % (tmp_path / "report-det-s*")])
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "| BBB (3) | " in proc.stdout and "| det (2) | " in proc.stdout
    proc = run([PYTHON, os.path.join(ROOT, "examples", "shift_figure.py"), "rotation", out,
                "none=%s" % (tmp_path / "nothing-*")])
    assert proc.returncode == 2 and "no shift-rotation.json under" in proc.stderr

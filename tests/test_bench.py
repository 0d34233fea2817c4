"""The benchmark script keeps running as the code changes (no timing is asserted here)."""
import os
import re

import pytest

from commands import BENCH, PYTHON, ROOT, TRAIN, run

pytestmark = pytest.mark.slow  # end-to-end


def test_bench_train_runs_and_prints_ratios():
    proc = run(BENCH, "--steps", "1", "--settle", "0")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert re.match(r"a/b = \d+\.\d\d$", lines[-3])
    assert re.match(r"lrt/a = \d+\.\d\d$", lines[-2])
    assert re.match(r"c/a = \d+\.\d\d \(c as the tutorial runs, MXNet defaults: \d+\.\d\d\)$",
                    lines[-1])
    # (d) PyTorch is timed where it is installed (not a dependency), else says why not
    pytorch = [line for line in lines if line.startswith("(d) ")]
    assert pytorch and ("s/epoch" in pytorch[0] or "not measured (" in pytorch[0])
    if "s/epoch" in pytorch[0]:
        assert any(re.match(r"a/d = \d+\.\d\d, lrt/d = ", line) for line in lines)
        assert any(re.match(r"lrt against PyTorch's local reparametrization: \d+\.\d\d$", line)
                   for line in lines)
    assert any(re.match(r"  the same, --no-remove-switched-off: +\d+\.\d\d s/epoch \(removal "
                        r"costs x\d+\.\d\d\)$", line) for line in lines)
    assert any(re.match(r"      deterministic 2x1200, gluon Trainer Adam: +\d+\.\d\d s/epoch \(IVON "
                        r"costs x\d+\.\d\d\)$", line) for line in lines)
    assert any(re.match(r"    MC dropout 2x1200, the preset's prior: +\d+\.\d\d s/epoch \(x\d+\.\d\d "
                        r"Adam's\)$", line) for line in lines)
    peak = [line for line in lines if line.startswith("peak RSS")]
    assert peak and 100 < float(peak[0].split()[-2]) < 4096


def test_bench_train_refuses_bad_step_counts():
    for args in (["--steps", "0"], ["--steps", "3", "--rounds", "4"], ["--steps", "500"]):
        proc = run(BENCH, *args, timeout=120)
        assert proc.returncode == 2 and "must be between" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_bench_estimators_prints_a_variance_table_for_each_estimator():
    proc = run([PYTHON, os.path.join(ROOT, "bench", "bench_estimators.py")], "--draws", "3",
               "--examples", "1")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines()
            if line.startswith("| MLP") or line.startswith("| LeNet")]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        (network, estimator) for network in ("MLP 2x400", "LeNet")
        for estimator in ("sample", "lrt", "flipout", "sample / lrt", "sample / flipout")]
    assert all(float(value) > 0 for r in rows for value in r[2:])


def test_bench_predict_prints_both_operator_sets_and_their_ratio_under_each_load():
    bench = [PYTHON, os.path.join(ROOT, "bench", "bench_predict.py")]
    proc = run(bench, "--images", "300", "--draws", "2", "--rounds", "2", "--loads",
               "idle,busy1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert "C kernels: " in lines[0]
    if os.environ.get("GLUON_BBB_REQUIRE_NATIVE"):  # built where CI builds them
        assert "C kernels: built;" in lines[0]
    for load in ("idle", "busy1"):
        for network in ("LeNet", "2x400 MLP"):
            for operators in ("kernel", "mxnet"):
                assert any(re.match(r"%s +%s +%s +\d+\.\d{3} s \[\d+\.\d{3}, \d+\.\d{3}\]$"
                                    % (load, network, operators), line) for line in lines), lines
            assert any(re.match(r"%s +%s kernel/mxnet = \d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]$"
                                % (load, network), line) for line in lines), lines
    for args in (["--draws", "0"], ["--loads", "busy1,quota"]):
        proc = run(bench, *args, timeout=120)
        assert proc.returncode == 2 and ("must be between" in proc.stderr
                                         or "--loads takes" in proc.stderr), proc.stderr


def test_bench_shared_times_each_variant_under_each_load_against_its_idle_figure():
    proc = run([PYTHON, os.path.join(ROOT, "bench", "bench_shared.py")], "--steps", "1",
               "--samples", "1", "--loads", "idle,busy1,stream", "--settle", "0")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert re.match(r".*, (avx512f|avx2|no avx2), \d+ cores; 1 steps a sample, 1 samples; "
                    r"PyTorch: ", lines[0]), lines[0]
    rows = {tuple(line.split()[:2]): line for line in lines[2:] if len(line.split()) == 7}
    names = ["ours", "ours-fixed", "ours-1", "ours-ops", "ours-lenet", "lenet-1"]
    if "not measured" not in lines[0]:
        names += ["pytorch-sample", "pytorch-lenet"]
    for load in ("idle", "busy1", "stream"):
        for name in names:
            row = rows[(load, name)].split()
            median, low, high = float(row[2]), float(row[3][1:-1]), float(row[4][:-1])
            assert 0 < low <= median <= high
            assert float(row[5]) == 1.0 if load == "idle" else float(row[5]) > 0
        assert any(re.match(r"%s: ours/pytorch = \d+\.\d\d, .*ours/ours-ops = \d+\.\d\d$"
                            % load, line) or re.match(r"%s: ours/ours-ops = \d+\.\d\d$"
                                                      % load, line) for line in lines), lines
        one = [line for line in lines if line.startswith("%s: ours-1 x ours's idle = " % load)]
        assert len(one) == 1 and re.match(r".*lenet-1 x ours-lenet's idle = \d+\.\d\d$", one[0])


def test_bench_compress_prints_sizes_latency_and_narrower_networks(tmp_path):
    out = tmp_path / "run"
    proc = run(TRAIN, "--out", out, "--epochs", "1", "--train-size", "512",
               "--num-hidden-units", "20", "--test-samples", "0", "--seed", "0")
    assert proc.returncode == 0, proc.stderr
    proc = run([PYTHON, os.path.join(ROOT, "bench", "bench_compress.py")], out,
               "--proportions", "0.5", "0.9", "--precisions", "0", "1", "--choose", "0.5",
               "--samples", "2", "--narrower", "dense:10,relu,dense:10")
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if re.match(r"\| (50|90)% \| ", line)]
    assert len(rows) == 4
    assert re.search(r"NumPy, each convolution and max pooling computed apart \(compressed\."
                     r"SeparateOperators\): 1,000 images \d+\.\d ms \(apart/one product = "
                     r"\d+\.\d\d\)", proc.stdout)
    # 784x10 + 10x10 multiply-adds against 784x20 + 20x20 + 20x10
    narrower = re.search(r"NumPy, dense:10,relu,dense:10 \((\d+\.\d)% of the dense "
                         r"multiply-adds\): one image \d+\.\d+ ms \(MXNet/NumPy = \d+\.\d\d\); "
                         r"1,000 images \d+\.\d ms \(MXNet/NumPy = \d+\.\d\d\)", proc.stdout)
    assert narrower and float(narrower.group(1)) == pytest.approx(100 * 7940 / 16280, abs=0.05)
    # the dense MLP has no convolution for the C kernel: MXNet's operators alone
    assert "C kernel" not in proc.stdout
    # a convolution and its pooling: MXNet's operators, and net's default (the C kernel) apart
    out = tmp_path / "conv"
    proc = run(TRAIN, "--out", out, "--epochs", "1", "--train-size", "512", "--network",
               "conv:3:5,relu,pool:2,dense:10", "--test-samples", "0", "--seed", "0")
    assert proc.returncode == 0, proc.stderr
    proc = run([PYTHON, os.path.join(ROOT, "bench", "bench_compress.py")], out,
               "--proportions", "0.5", "--precisions", "0", "--choose", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"1,000 images NumPy \d+\.\d ms, MXNet dense \d+\.\d ms", proc.stdout)
    kernel = re.search(r"MXNet dense with each convolution and max pooling on the package's C "
                       r"kernel \(net's default\): 1,000 images \d+\.\d ms \(kernel/NumPy = "
                       r"\d+\.\d\d\)", proc.stdout)
    assert kernel or not os.environ.get("GLUON_BBB_REQUIRE_NATIVE"), proc.stdout


@pytest.mark.parametrize("script,args", [("bench_train.py", ["--data-dir"]),
                                         ("bench_predict.py", ["--data-dir"]),
                                         ("bench_estimators.py", ["--data-dir"]),
                                         ("bench_compress.py", [])])
def test_a_bench_without_its_data_says_so_on_one_line(tmp_path, script, args):
    """No MNIST in the directory named (or no run there): one line naming what is missing and
    status 2, not a traceback."""
    proc = run([PYTHON, os.path.join(ROOT, "bench", script)], *args, str(tmp_path), timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(script + ": error: ")
    assert ("MNIST not found" if args else "holds no run") in proc.stderr

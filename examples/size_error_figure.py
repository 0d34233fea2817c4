"""Size against test error for every prior: each run compressed at each proportion that
``compress`` searches (and the proportion its prior switched off, where it has one), the file's
size against the float32 network's and the test error of its mean network:

    python examples/size_error_figure.py docs/results/size-error-lenet.png \
        "scale mixture=runs/lenet-s0" "sparse VD=runs/lenet-svd-s0" \
        "group sparsity=runs/lenet-gs-s0:runs/lenet-gs-s0.gbbb"

Each LABEL=RUN names a run directory (its best.params) or a parameter file; ``:FILE`` after it
marks the file ``compress`` wrote for that run (its proportion chosen on validation images) with
a star. Means quantized at compress's default precision, no sigmas. A Markdown table of the
points is printed.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gluon_bbb  # noqa: E402,F401
import numpy as np  # noqa: E402

from gluon_bbb import load_mnist
from gluon_bbb.shipping import model_file as compressed
from gluon_bbb.shipping.writer import (SEARCH_PROPORTIONS, compress_parameters,  # noqa: E402
                                   error_rate, run_parameters)
from gluon_bbb.plots import plot_size_error  # noqa: E402
from gluon_bbb.analysis.snr import prior_rule_proportion  # noqa: E402
from gluon_bbb.learning.rundir import resolve_checkpoint  # noqa: E402

PRECISION = 1.0  # compress's default --precision


def curve(path, test):
    """[(proportion, bytes, times smaller, error %, network)] of one run."""
    run, checkpoint = resolve_checkpoint(path)
    config, network, mus, sigmas, ranking, state = run_parameters(run, checkpoint)
    rule = prior_rule_proportion(config, state)
    dense_bytes = 4 * sum(m.size for m in mus)
    rows = []
    for proportion in sorted(set((0.0,) + SEARCH_PROPORTIONS) | ({rule} if rule else set())):
        model, header, blobs, _ = compress_parameters(network, mus, sigmas, ranking, proportion,
                                                      PRECISION, 0, config.num_outputs)
        size = len(compressed.pack(dict(header, unsure_entropy_bits=0.0), blobs))
        rows.append((proportion, size, dense_bytes / size, 100 * error_rate(model, *test),
                     header["network"]))
    return rows


def main(argv):
    if len(argv) < 2 or not all("=" in item for item in argv[1:]):
        sys.stderr.write(__doc__)
        return 2
    out, curves, chosen = argv[0], {}, {}
    test = None
    for item in argv[1:]:
        label, path = item.split("=", 1)
        path, _, chosen_file = path.partition(":")
        if test is None:
            run, _ = resolve_checkpoint(path)
            data = load_mnist(run.recorded_data_dir())
            test = (data.test_images, data.test_labels)
        rows = curve(path, test)
        curves[label] = [(r[2], r[3]) for r in rows]
        print("\n%s (%s)\n\n| removed | bytes | times smaller | test error | network |\n"
              "|---:|---:|---:|---:|---|" % (label, path))
        for proportion, size, ratio, error, description in rows:
            print("| %.4g%% | %d | %.1f | %.2f%% | %s |" % (100 * proportion, size, ratio, error,
                                                         description))
        if chosen_file:
            model = compressed.read(chosen_file)
            ratio = 4 * model.header["source"]["parameters"] / os.path.getsize(chosen_file)
            chosen[label] = (ratio, 100 * error_rate(model, *test))
            print("\nchosen by compress: %s, %d bytes, %.1f times smaller, %.2f%% test error" % (
                chosen_file, os.path.getsize(chosen_file), ratio, chosen[label][1]))
    plot_size_error(curves, out, chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

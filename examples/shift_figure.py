"""One figure comparing models under dataset shift, from the reports ``gluon_bbb.commands.shift`` wrote:

    python examples/shift_figure.py rotation docs/results/shift-2x400-rotation.png \
        "Bayes by Backprop=runs/shift/report-bbb-s*" "deterministic=runs/shift/report-det-s*"

Each LABEL=PATTERN names the report directories of one kind of model (a shell pattern, quoted:
the runs of several seeds); the figure draws each kind's median over them with the range, and
the table printed below gives the medians at every severity in Markdown.
"""
import glob
import json
import os
import sys

import numpy as np

from gluon_bbb.plots import SHIFT_METRICS, plot_shift_comparison


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    shift, out, groups = argv[0], argv[1], {}
    for item in argv[2:]:
        label, pattern = item.split("=", 1)
        paths = sorted(glob.glob(os.path.join(pattern, "shift-%s.json" % shift)))
        if not paths:
            sys.stderr.write("shift_figure.py: no shift-%s.json under %s\n" % (shift, pattern))
            return 2
        groups[label] = []
        for path in paths:
            with open(path) as f:
                groups[label].append(json.load(f))
    plot_shift_comparison(groups, out)
    severities = [row["severity"] for row in next(iter(groups.values()))[0]["rows"]]
    for key, name in SHIFT_METRICS:
        print("\n%s, median (n)\n" % name)
        print("| model | " + " | ".join(str(s) for s in severities) + " |")
        print("|---" * (len(severities) + 1) + "|")
        for label, reports in groups.items():
            values = np.median([[row[key] for row in r["rows"]] for r in reports], axis=0)
            print("| %s (%d) | %s |" % (label, len(reports),
                                       " | ".join("%.4f" % v for v in values)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

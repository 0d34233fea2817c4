"""``gluon-bbb COMMAND [FLAGS]`` (and ``python -m gluon_bbb COMMAND``): one entry point for the
package's commands, each also ``python -m gluon_bbb.MODULE``. ``gluon-bbb COMMAND --help`` gives a
command's flags."""
import importlib
import sys

# command: (module, what it does)
COMMANDS = {
    "train": ("train_mnist", "train on MNIST-format data into a run directory"),
    "prune": ("prune", "prune a run by signal-to-noise ratio, the paper's Table 2"),
    "evaluate": ("evaluate", "the uncertainty report of a run"),
    "regression": ("regression", "a toy regression problem with aleatoric and epistemic "
                                 "uncertainty"),
    "sweep": ("sweep", "seeds x settings of training runs on Dask, with error bars"),
    "compress": ("compress", "a run as one compact file a NumPy-only program predicts with"),
    "shift": ("shift", "accuracy, calibration and entropy on rotated and translated MNIST, "
                       "for a run, a compressed file or an ensemble"),
    "predict": ("predict", "classify images with a compressed file or a run, and its "
                           "uncertainty"),
}
USAGE = "usage: gluon-bbb COMMAND [FLAGS]   (gluon-bbb COMMAND --help)\n\ncommands:\n%s\n" % (
    "\n".join("  %-11s %s" % (name, words) for name, (_, words) in COMMANDS.items()))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        sys.stderr.write(USAGE)
        return 2
    if argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.stderr.write("gluon-bbb: error: no command %r (one of %s)\n"
                         % (name, ", ".join(COMMANDS)))
        return 2
    module = importlib.import_module("gluon_bbb." + COMMANDS[name][0])
    return module.run(rest, prog="gluon-bbb " + name)


if __name__ == "__main__":
    sys.exit(main())

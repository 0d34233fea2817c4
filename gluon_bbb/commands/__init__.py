"""The commands, each a thin shell over the library with ``main(argv)`` and ``run()``:
``gluon-bbb COMMAND`` (``gluon_bbb.__main__``) and ``python -m gluon_bbb.commands.COMMAND`` run
them; ``cli.py`` holds what they share. A new command is a module here and a row of
``COMMANDS``."""

# command: (module, what it does)
COMMANDS = {
    "train": ("train", "train on MNIST-format data into a run directory"),
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

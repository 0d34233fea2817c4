#!/usr/bin/env python3
"""Train on MNIST from a checkout: the command ``gluon-bbb train``
(``gluon_bbb/commands/train.py``), whose flags are all here (``--help``).

    python train_mnist.py --ctx cpu --epochs 10 --out runs/default
    python train_mnist.py --out runs/default --epochs 20 --resume    # train 10 more epochs
"""
import sys

from gluon_bbb.commands.train import run

if __name__ == "__main__":
    sys.exit(run(prog="train_mnist.py"))

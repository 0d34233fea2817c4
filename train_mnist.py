#!/usr/bin/env python3
"""Train on MNIST from a checkout: the command ``python -m gluon_bbb.train_mnist`` (installed:
``gluon-bbb train``), whose flags are all here (``--help``).

    python train_mnist.py --ctx cpu --epochs 10 --out runs/default
    python train_mnist.py --out runs/default --epochs 20 --resume    # train 10 more epochs
"""
import sys

from gluon_bbb.train_mnist import run

if __name__ == "__main__":
    sys.exit(run(prog="train_mnist.py"))

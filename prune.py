#!/usr/bin/env python3
"""Prune a trained run by signal-to-noise ratio from a checkout: the command
``gluon-bbb prune`` (``gluon_bbb/commands/prune.py``).

    python prune.py runs/default
    python prune.py runs/default --proportions 0 0.5 0.95 --save-pruned 0.95
"""
import sys

from gluon_bbb.commands.prune import run

if __name__ == "__main__":
    sys.exit(run(prog="prune.py"))

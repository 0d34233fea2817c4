"""Builds the optional native kernels (gluon_bbb/native/_fused.c); metadata lives in setup.cfg.

The kernels are a plain C library loaded with ctypes (no Python API). Compiled with
-ffast-math for vectorized math but linked without it (see _fused.c). If no C compiler is
present the install still succeeds and gluon_bbb runs on MXNet operators alone.
"""
import sys

from setuptools import Extension, setup

# pip checks python_requires only after it has started building the dependencies: say it first.
if sys.version_info >= (3, 12):
    sys.exit("gluon-bbb needs Python 3.8 to 3.11 (this is %d.%d): it depends on mxnet==1.9.1, the "
             "last MXNet release, which imports distutils (gone in Python 3.12) and was never "
             "built or tested for 3.12. Create the virtual environment with python3.11."
             % sys.version_info[:2])

setup(ext_modules=[Extension(
    "gluon_bbb.native._fused", ["gluon_bbb/native/_fused.c"],
    extra_compile_args=["-O3", "-ffast-math", "-fopenmp"],
    extra_link_args=["-fopenmp", "-lm"],
    optional=True)])

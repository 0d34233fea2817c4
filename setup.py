"""Builds the optional native kernels (gluon_bbb/_fused.c); metadata lives in setup.cfg.

The kernels are a plain C library loaded with ctypes (no Python API). Compiled with
-ffast-math for vectorized math but linked without it (see _fused.c). If no C compiler is
present the install still succeeds and gluon_bbb runs on MXNet operators alone.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "gluon_bbb._fused", ["gluon_bbb/_fused.c"],
    extra_compile_args=["-O3", "-ffast-math", "-fopenmp"],
    extra_link_args=["-fopenmp", "-lm"],
    optional=True)])

"""Builds the optional native kernels (gluon_bbb/native/_fused.c) and MXNet operators
(gluon_bbb/native/_operators.cc); metadata lives in setup.cfg.

The kernels are a plain C library loaded with ctypes (no Python API); the operators a library
of MXNet's extension API, built against the lib_api.h and lib_api.cc that MXNet's wheel ships
(pyproject.toml has the build install MXNet for them). Both are compiled with -ffast-math for
vectorized math but linked without it (see _fused.c). If no compiler is present the install
still succeeds and gluon_bbb runs on MXNet operators alone.
"""
import importlib.util
import os
import sys

from setuptools import Extension, setup

# pip checks python_requires only after it has started building the dependencies: say it first.
if sys.version_info >= (3, 12):
    sys.exit("gluon-bbb needs Python 3.8 to 3.11 (this is %d.%d): it depends on mxnet==1.9.1, the "
             "last MXNet release, which imports distutils (gone in Python 3.12) and was never "
             "built or tested for 3.12. Create the virtual environment with python3.11."
             % sys.version_info[:2])

extensions = [Extension(
    "gluon_bbb.native._fused", ["gluon_bbb/native/_fused.c"],
    depends=["gluon_bbb/native/_conv_tiles.h"],
    extra_compile_args=["-O3", "-ffast-math", "-fopenmp"],
    extra_link_args=["-fopenmp", "-lm"],
    optional=True)]

# MXNet's extension API, from the wheel's own files (found without importing MXNet)
mxnet_spec = importlib.util.find_spec("mxnet")
if mxnet_spec is not None and mxnet_spec.origin:
    mxnet_dir = os.path.dirname(mxnet_spec.origin)
    lib_api = os.path.join(mxnet_dir, "src", "lib_api.cc")
    include = os.path.join(mxnet_dir, "include")
    if os.path.exists(lib_api) and os.path.exists(os.path.join(include, "mxnet", "lib_api.h")):
        extensions.append(Extension(
            "gluon_bbb.native._operators", ["gluon_bbb/native/_operators.cc", lib_api],
            include_dirs=[include, os.path.join(include, "mxnet")], language="c++",
            depends=["gluon_bbb/native/_conv_tiles.h"],
            extra_compile_args=["-O3", "-ffast-math", "-fopenmp", "-std=c++11"],
            extra_link_args=["-fopenmp"], optional=True))

setup(ext_modules=extensions)

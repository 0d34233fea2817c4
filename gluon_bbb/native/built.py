"""Where a shared object the install built beside its source is found and checked: the C
kernels' (``library.py``) and the MXNet operators' (``operators.py``). A leaf module."""
import ctypes
import glob
import os


def open_built(stem, source_names, version_function, abi_version, what):
    """``(ctypes library, None, False)`` for the shared object ``stem*.so`` beside this module,
    built from ``source_names`` (the files it is compiled from; not older than any) and
    answering ``abi_version`` to ``version_function``; else ``(None, why not, stale)``,
    ``stale`` True for a library that is there but does not match its sources."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = sorted(glob.glob(os.path.join(here, stem + "*.so")))
    if not paths:
        return None, ("the native %s are not built (reinstall with a compiler present: "
                      "pip install -e .)" % what), False
    for source_name in source_names:
        source = os.path.join(here, source_name)
        if os.path.exists(source) and os.path.getmtime(source) > os.path.getmtime(paths[0]):
            return None, ("%s is older than %s (rebuild: pip install -e .)"
                          % (paths[0], source_name)), True
    try:
        lib = ctypes.CDLL(paths[0])
        version = getattr(lib, version_function)() if hasattr(lib, version_function) else None
    except OSError as exc:
        return None, "cannot load %s: %s" % (paths[0], exc), False
    if version != abi_version:
        return None, ("%s has version %s, this gluon_bbb needs %d (rebuild: pip install -e .)"
                      % (paths[0], version, abi_version)), True
    return lib, None, False

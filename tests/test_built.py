"""native/built.py: a built library is opened only where it answers the ABI version asked for
and is not older than its sources; otherwise the reason, and whether it is stale."""
import os

from gluon_bbb.native import built, library


def open_kernels(abi_version):
    return built.open_built("_fused", ["_fused.c"], "bbb_abi_version", abi_version, "kernels")


def test_the_built_kernels_open_at_their_version(native_kernels):
    lib, why, stale = open_kernels(library.ABI_VERSION)
    assert lib is not None and why is None and not stale
    assert lib.bbb_abi_version() == library.ABI_VERSION


def test_another_version_or_no_library_is_said_and_nothing_opened(native_kernels):
    lib, why, stale = open_kernels(library.ABI_VERSION + 1)
    assert lib is None and stale
    assert why.endswith("has version %d, this gluon_bbb needs %d (rebuild: pip install -e .)"
                        % (library.ABI_VERSION, library.ABI_VERSION + 1))
    lib, why, stale = built.open_built("_no_such_library", [], "f", 1, "kernels")
    assert (lib, stale) == (None, False) and why.startswith("the native kernels are not built")


def test_a_library_older_than_its_source_is_stale(native_kernels, monkeypatch):
    real = os.path.getmtime
    monkeypatch.setattr(os.path, "getmtime", lambda path: real(path) + (
        10 ** 6 if path.endswith("_fused.c") else 0))
    lib, why, stale = open_kernels(library.ABI_VERSION)
    assert lib is None and stale and why.endswith(
        "is older than _fused.c (rebuild: pip install -e .)")

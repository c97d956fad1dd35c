"""Whether the scanner's native code runs (``scanner.native._native``): when it was built at install, unless
``BOOKIE_SCANNER_NATIVE=0`` asks for the Python forms (the reference) of all of it (the record walker, the ``.idx``
listing and reader, the ``locations`` DB's decode, the sorts, the lean metadata decode, the dump store's records),
which then run everywhere."""

from __future__ import annotations

import os

NATIVE_VARIABLE = "BOOKIE_SCANNER_NATIVE"  # "0": the Python forms

try:
    from scanner.native import _native
    _NOT_BUILT = None
except ImportError as error:  # installed without a C compiler: the extension was not built
    _native = None
    _NOT_BUILT = str(error)


def native_code():
    """The native module when it is to be used, else None."""
    if _native is None or os.environ.get(NATIVE_VARIABLE, "1").strip() == "0":
        return None
    return _native


def walker_in_use() -> str:
    """Which walker walks, and why, in a few words (``--version``, ``status``)."""
    if native_code() is not None:
        return f"native, CRC32C with {_native.CRC32C_INSTRUCTIONS}"
    if _native is not None:
        return f"python, forced by {NATIVE_VARIABLE}=0"
    return f"python, the native extension is not built ({_NOT_BUILT}): install a C compiler and reinstall"

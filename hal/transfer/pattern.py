"""The native writer of stand-in KV bytes (pattern.c): what a materialized replay's 'compute' writes.

Built like the copy engine (hal.transfer.segcopy.compile_shared). `fill` returns False where the
native build is not available, and the caller computes the same bytes with numpy.
"""

from __future__ import annotations

import ctypes
import subprocess
import threading
from pathlib import Path

import numpy as np

from hal.transfer.segcopy import compile_shared

_SOURCE = Path(__file__).with_name("pattern.c")
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_failed = False


def _native() -> ctypes.CDLL | None:
    global _lib, _failed
    with _lock:
        if _lib is None and not _failed:
            try:
                lib = ctypes.CDLL(str(compile_shared(_SOURCE, "pattern")))
                p = ctypes.c_void_p
                lib.hc_pattern.argtypes = [p, p, p, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint64]
                lib.hc_pattern.restype = None
                _lib = lib
            except (OSError, subprocess.SubprocessError):
                _failed = True
    return _lib


def fill(out: np.ndarray, tokens: np.ndarray, positions: np.ndarray, salt: int) -> bool:
    """Write row i of `out` ((n, item) uint8, C-contiguous) from tokens[i], positions[i] and
    `salt`; False (nothing written) where the native build is not available."""
    lib = _native()
    if lib is None:
        return False
    if out.dtype != np.uint8 or out.ndim != 2 or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out: expected a writable C-contiguous 2-D uint8 array, got {out.dtype} {out.shape}")
    t = np.ascontiguousarray(tokens, dtype=np.uint64)
    p = np.ascontiguousarray(positions, dtype=np.uint64)
    if len(t) != out.shape[0] or len(p) != out.shape[0]:
        raise ValueError(f"tokens/positions: {len(t)}/{len(p)} for {out.shape[0]} rows")
    lib.hc_pattern(out.ctypes.data, t.ctypes.data, p.ctypes.data, out.shape[0], out.shape[1], salt)
    return True

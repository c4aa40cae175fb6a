"""Copy a segment list between CPU-addressable buffers: the emulated DMA engine.

The native path (segcopy.c, built once with the system C compiler into a per-user cache)
does one memcpy per segment across threads, which keeps scattered page copies near memcpy
bandwidth. Without a compiler, a torch path gathers and scatters rows instead: correct,
about half the bandwidth, and reported as such by `engine()`.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from hal.transfer.plan import Segments
from hal.transfer.rows import flat_bytes, row_views

_SOURCE = Path(__file__).with_name("segcopy.c")
# Below this many bytes thread start-up costs more than it saves.
_PARALLEL_MIN_BYTES = 4 << 20


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hicache-harness"


def compile_shared(source: Path, stem: str, libs: tuple[str, ...] = ()) -> Path:
    """`source` built once with the system C compiler into the per-user cache (keyed by its
    content and that of the headers beside it it includes): the path of the shared library.
    OSError when there is no compiler."""
    text = source.read_bytes()
    key = hashlib.sha256(text)
    for header in re.findall(rb'^\s*#\s*include\s+"([^"]+)"', text, flags=re.M):
        key.update((source.parent / header.decode()).read_bytes())
    tag = key.hexdigest()[:16]
    out = _cache_dir() / f"{stem}-{tag}.so"
    if not out.exists():
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            raise OSError("no C compiler (cc/gcc) on PATH")
        out.parent.mkdir(parents=True, exist_ok=True)
        # Build beside the target and rename: concurrent test workers never see half a file.
        fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so")
        os.close(fd)
        try:
            subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", "-o", tmp, str(source), *libs],
                           check=True, capture_output=True, timeout=120)
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return out


class NativeLibrary:
    """A C library built and loaded on first use by `load`, once per process, or why this process
    takes the fallback path instead: `off_env` set to `fallback` asks for it, a failed build falls
    back with its reason."""

    def __init__(self, load: Callable[[], ctypes.CDLL], off_env: str, fallback: str):
        self._load, self._off_env, self._fallback = load, off_env, fallback
        self._lock = threading.Lock()
        self.lib: ctypes.CDLL | None = None
        self._why_not = ""

    def engine(self) -> str:
        """'native' or '<fallback> (<reason>)': which path this process takes."""
        with self._lock:
            if self.lib is None and not self._why_not:
                if os.environ.get(self._off_env) == self._fallback:
                    self._why_not = f"{self._off_env}={self._fallback}"
                else:
                    try:
                        self.lib = self._load()
                    except (OSError, subprocess.SubprocessError) as e:
                        self._why_not = f"native build failed: {e}"
        return "native" if self.lib is not None else f"{self._fallback} ({self._why_not})"


def _build() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(compile_shared(_SOURCE, "segcopy")))
    p = ctypes.c_void_p
    lib.hc_copy_segments.argtypes = [p, p, p, ctypes.c_int64, ctypes.c_int]
    lib.hc_copy_segments.restype = ctypes.c_int
    lib.hc_split_runs.argtypes = [p, ctypes.c_int64, ctypes.c_int, p, p]
    lib.hc_split_runs.restype = ctypes.c_int
    return lib


_native = NativeLibrary(_build, "HICACHE_SEGCOPY", "torch")


def engine() -> str:
    """'native' or 'torch (<reason>)': which copy path this process uses."""
    return _native.engine()


def copy_threads(total_bytes: int) -> int:
    """Threads a CPU copy of `total_bytes` is spread over: one below the size where starting
    threads costs more than it saves, else one per core this process may run on (at most 8)."""
    if total_bytes < _PARALLEL_MIN_BYTES:
        return 1
    return min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8)


def copy_segments(src_addr: np.ndarray, dst_addr: np.ndarray, nbytes: np.ndarray, threads: int | None = None) -> None:
    """memcpy(dst_addr[i], src_addr[i], nbytes[i]) for all i (addresses are absolute, uint64)."""
    n = len(nbytes)
    if n == 0:
        return
    if engine() != "native":
        raise RuntimeError("copy_segments needs the native engine; use copy_groups for the torch path")
    s = np.ascontiguousarray(src_addr, dtype=np.uint64)
    d = np.ascontiguousarray(dst_addr, dtype=np.uint64)
    b = np.ascontiguousarray(nbytes, dtype=np.uint64)
    if threads is None:
        threads = copy_threads(int(b.sum()))
    _native.lib.hc_copy_segments(s.ctypes.data, d.ctypes.data, b.ctypes.data, n, threads)


def _torch_group(src: torch.Tensor, dst: torch.Tensor, so: np.ndarray, do: np.ndarray, nb: np.ndarray) -> None:
    s_rows, d_rows, si, di = row_views(flat_bytes(src), flat_bytes(dst), Segments(so, do, nb))
    d_rows.index_copy_(0, torch.from_numpy(di), s_rows.index_select(0, torch.from_numpy(si)))


def copy_groups(groups) -> None:
    """Execute plan groups whose src/dst are CPU tensors (byte offsets from data_ptr)."""
    if engine() == "native":
        srcs, dsts, lens = [], [], []
        for g in groups:
            seg = g.segments
            srcs.append(seg.src_offsets.astype(np.uint64) + np.uint64(g.src.data_ptr()))
            dsts.append(seg.dst_offsets.astype(np.uint64) + np.uint64(g.dst.data_ptr()))
            lens.append(seg.nbytes)
        if srcs:
            copy_segments(np.concatenate(srcs), np.concatenate(dsts), np.concatenate(lens))
        return
    for g in groups:
        seg = g.segments
        if len(seg.nbytes):
            _torch_group(g.src, g.dst, seg.src_offsets, seg.dst_offsets, seg.nbytes)

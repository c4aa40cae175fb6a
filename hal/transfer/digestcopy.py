"""Copy segments and XXH3-128-digest the same bytes in one pass over memory (digestcopy.c).

A digest computed after a copy reads every byte from DRAM a second time; here each segment moves
in cache-sized chunks: the digest reads a chunk, and the copy takes it from cache while it is there. Segments without
a destination are digested in place, so a digest of a page's many runs is also one call. The
native path needs a C compiler and an xxHash library exporting the XXH3 streaming calls (the Python
xxhash module's own, else the system's). Objects are spread over threads by bytes, as the plain
copy engine spreads segments (hal.transfer.segcopy): an object's digest is one stream, so each
object stays on one thread. Without a compiler or xxHash `engine()` says why and the same results come
from a copy, then Python's xxhash (the digest is the same, bit for bit).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

import numpy as np
import xxhash

from hal.transfer.segcopy import NativeLibrary, compile_shared, copy_threads

_SOURCE = Path(__file__).with_name("digestcopy.c")
CHUNK_BYTES = 64 << 10  # a chunk stays in one core's L2 between its copy and its digest


def _libraries() -> list[str]:
    """xxHash builds to bind, best first: the one inside the Python xxhash module (the digest
    integrity checks use, x86-dispatched), then the system's."""
    from xxhash import _xxhash

    return [_xxhash.__file__, ctypes.util.find_library("xxhash") or "libxxhash.so.0"]


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(compile_shared(_SOURCE, "digestcopy", ("-ldl",))))
    lib.hc_dc_init.argtypes = [ctypes.c_char_p]
    if not any(lib.hc_dc_init(path.encode()) == 0 for path in _libraries()):
        raise OSError("no loadable xxHash library with the XXH3 streaming API")
    p = ctypes.c_void_p
    lib.hc_copy_digest.argtypes = [p, p, p, p, p, p, ctypes.c_int64, p, p, p, ctypes.c_uint64, ctypes.c_int, p]
    lib.hc_copy_digest.restype = ctypes.c_int
    return lib


_native = NativeLibrary(_load, "HICACHE_DIGESTCOPY", "python")


def engine() -> str:
    """'native' or 'python (<reason>)': which path `copy_digest` takes in this process."""
    return _native.engine()


def row_segments(arrays) -> tuple[np.ndarray, np.ndarray]:
    """(addresses, byte counts) of the contiguous rows of `arrays` (1-D, or 2-D uint8 numpy arrays
    whose rows are contiguous runs at a stride), in order."""
    addrs, lens = [], []
    for a in arrays:
        if a.ndim == 1 or a.shape[0] == 1 or a.strides[0] == a.shape[1]:
            if not a.flags.c_contiguous:
                raise ValueError("arrays: a 1-D array must be contiguous")
            addrs.append(np.array([a.__array_interface__["data"][0]], dtype=np.uint64))
            lens.append(np.array([a.nbytes], dtype=np.uint64))
            continue
        if a.ndim != 2 or a.strides[1] != 1:
            raise ValueError(f"arrays: expected rows of contiguous bytes, got shape {a.shape} strides {a.strides}")
        base = a.__array_interface__["data"][0]
        addrs.append(base + np.arange(a.shape[0], dtype=np.uint64) * np.uint64(a.strides[0]))
        lens.append(np.full(a.shape[0], a.shape[1], dtype=np.uint64))
    if not addrs:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    return np.concatenate(addrs), np.concatenate(lens)


def copy_digest(objects, chunk: int = CHUNK_BYTES, threads: int | None = None) -> list[bytes]:
    """For each object (prefix bytes, source addresses, destination addresses or None, byte
    counts), copy every segment to its destination (none: digest in place) and return the
    XXH3-128 digest (16 bytes, canonical) of the prefix followed by the segments in order.
    `threads`: at most this many (default: the plain copy engine's rule for these bytes)."""
    objects = list(objects)
    if not objects:
        return []
    if engine() != "native":
        return [_python(*obj) for obj in objects]
    src = np.concatenate([np.asarray(o[1], dtype=np.uint64) for o in objects])
    dst = np.concatenate([np.zeros(len(o[1]), np.uint64) if o[2] is None else np.asarray(o[2], dtype=np.uint64)
                          for o in objects])
    lens = np.ascontiguousarray(np.concatenate([np.asarray(o[3], dtype=np.uint64) for o in objects]))
    src, dst = np.ascontiguousarray(src), np.ascontiguousarray(dst)
    if not len(src) == len(dst) == len(lens):
        raise ValueError("objects: sources, destinations and byte counts differ in length")
    counts = np.array([len(o[1]) for o in objects], dtype=np.int64)
    seg_at = np.ascontiguousarray(np.cumsum(counts) - counts, dtype=np.uint64)
    upto = np.concatenate([np.zeros(1, np.uint64), np.cumsum(lens, dtype=np.uint64)])
    obj_bytes = np.ascontiguousarray(upto[seg_at + counts.astype(np.uint64)] - upto[seg_at], dtype=np.uint64)
    prefix = b"".join(o[0] for o in objects)
    plen = np.array([len(o[0]) for o in objects], dtype=np.uint64)
    pat = np.ascontiguousarray(np.cumsum(plen) - plen, dtype=np.uint64)
    pbuf = np.frombuffer(prefix or b"\0", dtype=np.uint8)
    out = np.empty(16 * len(objects), dtype=np.uint8)
    if threads is None:
        threads = copy_threads(int(obj_bytes.sum()))
    rc = _native.lib.hc_copy_digest(src.ctypes.data, dst.ctypes.data, lens.ctypes.data, counts.ctypes.data,
                                    seg_at.ctypes.data, obj_bytes.ctypes.data, len(objects), pbuf.ctypes.data,
                                    pat.ctypes.data, plen.ctypes.data, chunk, max(1, int(threads)), out.ctypes.data)
    if rc < 0:
        raise MemoryError(f"hc_copy_digest failed (code {rc})")
    raw = out.tobytes()
    return [raw[16 * k : 16 * k + 16] for k in range(len(objects))]


def _python(prefix: bytes, src, dst, lens) -> bytes:
    h = xxhash.xxh3_128(prefix)
    for i, (s, n) in enumerate(zip(np.asarray(src, np.uint64).tolist(), np.asarray(lens, np.uint64).tolist(),
                                   strict=True)):
        if dst is not None:
            ctypes.memmove(int(dst[i]), s, n)
            s = int(dst[i])
        h.update(memoryview((ctypes.c_char * n).from_address(s)).cast("B") if n else b"")
    return h.digest()


def paired(src_addrs, src_lens, dst_addrs, dst_lens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sources, destinations, byte counts) copying the byte stream laid out as `src` segments
    into the same stream laid out as `dst` segments: each segment is cut where the other side's
    segment boundaries fall. ValueError when the two streams differ in length."""
    src_lens, dst_lens = np.asarray(src_lens, np.uint64), np.asarray(dst_lens, np.uint64)
    cs, cd = np.cumsum(src_lens, dtype=np.uint64), np.cumsum(dst_lens, dtype=np.uint64)
    total = int(cs[-1]) if len(cs) else 0
    if total != (int(cd[-1]) if len(cd) else 0):
        raise ValueError(f"segments: {total} source bytes for {int(cd[-1]) if len(cd) else 0} destination bytes")
    ends = np.union1d(cs, cd)
    ends = ends[ends > 0]
    starts = np.concatenate([np.zeros(1, np.uint64), ends[:-1]]).astype(np.uint64)
    si = np.searchsorted(cs, starts, side="right")
    di = np.searchsorted(cd, starts, side="right")
    src = np.asarray(src_addrs, np.uint64)[si] + (starts - (cs[si] - src_lens[si]))
    dst = np.asarray(dst_addrs, np.uint64)[di] + (starts - (cd[di] - dst_lens[di]))
    return src, dst, (ends - starts).astype(np.uint64)

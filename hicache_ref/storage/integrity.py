"""Integrity of stored objects: the 48-byte trailer each object ends with and the digests it may name.

The digest covers the key and the payload, so damage and an object under the wrong key are both
caught. The reader uses the digest the trailer names, so clients with different settings share a
store. `xxh3` (the default) catches accidental damage at a fraction of SHA-256's cost; `sha256` is
there for a deployment that wants a cryptographic digest (throughput: BENCHMARKS.md, bench l3).
"""

from __future__ import annotations

import hashlib
import struct

import xxhash

TRAILER = struct.Struct("<4s4sQ32s")
TRAILER_BYTES = TRAILER.size  # 48
MAGIC = b"HCKV"
DIGESTS = {"xxh3": (b"xx3\0", xxhash.xxh3_128), "sha256": (b"s256", hashlib.sha256)}
_BY_ID = {ident: factory for ident, factory in DIGESTS.values()}
DEFAULT_DIGEST = "xxh3"


def check_digest(name: str, what: str = "digest") -> str:
    if name not in DIGESTS:
        raise ValueError(f"{what}: {name!r} is not one of {', '.join(DIGESTS)}")
    return name


def _arrays(segments):
    """numpy views of `segments`: 1-D uint8 torch tensors or numpy arrays, or 2-D uint8 arrays of runs."""
    return [s.numpy() if hasattr(s, "numpy") else s for s in segments]


def _digest(factory, key: str, arrays) -> bytes:
    h = factory(key.encode())
    h.update(b"\0")
    for a in arrays:
        if a.flags.c_contiguous:
            h.update(a)
        else:  # rows of runs at a stride
            for row in a:
                h.update(row)
    return h.digest().ljust(32, b"\0")


def trailer(name: str, key: str, segments) -> bytes:
    """The trailer for `segments` (the payload in order: 1-D uint8 tensors or arrays, or 2-D uint8
    arrays whose rows are contiguous runs) stored under `key`."""
    ident, factory = DIGESTS[name]
    arrays = _arrays(segments)
    return TRAILER.pack(MAGIC, ident, sum(a.nbytes for a in arrays), _digest(factory, key, arrays))


def verified(key: str, payload_segments, tail: bytes, size: int, payload: int) -> bool:
    """Whether an object of `size` bytes read as `payload_segments` + `tail` is intact for `key`."""
    if size != payload + TRAILER_BYTES or len(tail) != TRAILER_BYTES:
        return False
    magic, ident, length, want = TRAILER.unpack(tail)
    factory = _BY_ID.get(ident)
    return magic == MAGIC and factory is not None and length == payload and \
        _digest(factory, key, _arrays(payload_segments)) == want

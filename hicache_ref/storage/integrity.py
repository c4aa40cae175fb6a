"""Integrity of stored objects: the 48-byte trailer each object ends with and the digests it may name.

The digest covers the key and the payload, so damage and an object under the wrong key are both
caught. The reader uses the digest the trailer names, so clients with different settings share a
store. `xxh3` (the default) catches accidental damage at a fraction of SHA-256's cost; `sha256` is
there for a deployment that wants a cryptographic digest (throughput: BENCHMARKS.md, bench l3).
XXH3 runs in hal.transfer's copy engine where it is native: a page's runs in one call, and where the
harness copies a page anyway (L3 write staging) the digest rides on that copy (`copy_trailers`).
"""

from __future__ import annotations

import hashlib
import struct

import xxhash

from hal.transfer import digestcopy

TRAILER = struct.Struct("<4s4sQ32s")
TRAILER_BYTES = TRAILER.size  # 48
MAGIC = b"HCKV"
DIGESTS = {"xxh3": (b"xx3\0", xxhash.xxh3_128), "sha256": (b"s256", hashlib.sha256)}
_BY_ID = {ident: name for name, (ident, _) in DIGESTS.items()}
DEFAULT_DIGEST = "xxh3"


def check_digest(name: str, what: str = "digest") -> str:
    if name not in DIGESTS:
        raise ValueError(f"{what}: {name!r} is not one of {', '.join(DIGESTS)}")
    return name


def _arrays(segments):
    """numpy views of `segments`: 1-D uint8 torch tensors or numpy arrays, or 2-D uint8 arrays of runs."""
    return [s.numpy() if hasattr(s, "numpy") else s for s in segments]


def _prefix(key: str) -> bytes:
    return key.encode() + b"\0"


def _digest(name: str, key: str, arrays) -> bytes:
    if name == "xxh3" and digestcopy.engine() == "native":  # every run in one call, same digest
        try:
            [d] = digestcopy.copy_digest([(_prefix(key), *_in_place(arrays))])
            return d.ljust(32, b"\0")
        except ValueError:  # not rows of contiguous bytes: digest them below
            pass
    h = DIGESTS[name][1](key.encode())
    h.update(b"\0")
    for a in arrays:
        if a.flags.c_contiguous:
            h.update(a)
        else:  # rows of runs at a stride
            for row in a:
                h.update(row)
    return h.digest().ljust(32, b"\0")


def _in_place(arrays):
    addrs, lens = digestcopy.row_segments(arrays)
    return addrs, None, lens


def copy_trailers(name: str, objects) -> list[bytes] | None:
    """Copy each object's payload and return its trailer, computed in the same pass over memory
    (hal.transfer.digestcopy); objects: (key, source addresses, destination addresses, byte
    counts), the payload being the segments in order. None (nothing copied) where the digest
    cannot be fused (`name` is not xxh3): copy and seal separately then."""
    if name != "xxh3":
        return None
    objects = list(objects)
    digests = digestcopy.copy_digest([(_prefix(key), src, dst, lens) for key, src, dst, lens in objects])
    ident = DIGESTS[name][0]
    return [TRAILER.pack(MAGIC, ident, int(sum(int(n) for n in obj[3])), d.ljust(32, b"\0"))
            for obj, d in zip(objects, digests, strict=True)]


def trailer(name: str, key: str, segments) -> bytes:
    """The trailer for `segments` (the payload in order: 1-D uint8 tensors or arrays, or 2-D uint8
    arrays whose rows are contiguous runs) stored under `key`."""
    return trailers(name, [(key, segments)])[0]


def trailers(name: str, objects) -> list[bytes]:
    """`trailer` of each (key, segments) in `objects`; with xxh3 native, all in one call of the
    copy engine, which spreads the objects over the cores."""
    objects = [(key, _arrays(segs)) for key, segs in objects]
    digests = None
    if name == "xxh3" and digestcopy.engine() == "native" and objects:
        try:
            runs = [(_prefix(key), *_in_place(arrays)) for key, arrays in objects]
        except ValueError:  # not rows of contiguous bytes: one at a time below
            runs = None
        if runs is not None:
            digests = [d.ljust(32, b"\0") for d in digestcopy.copy_digest(runs)]
    if digests is None:
        digests = [_digest(name, key, arrays) for key, arrays in objects]
    return [TRAILER.pack(MAGIC, DIGESTS[name][0], sum(a.nbytes for a in arrays), d)
            for (_, arrays), d in zip(objects, digests, strict=True)]


def fuses(tail) -> bool:
    """Whether the object whose trailer is `tail` (its last 48 bytes) can be checked by a digest
    computed while its payload is copied (`copy_digest`): the trailer names xxh3."""
    return len(tail) == TRAILER_BYTES and bytes(tail[4:8]) == DIGESTS["xxh3"][0]


def copy_digest(objects) -> list[bytes]:
    """Copy each object's payload as `copy_trailers` does and return, per object, the digest to pass
    `verified` as `copied` (XXH3-128 of key, NUL, payload, computed in the copy's pass)."""
    objects = list(objects)
    return digestcopy.copy_digest([(_prefix(key), src, dst, lens) for key, src, dst, lens in objects])


def verified(key: str, payload_segments, tail: bytes, size: int, payload: int, copied: bytes | None = None) -> bool:
    """Whether an object of `size` bytes read as `payload_segments` + `tail` is intact for `key`.
    `copied`: the payload's `copy_digest`, computed as it was copied into `payload_segments` (then
    they are not read again); it stands in for the digest only where the trailer names xxh3."""
    if size != payload + TRAILER_BYTES or len(tail) != TRAILER_BYTES:
        return False
    magic, ident, length, want = TRAILER.unpack(tail)
    name = _BY_ID.get(ident)
    if magic != MAGIC or name is None or length != payload:
        return False
    if copied is not None and name == "xxh3":
        return copied.ljust(32, b"\0") == want
    return _digest(name, key, _arrays(payload_segments)) == want

"""Page hash chain: one SHA-256 digest per full page, chained from the root.

Chaining makes a page's hash name its content and everything before it, its place in the prefix
tree. The bytes hashed are the ones upstream's storage keys hash, so hex keys agree with an SGLang
L3 store; `hash64` is a short form for in-memory keys such as the ghost list.
"""

from __future__ import annotations

import hashlib

import numpy as np

_U32_MAX = 2**32 - 1
_U4 = np.dtype("<u4")


def token_bytes(tokens, name: str = "tokens") -> bytes:
    """Token ids as 4-byte little-endian unsigned, concatenated; ValueError if one does not fit."""
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return b""
    if arr.dtype == _U4:  # the common case (traces, the tree's own keys): nothing to check
        return arr.tobytes()
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: token ids must be integers, got dtype {arr.dtype}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > _U32_MAX:
        raise ValueError(f"{name}: token ids must be in [0, 2**32), got range [{lo}, {hi}]")
    return arr.astype(_U4).tobytes()


def chain_hashes(data: bytes, page_bytes: int, prior: bytes | None = None) -> list[bytes]:
    """Digests of each whole `page_bytes` slice of `data`, chained from `prior`."""
    out = []
    h = prior or b""
    sha = hashlib.sha256
    for off in range(0, len(data) - page_bytes + 1, page_bytes):
        h = sha(h + data[off : off + page_bytes]).digest()
        out.append(h)
    return out


def page_hashes(tokens, page_size: int, prior: bytes | None = None) -> list[bytes]:
    """SHA-256 digests (32 bytes each) of every whole page of `tokens`, chained from `prior`."""
    if not isinstance(page_size, int) or page_size <= 0:
        raise ValueError(f"page_size: must be a positive integer, got {page_size!r}")
    if prior is not None and len(prior) != 32:
        raise ValueError(f"prior: expected a 32-byte SHA-256 digest, got {len(prior)} bytes")
    return chain_hashes(token_bytes(tokens), 4 * page_size, prior)


def hash_hex(h: bytes) -> str:
    return h.hex()


def hash64(h: bytes) -> int:
    """First 64 bits of a digest, big-endian: hash64(h) == int(hash_hex(h)[:16], 16)."""
    return int.from_bytes(h[:8], "big")

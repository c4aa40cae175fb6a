"""Page hash chain: one SHA-256 digest per full page, chained from the root.

hash(page i) = SHA-256(hash(page i-1) || token ids of page i), the prior digest as its
32 raw bytes (nothing before page 0) and each token id as 4-byte little-endian unsigned.
Chaining makes a page hash name both the page's content and everything before it, i.e.
its position in the prefix tree. This is the same byte sequence upstream's storage keys
hash, so hex keys agree with an SGLang L3 store.

- `hash_hex(h)`: the 64-character hex string, for storage keys.
- `hash64(h)`: the first 8 digest bytes read as a big-endian unsigned integer (so the
  integer's hex is the first 16 hex characters of `hash_hex`), for in-memory keys such as
  the ghost list.

Only whole pages are hashed; a trailing partial page has no hash. Token ids must fit in
4 bytes unsigned (ValueError otherwise). The bytes are built once per call with numpy,
so the per-page cost is one hashlib call.
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

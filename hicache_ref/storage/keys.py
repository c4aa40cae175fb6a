"""Storage keys: the page hash chain, plus (harness scheme) a short tag of what the bytes mean.

The hash is byte-identical to upstream's storage hash strings, and `namespace_seed` is the root
upstream chains a namespaced request from. The harness tag names the KV geometry, and a model and
shard when given, so different geometries never read each other's pages; upstream's keys are the
bare hash, named further by the backend (hicache_ref.storage.objects).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from hal.transfer.layouts import KVGeometry
from hicache_ref.core.hashing import hash_hex

_DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8"}
_SHARD_RE = re.compile(r"^[A-Za-z0-9.-]{1,32}$")


@dataclass(frozen=True)
class StorageIdentity:
    """What the stored pages belong to: the geometry, optionally a model name and a shard label."""

    geom: KVGeometry
    model: str = ""
    shard: str = ""

    def __post_init__(self):
        if not isinstance(self.geom, KVGeometry):
            raise ValueError(f"geom: expected a KVGeometry, got {type(self.geom).__name__}")
        if not isinstance(self.model, str):
            raise ValueError(f"model: expected a string, got {type(self.model).__name__}")
        if not isinstance(self.shard, str) or (self.shard and not _SHARD_RE.match(self.shard)):
            raise ValueError(f"shard: expected up to 32 of [A-Za-z0-9.-], got {self.shard!r}")

    @property
    def tag(self) -> str:
        """e.g. 'mla78x1x576-bf16-p64', plus '-m<8 hex of the model name>' and '-<shard>' when set."""
        g = self.geom
        dtype = str(g.dtype).removeprefix("torch.")
        tag = f"{g.attention}{g.layers}x{g.heads}x{g.head_dim}-{_DTYPE_NAMES.get(dtype, dtype)}-p{g.page_size}"
        if self.model:
            tag += "-m" + hashlib.sha256(self.model.encode()).hexdigest()[:8]
        if self.shard:
            tag += "-" + self.shard
        return tag

    def key(self, page_hash: bytes) -> str:
        """The storage key of one page given its 32-byte chained hash."""
        if not isinstance(page_hash, bytes | bytearray) or len(page_hash) != 32:
            raise ValueError(f"page_hash: expected a 32-byte digest, got {page_hash!r:.40}")
        return f"{self.tag}_{hash_hex(bytes(page_hash))}"

    def keys(self, page_hashes) -> list[str]:
        """Keys of a run of pages, in order (e.g. `hicache_ref.core.hashing.page_hashes(tokens, ps)`)."""
        return [self.key(h) for h in page_hashes]


# ---- upstream SGLang's keys ----------------------------------------------------------------------
_NAMESPACE_TAG = b"sglang-cache-namespace-v1"


def namespace_seed(extra_key: str | None = None, cache_salt: str | None = None) -> bytes | None:
    """The digest upstream SGLang 0.5.23 starts a request's storage hash chain from when the request
    has an extra_key (e.g. a LoRA id) or a cache_salt; None (an unseeded chain) when it has neither.

    SHA-256 over a fixed tag, then for each of the two, in order: 0x00 when absent, else 0x01, its
    UTF-8 length as 8 little-endian bytes and the bytes (so absent, empty and split values differ)."""
    if extra_key is None and cache_salt is None:
        return None
    h = hashlib.sha256(_NAMESPACE_TAG)
    for name, part in (("extra_key", extra_key), ("cache_salt", cache_salt)):
        if part is None:
            h.update(b"\x00")
            continue
        if not isinstance(part, str):
            raise ValueError(f"{name}: expected a string or None, got {type(part).__name__}")
        data = part.encode("utf-8")
        h.update(b"\x01" + len(data).to_bytes(8, "little") + data)
    return h.digest()


def upstream_keys(page_hashes) -> list[str]:
    """Upstream's page keys: the chained hash as 64 lowercase hex characters (the backend adds its
    own prefix and suffixes: hicache_ref.storage.objects)."""
    page_hashes = list(page_hashes)
    if set(map(type, page_hashes)) <= {bytes} and set(map(len, page_hashes)) <= {32}:  # the tree's own digests
        return list(map(bytes.hex, page_hashes))  # == hash_hex per page, without a call per page
    out = []
    for h in page_hashes:
        if not isinstance(h, bytes | bytearray) or len(h) != 32:
            raise ValueError(f"page_hash: expected a 32-byte digest, got {h!r:.40}")
        out.append(hash_hex(bytes(h)))
    return out

"""How the radix tree spells a page of tokens as bytes: its keys, compared with memcmp.

Two spellings, "tokens" (every id) and "runs" (a page's first id), give the same tree.
"runs" makes trace replay cheaper: pages of a trace request are runs of consecutive ids.
Page hashes are always over the token ids (`token_bytes`).
The rules of each spelling: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import numpy as np

from hicache_ref.core.hashing import token_bytes

PAGE_KEYS = ("tokens", "runs")


class TokenKeys:
    """A page spelled by all its token ids."""

    name = "tokens"

    def __init__(self, page_size: int):
        self.page_size = page_size
        self.page_bytes = 4 * page_size  # key bytes per page
        self.hash_page_bytes = 4 * page_size  # token bytes per page, as hashed

    def encode(self, tokens) -> bytes:
        """Keys of the whole pages of `tokens` (any 1-D sequence of token ids)."""
        data = token_bytes(tokens)
        return data[: len(data) // self.page_bytes * self.page_bytes]

    def token_bytes(self, key: bytes) -> bytes:
        """The token ids (uint32 LE bytes) of the pages spelled by `key`."""
        return key


class RunKeys:
    """A page spelled by its first token id; every page must be a run of consecutive ids."""

    name = "runs"

    def __init__(self, page_size: int):
        self.page_size = page_size
        self.page_bytes = 4
        self.hash_page_bytes = 4 * page_size
        self._offsets = np.arange(page_size, dtype=np.uint32)

    def encode(self, tokens) -> bytes:
        """Keys of the whole pages of `tokens`: a hicache_ref.core.block_tokens.TraceTokens (spelled from its
        hash ids), or token ids whose every whole page is a run (checked)."""
        ps = self.page_size
        spelled = getattr(tokens, "run_keys", None)  # TraceTokens: from its hash ids
        keys = spelled(ps) if spelled is not None else None
        if keys is not None:
            return keys
        arr = np.frombuffer(token_bytes(tokens), dtype="<u4")  # checks the ids as the hash order does
        grid = arr[: len(arr) // ps * ps].reshape(-1, ps)
        first = grid[:, 0]
        bad = np.flatnonzero((grid != first[:, None] + self._offsets).any(axis=1))
        if len(bad):
            raise ValueError(f"tokens: page {int(bad[0])} is not a run of consecutive token ids; a tree with "
                             "page_keys='runs' spells a page by its first id (use page_keys='tokens')")
        return first.tobytes()

    def token_bytes(self, key: bytes) -> bytes:
        first = np.frombuffer(key, dtype="<u4")
        return (first[:, None] + self._offsets).astype("<u4").tobytes()


def make_page_keys(name: str, page_size: int) -> TokenKeys | RunKeys:
    """The spelling called `name` (PAGE_KEYS) for pages of `page_size` tokens."""
    if name == "tokens":
        return TokenKeys(page_size)
    if name == "runs":
        return RunKeys(page_size)
    raise ValueError(f"page_keys: {name!r} is not one of {', '.join(PAGE_KEYS)}")

"""Token ids made of 512-token hash blocks, as trace requests are, and their radix-tree "runs" keys.

A hash id h names the block of tokens h*512 .. h*512+511; a request's token ids are its blocks
concatenated and cut to its length. TraceTokens holds a request that way and builds the array only
when asked, so the radix tree can key most of a replay from the hash ids alone. It lives in the
core because the cache recognizes it; hicache_ref.sim.trace.reader reads the trace files.
"""

from __future__ import annotations

import numpy as np

BLOCK_TOKENS = 512
_OFFSETS = np.arange(BLOCK_TOKENS, dtype=np.uint32)


def request_tokens(hash_ids, input_length: int) -> np.ndarray:
    """Token ids of a request: each hash id h -> h*512 + [0, 512), concatenated, cut to input_length."""
    ids = np.asarray(hash_ids, dtype=np.uint32)
    return (ids[:, None] * np.uint32(BLOCK_TOKENS) + _OFFSETS).reshape(-1)[:input_length]


class TraceTokens:
    """A trace request's token ids (request_tokens), built only if someone needs them as an array.

    The radix tree with page_keys="runs" spells each whole page by its first id
    (`run_keys`), taken from the hash ids directly: most of a whole-trace replay never
    builds a token array at all. Slices from the start stay TraceTokens; any other slice,
    `np.asarray(...)` and `array()` give the uint32 token array.
    """

    __slots__ = ("_array", "_keys", "hash_ids", "length")

    def __init__(self, hash_ids, input_length: int, _keys: dict | None = None):
        self.hash_ids, self.length = hash_ids, int(input_length)
        self._array: np.ndarray | None = None
        self._keys = {} if _keys is None else _keys  # page_size -> run_keys of the whole request, shared by prefixes

    def __len__(self) -> int:
        return self.length

    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = request_tokens(self.hash_ids, self.length)
        return self._array

    def __array__(self, dtype=None, copy=None):
        arr = self.array()
        return arr if dtype is None else arr.astype(dtype)

    def __getitem__(self, key):
        if isinstance(key, slice) and key.start in (None, 0) and key.step in (None, 1):
            stop = self.length if key.stop is None else key.stop
            if stop >= 0:
                return TraceTokens(self.hash_ids, min(stop, self.length), self._keys)
        return self.array()[key]

    def run_keys(self, page_size: int) -> bytes | None:
        """The first token id of each whole page as uint32 little-endian bytes (the radix tree's
        "runs" keys), or None when pages would straddle hash blocks (page_size does not divide
        BLOCK_TOKENS) and are not runs. Made once per request, for all its hash blocks, and
        sliced for each prefix (a request is matched, then inserted as a prefix)."""
        if BLOCK_TOKENS % page_size:
            return None
        whole = self._keys.get(page_size)
        if whole is None:
            whole = self._keys[page_size] = _block_run_keys(np.asarray(self.hash_ids, dtype=np.uint32), page_size)
        return whole[: self.length // page_size * 4]


def _block_run_keys(ids: np.ndarray, page_size: int) -> bytes:
    """The first token id of every page of every hash block in `ids` (uint32), as <u4 bytes."""
    starts = np.arange(0, BLOCK_TOKENS, page_size, dtype=np.uint32)
    return (ids[:, None] * np.uint32(BLOCK_TOKENS) + starts).astype("<u4").tobytes()


def trace_tokens(requests, page_size: int) -> list[TraceTokens]:
    """TraceTokens of every request (anything with hash_ids and input_length), their run keys for `page_size` (where pages are runs)
    computed for the whole trace in one pass: per request that was most of a replay's key cost."""
    out = [TraceTokens(r.hash_ids, r.input_length) for r in requests]
    if BLOCK_TOKENS % page_size or not requests:
        return out
    whole = _block_run_keys(np.fromiter((h for r in requests for h in r.hash_ids), dtype=np.uint32), page_size)
    step = 4 * (BLOCK_TOKENS // page_size)  # key bytes per hash block
    at = 0
    for t in out:
        end = at + len(t.hash_ids) * step
        t._keys[page_size] = whole[at:end]
        at = end
    return out

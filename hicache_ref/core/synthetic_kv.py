"""Synthetic KV of a materialized HiCache: what "compute" writes, and the bit-for-bit check of hits.

The bytes are a function of token, position, part, layer and offset, so a misplaced byte shows up.
`KVWriter` moves them only through hal on the backend's default stream, as a model's compute would,
and waits for each call's event, so a write lands before the backup that reads it.
"""

from __future__ import annotations

import numpy as np
import torch

from hal.transfer import kvcacheio, pattern


def synthetic_kv(tokens: np.ndarray, positions: np.ndarray, part: int, layer: int, item_size: int) -> np.ndarray:
    """Deterministic KV bytes (n, item_size) for tokens at positions: what 'compute' writes."""
    salt = (layer * 2 + part + 1) * 0x165667B19E3779F9 & 0xFFFFFFFFFFFFFFFF
    out = np.empty((len(tokens), item_size), dtype=np.uint8)
    if pattern.fill(out, tokens, positions, salt):  # the same bytes in one pass (hal.transfer.pattern)
        return out
    mix = tokens.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ positions.astype(np.uint64) * np.uint64(
        0xC2B2AE3D27D4EB4F)
    mix ^= np.uint64(salt)
    col = np.arange(item_size, dtype=np.uint64) * np.uint64(0xD6E8FEB86659FD93)
    x = mix[:, None] ^ col[None, :]
    x ^= x >> np.uint64(29)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    return (x >> np.uint64(56)).astype(np.uint8)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A host staging tensor as (tokens, item_size) bytes."""
    return t.view(torch.uint8).reshape(t.shape[0], -1)


class KVWriter:
    """Writes synthetic KV into, and reads KV back from, `device_pool` on `backend` (see the module docstring)."""

    def __init__(self, device_pool, backend, inline: bool = False):
        """`inline`: copy on the calling thread (backend.inline_stream) instead of the default
        stream's worker; the same bytes, as every call waits for its copy anyway."""
        if device_pool.buffers is None:
            raise ValueError("device_pool: not materialized (no KV to write or check)")
        self.pool, self.backend, self.geom = device_pool, backend, device_pool.geom
        # compute's stream, not one of the controller's
        self.stream = backend.inline_stream() if inline else backend.default_stream()

    def _staging(self, n: int) -> list[list[torch.Tensor]]:
        """Host tensors shaped like the device layers' first n rows: [part][layer]."""
        shape = (self.geom.parts, self.geom.layers, n) + tuple(self.pool.buffers[0][0].shape[1:])
        whole = torch.empty(shape, dtype=self.geom.dtype)
        return [[whole[p, layer] for layer in range(self.geom.layers)] for p in range(self.geom.parts)]

    def _copy(self, src: list[list[torch.Tensor]], dst: list[list[torch.Tensor]], src_slots, dst_slots) -> None:
        """dst[part][layer][dst_slots] = src[part][layer][src_slots], all layers, then wait."""
        g = self.geom
        si = torch.from_numpy(np.ascontiguousarray(src_slots, dtype=np.int64))
        di = torch.from_numpy(np.ascontiguousarray(dst_slots, dtype=np.int64))
        with kvcacheio.use(self.backend, self.stream):
            if g.attention == "mla":
                ev = kvcacheio.transfer_kv_all_layer_mla(src[0], dst[0], si, di, g.item_size, g.layers)
            else:
                ev = kvcacheio.transfer_kv_all_layer(src[0], dst[0], src[1], dst[1], si, di, g.item_size, g.layers)
        ev.wait()

    def write(self, tokens: np.ndarray, start: int, slots: np.ndarray) -> None:
        """Write the KV of `tokens` (at positions start, start+1, ...) into device `slots`."""
        n = min(len(tokens), len(slots))
        if n == 0:
            return
        pos = np.arange(start, start + n)
        staging = self._staging(n)
        for part, layers in enumerate(staging):
            for layer, t in enumerate(layers):
                rows = _bytes(t)
                rows.copy_(torch.from_numpy(synthetic_kv(tokens[:n], pos, part, layer, rows.shape[1])))
        self._copy(staging, self.pool.buffers, np.arange(n), slots[:n])

    def read(self, slots: np.ndarray) -> list[list[torch.Tensor]]:
        """Host copies of the device rows at `slots`: [part][layer] tensors of len(slots) rows."""
        staging = self._staging(len(slots))
        if len(slots):
            self._copy(self.pool.buffers, staging, slots, np.arange(len(slots)))
        return staging

    def mismatches(self, tokens: np.ndarray, slots: np.ndarray) -> int:
        """Tokens (at positions 0, 1, ...) whose KV at `slots` differs, in any part or layer,
        from what was written for them."""
        if not len(tokens):
            return 0
        pos = np.arange(len(tokens))
        bad = torch.zeros(len(tokens), dtype=torch.bool)
        for part, layers in enumerate(self.read(slots)):
            for layer, t in enumerate(layers):
                rows = _bytes(t)
                want = torch.from_numpy(synthetic_kv(tokens, pos, part, layer, rows.shape[1]))
                bad |= (rows != want).any(dim=1)
        return int(bad.sum())

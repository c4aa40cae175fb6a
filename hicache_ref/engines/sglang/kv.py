"""Synthetic KV in upstream's device pool: what "compute" writes there, and the check of a hit.

The bytes are the reference's (hicache_ref.core.synthetic_kv: a function of token, position,
part, layer and offset), written into the rows of SGLang's own layer buffers (MLA: its latent
buffer; MHA: K then V), so the pages upstream backs up to L2 and writes to L3 hold what the
reference's would, and a prefix upstream loads back (from L2, or from a store either engine
wrote) is checked byte for byte, as the reference checks its hits.
"""

from __future__ import annotations

import numpy as np
import torch

from hicache_ref.core.synthetic_kv import synthetic_kv


class UpstreamKV:
    """Writes and checks synthetic KV in an SGLang MLATokenToKVPool or MHATokenToKVPool."""

    def __init__(self, kv_pool):
        parts = [kv_pool.kv_buffer] if hasattr(kv_pool, "kv_buffer") else [kv_pool.k_buffer, kv_pool.v_buffer]
        # [part][layer] as (slots, row bytes): views of upstream's buffers, no copy
        self.rows = [[b.view(torch.uint8).reshape(b.shape[0], -1) for b in layers] for layers in parts]

    def write(self, tokens: np.ndarray, start: int, slots: np.ndarray) -> None:
        """Write the KV of `tokens` (at positions start, start+1, ...) into device `slots`."""
        n = min(len(tokens), len(slots))
        if n == 0:
            return
        pos = np.arange(start, start + n)
        at = torch.as_tensor(np.asarray(slots[:n], dtype=np.int64))
        for part, layers in enumerate(self.rows):
            for layer, rows in enumerate(layers):
                rows[at] = torch.from_numpy(synthetic_kv(tokens[:n], pos, part, layer, rows.shape[1]))

    def mismatches(self, tokens: np.ndarray, slots: np.ndarray) -> int:
        """Tokens (at positions 0, 1, ...) whose KV at device `slots` differs, in any part or layer,
        from what compute wrote for them."""
        if not len(tokens):
            return 0
        pos = np.arange(len(tokens))
        at = torch.as_tensor(np.asarray(slots, dtype=np.int64))
        bad = torch.zeros(len(tokens), dtype=torch.bool)
        for part, layers in enumerate(self.rows):
            for layer, rows in enumerate(layers):
                want = torch.from_numpy(synthetic_kv(tokens, pos, part, layer, rows.shape[1]))
                bad |= (rows[at] != want).any(dim=1)
        return int(bad.sum())

"""The P800 seed transfer: the one definition of the seed geometry and the plan behind *_seed metrics.

The seed configuration is DeepSeek-style MLA latent KV (78 layers, kv_dim 576 = kv_lora_rank +
rope dim, bf16) in pages of 64 tokens; the seed transfer moves 32,768 contiguous tokens (512
pages) host->device. page_first_direct then gives one segment per (page, layer): 512 * 78 =
39,936; layer_first one per layer: 78.
"""

from __future__ import annotations

import numpy as np
import torch

from hal.transfer.direction import Direction
from hal.transfer.geometry import KVGeometry, parse_dtype
from hal.transfer.plan import TransferPlan, plan_pool_transfer

SEED_TOKENS = 32768
SEED_DIRECTION = Direction.H2D


def seed_geometry(*, page_size: int = 64, layers: int = 78, kv_dim: int = 576, attention: str = "mla",
                  heads: int = 1, dtype: str | torch.dtype = "bf16") -> KVGeometry:
    """The seed KV geometry; keyword arguments override single fields (kv_dim is MHA's head dim)."""
    return KVGeometry(attention, layers, heads, kv_dim, parse_dtype(dtype), page_size)


SEED_GEOMETRY = seed_geometry()


def seed_plan(layout: str, direction: Direction | str = SEED_DIRECTION) -> TransferPlan:
    """The seed transfer in host `layout` (contiguous slots on both sides), without memory."""
    tokens = np.arange(SEED_TOKENS, dtype=np.int64)
    return plan_pool_transfer(layout, SEED_GEOMETRY, SEED_TOKENS, tokens, tokens, direction)

"""Slot indices for planned transfers, and what planning them allocates.

`hicache plan` and `hicache bench transfer` plan copies of whole pages, contiguous or scattered
over a pool twice as large; `planned_bytes` is the lower bound their memory check refuses over.
"""

from __future__ import annotations

import numpy as np

from hal.transfer.geometry import KVGeometry
from hal.transfer.layout_registry import get_layout

# Bytes per planned item, measured on 4M-token plans (peak RSS over the interpreter's):
# slot and index arrays per token, and one merged segment's offsets and length.
INDEX_BYTES_PER_TOKEN = 48
SEGMENT_BYTES = 16


def slot_indices(tokens: int, page_size: int, scattered: bool, rng: np.random.Generator) -> np.ndarray:
    """`tokens` slots in whole pages; scattered picks random pages from a pool twice as large."""
    pages = -(-tokens // page_size)
    order = rng.permutation(2 * pages)[:pages] if scattered else np.arange(pages)
    return (order[:, None] * page_size + np.arange(page_size)).reshape(-1)[:tokens].astype(np.int64)


def scattered_pool_slots(tokens: int, page_size: int) -> int:
    """Slots of the pool `slot_indices` scatters `tokens` over: twice their whole pages."""
    return 2 * -(-tokens // page_size) * page_size


def planned_bytes(layout: str, geom: KVGeometry, tokens: int, page_size: int) -> int:
    """A lower bound on what planning `tokens` slots allocates: index arrays for whole pages on
    both sides, and the segments (per page and layer where the layout keeps a page's tokens in one run,
    else per token and layer)."""
    lay, pages = get_layout(layout), -(-tokens // page_size)
    per_layer = geom.parts * lay.pieces(geom)
    units = pages if lay.page_runs else pages * page_size  # one run per page, else one per token
    return 2 * pages * page_size * INDEX_BYTES_PER_TOKEN + units * geom.layers * per_layer * SEGMENT_BYTES


"""What one token's KV looks like (KVGeometry) and the device pool's address math.

The device pool is one buffer per layer (and per K/V part for MHA), shape (size, heads,
head_dim) or (size, 1, kv_dim); every host layout is addressed against it, so its offsets
live here, beside the geometry, and not in any one layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hal.common.arg_checks import positive_int

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.float8_e4m3fn}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """`name` ("bf16", ...) as a torch dtype; a dtype passes through; ValueError naming dtype."""
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise ValueError(f"dtype: {name!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


@dataclass(frozen=True)
class KVGeometry:
    """What one token's KV looks like: attention kind, layer count, heads, dtype, page size."""

    attention: str  # "mha" | "mla"
    layers: int
    heads: int  # MHA KV heads; 1 for MLA
    head_dim: int  # MHA head dim; MLA kv_dim (kv_lora_rank + rope dim)
    dtype: torch.dtype = torch.bfloat16
    page_size: int = 1

    def __post_init__(self):
        if self.attention not in ("mha", "mla"):
            raise ValueError(f"attention: {self.attention!r} is not 'mha' or 'mla'")
        for name in ("layers", "heads", "head_dim", "page_size"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.attention == "mla" and self.heads != 1:
            raise ValueError(f"heads: MLA latent has 1 head, got {self.heads}")

    @property
    def parts(self) -> int:
        return 2 if self.attention == "mha" else 1

    @property
    def elem_size(self) -> int:
        return self.dtype.itemsize

    @property
    def item_size(self) -> int:
        """Bytes per token per layer, per K or V part (upstream's item_size)."""
        return self.heads * self.head_dim * self.elem_size

    @property
    def layout_dim(self) -> int:
        """Bytes per token across all layers of one part (upstream's src/dst_layout_dim)."""
        return self.layers * self.item_size

    @property
    def token_bytes(self) -> int:
        return self.parts * self.layout_dim

    def pieces(self, layout) -> int:
        """Pieces one item splits into in host `layout` (a name or a HostLayout)."""
        from hal.transfer.layout_registry import get_layout

        return get_layout(layout).pieces(self)

    def piece_bytes(self, layout) -> int:
        return self.item_size // self.pieces(layout)


def device_shape(geom: KVGeometry, size: int) -> tuple[int, ...]:
    """Shape of one device layer buffer of `size` token slots."""
    return (size, geom.heads, geom.head_dim)


def device_offsets(geom: KVGeometry, tokens: np.ndarray, pieces: int = 1) -> np.ndarray:
    """Byte offsets of (token, piece) in one device layer buffer, each item cut in `pieces`
    (the host side's pieces); shape (len(tokens), pieces)."""
    t = tokens.astype(np.int64)[:, None]
    pb = geom.item_size // pieces
    return t * geom.item_size + np.arange(pieces, dtype=np.int64)[None, :] * pb

"""KV pool layouts: shapes and byte-address math, in one place.

Host layouts follow SGLang's HiCache host pool (upstream shapes); the device pool is one
buffer per layer (and per K/V for MHA), shape (size, heads, head_dim) or (size, 1, kv_dim).

Address math is written per *piece*: one token of one layer, or for page_head one head of
one token of one layer (page_head splits each item over heads, as upstream does). Every
function returns the byte offset of (layer 0, token, piece) inside one K or V part plus a
per-layer shift, so the planner can merge once and shift per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hal.checks import positive_int  # noqa: F401 - also importable from here, as before

HOST_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.float8_e4m3fn}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
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

    def pieces(self, layout: str) -> int:
        return self.heads if layout == "page_head" else 1

    def piece_bytes(self, layout: str) -> int:
        return self.item_size // self.pieces(layout)


def check_layout(layout: str, geom: KVGeometry) -> None:
    allowed = MLA_LAYOUTS if geom.attention == "mla" else HOST_LAYOUTS
    if layout not in allowed:
        raise ValueError(f"layout: {layout!r} is not a {geom.attention.upper()} host layout ({', '.join(allowed)})")


def host_shape(layout: str, geom: KVGeometry, size: int) -> tuple[int, ...]:
    """Upstream host pool shape for `size` token slots (size is a multiple of page_size)."""
    check_layout(layout, geom)
    if size % geom.page_size:
        raise ValueError(f"size: {size} is not a multiple of page_size {geom.page_size}")
    L, ps, pages = geom.layers, geom.page_size, size // geom.page_size
    if geom.attention == "mla":
        kv = geom.head_dim
        return {
            "layer_first": (L, size, 1, kv),
            "page_first": (size, L, 1, kv),
            "page_first_direct": (pages, L, ps, 1, kv),
        }[layout]
    H, D = geom.heads, geom.head_dim
    return {
        "layer_first": (2, L, size, H, D),
        "page_first": (2, size, L, H, D),
        "page_first_direct": (2, pages, L, ps, H, D),
        "page_head": (2, pages, H, ps, L, D),
    }[layout]


def device_shape(geom: KVGeometry, size: int) -> tuple[int, ...]:
    return (size, geom.heads, geom.head_dim)


def host_piece_offsets(layout: str, geom: KVGeometry, size: int, tokens: np.ndarray) -> np.ndarray:
    """Byte offsets of (layer 0, token, piece) in one host part; shape (len(tokens), pieces)."""
    t = tokens.astype(np.int64)[:, None]
    item, ldim, ps, L = geom.item_size, geom.layout_dim, geom.page_size, geom.layers
    if layout == "layer_first":
        return t * item
    if layout == "page_first":
        return t * ldim
    if layout == "page_first_direct":
        return (t // ps) * (ps * ldim) + (t % ps) * item
    if layout == "page_head":
        hb = item // geom.heads
        h = np.arange(geom.heads, dtype=np.int64)[None, :]
        return (t // ps) * (ps * ldim) + h * (ps * L * hb) + (t % ps) * (L * hb)
    raise ValueError(f"layout: unknown host layout {layout!r}")


def host_layer_shift(layout: str, geom: KVGeometry, size: int, layer: int) -> int:
    item, ps = geom.item_size, geom.page_size
    return {
        "layer_first": layer * size * item,
        "page_first": layer * item,
        "page_first_direct": layer * ps * item,
        "page_head": layer * (item // geom.heads),
    }[layout]


def device_piece_offsets(layout: str, geom: KVGeometry, tokens: np.ndarray) -> np.ndarray:
    """Byte offsets of (token, piece) in one device layer buffer; pieces as in `layout`."""
    t = tokens.astype(np.int64)[:, None]
    n = geom.pieces(layout)
    pb = geom.item_size // n
    return t * geom.item_size + np.arange(n, dtype=np.int64)[None, :] * pb


def layout_signature(tensor: torch.Tensor) -> str:
    return f"{tuple(tensor.shape)} {tensor.dtype} on {tensor.device}"

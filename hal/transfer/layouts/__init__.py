"""Host KV pool layouts: one module per layout, looked up by name, plus the geometry they address.

`base.HostLayout` is the contract (shape, address math, kvcacheio op pair, DMA segment rule,
attention kinds, io-backend switch); `layer_first`, `page_first`, `page_first_direct` and
`page_head` are upstream's four; `registry` finds them by name (hal.named_registry), and a
new layout is one module registered there. `geometry` holds KVGeometry and the device
pool's offsets. The functions below take a layout name or object, for callers that hold names.
"""

from __future__ import annotations

import numpy as np
import torch

from hal.checks import positive_int  # noqa: F401 - importable from here, as before
from hal.transfer.layouts.base import HostLayout
from hal.transfer.layouts.geometry import DTYPES, KVGeometry, device_offsets, device_shape, parse_dtype
from hal.transfer.layouts.registry import get_layout, layout_names, register_layout

__all__ = ["DTYPES", "HOST_LAYOUTS", "MLA_LAYOUTS", "HostLayout", "KVGeometry", "check_layout", "device_offsets",
           "device_piece_offsets", "device_shape", "get_layout", "host_layer_shift", "host_piece_offsets",
           "host_shape", "layout_names", "layout_signature", "parse_dtype", "register_layout"]


def __getattr__(name: str):
    # Derived from the registry when asked, so a registered layout is listed too.
    if name == "HOST_LAYOUTS":
        return layout_names()
    if name == "MLA_LAYOUTS":
        return layout_names("mla")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_layout(layout, geom: KVGeometry) -> HostLayout:
    """The layout `layout` names, if a pool of `geom`'s attention kind may use it; else
    ValueError naming layout and the allowed ones."""
    try:
        found = get_layout(layout)
    except ValueError:
        found = None
    if found is None or not found.supports(geom.attention):
        allowed = layout_names(geom.attention)
        name = getattr(layout, "name", layout)
        raise ValueError(f"layout: {name!r} is not a {geom.attention.upper()} host layout ({', '.join(allowed)})")
    return found


def host_shape(layout, geom: KVGeometry, size: int) -> tuple[int, ...]:
    """Upstream host pool shape for `size` token slots (size is a multiple of page_size)."""
    found = check_layout(layout, geom)
    if size % geom.page_size:
        raise ValueError(f"size: {size} is not a multiple of page_size {geom.page_size}")
    return found.shape(geom, size)


def host_piece_offsets(layout, geom: KVGeometry, size: int, tokens: np.ndarray) -> np.ndarray:
    """Byte offsets of (layer 0, token, piece) in one host part; shape (len(tokens), pieces)."""
    return get_layout(layout).piece_offsets(geom, size, tokens)


def host_layer_shift(layout, geom: KVGeometry, size: int, layer: int) -> int:
    """Bytes from layer 0 to `layer` in one host part of `layout`."""
    return get_layout(layout).layer_shift(geom, size, layer)


def device_piece_offsets(layout, geom: KVGeometry, tokens: np.ndarray) -> np.ndarray:
    """Byte offsets of (token, piece) in one device layer buffer; pieces as in host `layout`."""
    return device_offsets(geom, tokens, get_layout(layout).pieces(geom))


def layout_signature(tensor: torch.Tensor) -> str:
    return f"{tuple(tensor.shape)} {tensor.dtype} on {tensor.device}"

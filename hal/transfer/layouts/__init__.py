"""Host KV pool layouts: one module per layout, looked up by name, plus the geometry they address.

`base.HostLayout` is the contract (shape, address math, kvcacheio op pair, DMA segment rule,
attention kinds, io-backend switch); `layer_first`, `page_first`, `page_first_direct` and
`page_head` are upstream's four; hal.transfer.layout_registry finds them by name (one
module here is one layout), and hal.transfer.geometry holds KVGeometry and the device pool's
offsets. The names below are re-exported and take a layout name or object, for callers that
hold names.
"""

from __future__ import annotations

import numpy as np
import torch

from hal.transfer.geometry import DTYPES, KVGeometry, device_offsets, device_shape, parse_dtype
from hal.transfer.layout_registry import check_layout, get_layout, layout_names, register_layout
from hal.transfer.layouts.base import HostLayout

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

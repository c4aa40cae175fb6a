"""Independent reference for KV transfers, written on logical (part, layer, token) views.

Each upstream host shape becomes one logical tensor by permute and reshape alone, and a transfer is
an index assignment on it. The shapes are written out again here on purpose, so a mistake in
hal's layouts cannot hide in both places. Bytes are compared as integers (NaN payloads, -0.0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

MHA_LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
MLA_LAYOUTS = ("layer_first", "page_first", "page_first_direct")
_INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def layouts_for(attention: str) -> tuple[str, ...]:
    return MHA_LAYOUTS if attention == "mha" else MLA_LAYOUTS


def parts_for(attention: str) -> int:
    """K and V for MHA; one latent for MLA."""
    return 2 if attention == "mha" else 1


def host_part_shape(layout: str, layers: int, size: int, heads: int, dim: int, page_size: int) -> tuple[int, ...]:
    """Upstream shape of one K/V part (or the MLA latent, heads == 1) of a host pool."""
    if size % page_size:
        raise ValueError(f"size: {size} is not a multiple of page_size {page_size}")
    pages = size // page_size
    return {
        "layer_first": (layers, size, heads, dim),
        "page_first": (size, layers, heads, dim),
        "page_first_direct": (pages, layers, page_size, heads, dim),
        "page_head": (pages, heads, page_size, layers, dim),
    }[layout]


def host_shape(layout: str, attention: str, layers: int, size: int, heads: int, dim: int,
               page_size: int) -> tuple[int, ...]:
    """Upstream host pool shape: MHA has a leading K/V dim of 2, MLA has none."""
    part = host_part_shape(layout, layers, size, heads, dim, page_size)
    return (2, *part) if attention == "mha" else part


def _part_to_logical(layout: str, x: torch.Tensor, page_size: int) -> torch.Tensor:
    """(layers, tokens, heads, dim) view or copy of one host part."""
    if layout == "layer_first":
        return x
    if layout == "page_first":
        return x.permute(1, 0, 2, 3)
    if layout == "page_first_direct":  # (pages, L, ps, H, D)
        pages, layers, ps, heads, dim = x.shape
        return x.permute(1, 0, 2, 3, 4).reshape(layers, pages * ps, heads, dim)
    if layout == "page_head":  # (pages, H, ps, L, D)
        pages, heads, ps, layers, dim = x.shape
        return x.permute(3, 0, 2, 1, 4).reshape(layers, pages * ps, heads, dim)
    raise ValueError(f"layout: unknown host layout {layout!r}")


def _part_from_logical(layout: str, y: torch.Tensor, page_size: int) -> torch.Tensor:
    """Inverse of _part_to_logical, always a new contiguous tensor."""
    layers, size, heads, dim = y.shape
    if layout == "layer_first":
        out = y
    elif layout == "page_first":
        out = y.permute(1, 0, 2, 3)
    elif layout == "page_first_direct":
        out = y.reshape(layers, size // page_size, page_size, heads, dim).permute(1, 0, 2, 3, 4)
    elif layout == "page_head":
        out = y.reshape(layers, size // page_size, page_size, heads, dim).permute(1, 3, 2, 0, 4)
    else:
        raise ValueError(f"layout: unknown host layout {layout!r}")
    return out.clone(memory_format=torch.contiguous_format)


def host_to_logical(layout: str, attention: str, host: torch.Tensor, page_size: int) -> torch.Tensor:
    """A host pool in any upstream layout -> (parts, layers, tokens, heads, dim), on the CPU."""
    host = host.detach().cpu()
    parts = host if attention == "mha" else host.unsqueeze(0)
    return torch.stack([_part_to_logical(layout, p, page_size) for p in parts])


def logical_to_host(layout: str, attention: str, logical: torch.Tensor, page_size: int) -> torch.Tensor:
    """(parts, layers, tokens, heads, dim) -> the upstream host shape of `layout`."""
    parts = torch.stack([_part_from_logical(layout, p, page_size) for p in logical])
    return parts if attention == "mha" else parts[0]


def device_to_logical(pool: Sequence[Sequence[torch.Tensor]]) -> torch.Tensor:
    """pool[part][layer] of shape (tokens, heads, dim) -> (parts, layers, tokens, heads, dim)."""
    return torch.stack([torch.stack([t.detach().cpu() for t in layers]) for layers in pool])


def scatter(dst: torch.Tensor, src: torch.Tensor, src_indices, dst_indices, layers: Sequence[int]) -> torch.Tensor:
    """What every op promises: dst[p, l, dst_indices] = src[p, l, src_indices] for l in layers.

    Returns a new tensor; `dst` stays as it was (it is the poisoned "before" picture).
    """
    si = torch.as_tensor(src_indices, dtype=torch.int64).cpu()
    di = torch.as_tensor(dst_indices, dtype=torch.int64).cpu()
    out = bits(dst).clone()
    s = bits(src)
    for layer in layers:
        out[:, layer, di] = s[:, layer, si]
    return out.view(dst.dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The same memory viewed as integers of the element's width."""
    return t.view(_INT_OF_WIDTH[t.element_size()])


def fill_random(t: torch.Tensor, rng: np.random.Generator | torch.Generator) -> torch.Tensor:
    """Random bit patterns in every byte (any dtype, any device).

    Takes a numpy Generator (about 3x faster than torch's for bytes) or a torch.Generator.
    """
    n = t.numel() * t.element_size()
    if isinstance(rng, torch.Generator):
        raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=rng)
    else:
        raw = torch.from_numpy(rng.integers(0, 256, n, dtype=np.uint8))
    t.view(torch.uint8).view(-1).copy_(raw)
    return t


# Destinations are filled with this byte first: an entry no op wrote reads as all 0xA5, which
# random source data matches with probability 256**-entry_bytes.
POISON_BYTE = 0xA5


def poison(t: torch.Tensor) -> torch.Tensor:
    t.view(torch.uint8).fill_(POISON_BYTE)
    return t


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Bit-for-bit equality of two logical tensors; the message names the first bad (part, layer, token)."""
    a, e = bits(actual.detach().cpu()), bits(expected.detach().cpu())
    if a.shape != e.shape:
        raise AssertionError(f"{what}: shape {tuple(a.shape)} != expected {tuple(e.shape)}")
    if torch.equal(a, e):
        return
    bad = (a != e).reshape(*a.shape[:3], -1).any(dim=-1).nonzero()
    part, layer, token = (int(v) for v in bad[0])
    poisoned = bool((actual[part, layer, token].contiguous().view(torch.uint8) == POISON_BYTE).all())
    raise AssertionError(
        f"{what}: {len(bad)} (part, layer, token) entries differ; first at part {part}, layer {layer}, "
        f"token {token}{' (still poison: never written)' if poisoned else ''}"
    )

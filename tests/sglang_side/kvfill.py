"""KV content both sides of an interop test agree on, placed in a host buffer of either side.

A part's buffer has the dims of its host layout (upstream's and the harness's agree per part);
value(part, layer, token, head, d) names its place, token being the position in the request, so
a page read into any slot of any layout is checked against what its writer meant. Only torch.
"""

from __future__ import annotations

import torch


def logical(part: int, layers: int, tokens: torch.Tensor, heads: int, dim: int, dtype) -> torch.Tensor:
    """[layer][token][head][d] of one part: small integers, exact in fp16 and bf16."""
    lay = torch.arange(layers).view(-1, 1, 1, 1)
    tok = tokens.view(1, -1, 1, 1)
    head = torch.arange(heads).view(1, 1, -1, 1)
    d = torch.arange(dim).view(1, 1, 1, -1)
    return ((part * 41 + lay * 13 + tok * 7 + head * 5 + d * 3) % 239).to(dtype)


def to_dims(x: torch.Tensor, layout: str, page_size: int) -> torch.Tensor:
    """[layer][slot][head][d] of one part to the dims of `layout`'s buffer."""
    layers, size, heads, dim = x.shape
    paged = x.reshape(layers, size // page_size, page_size, heads, dim)
    if layout == "layer_first":
        return x
    if layout == "page_first":
        return x.permute(1, 0, 2, 3)
    if layout == "page_first_direct":
        return paged.permute(1, 0, 2, 3, 4)
    if layout == "page_head":
        return paged.permute(1, 3, 2, 0, 4)
    raise ValueError(layout)


def from_dims(buf: torch.Tensor, layout: str, layers: int, size: int, heads: int, dim: int,
              page_size: int) -> torch.Tensor:
    """A part's buffer back to [layer][slot][head][d]."""
    pages = size // page_size
    if layout == "layer_first":
        return buf.reshape(layers, size, heads, dim)
    if layout == "page_first":
        return buf.reshape(size, layers, heads, dim).permute(1, 0, 2, 3)
    if layout == "page_first_direct":
        return buf.reshape(pages, layers, page_size, heads, dim).permute(1, 0, 2, 3, 4).reshape(layers, size, heads, dim)
    if layout == "page_head":
        return buf.reshape(pages, heads, page_size, layers, dim).permute(3, 0, 2, 1, 4).reshape(layers, size, heads, dim)
    raise ValueError(layout)


def slot_tokens(slots_of_page: list[int], pages: int, page_size: int) -> torch.Tensor:
    """Per slot of a pool of `pages` pages, the request position it holds (-1: none), given the
    slot page each request page went to."""
    out = torch.full((pages * page_size,), -1, dtype=torch.int64)
    for i, slot in enumerate(slots_of_page):
        out[slot * page_size:(slot + 1) * page_size] = torch.arange(i * page_size, (i + 1) * page_size)
    return out


def fill(part: int, layout: str, layers: int, heads: int, dim: int, page_size: int, slots_of_page, pages: int,
         dtype) -> torch.Tensor:
    """A part's buffer (layout dims) whose slots hold the request's pages as `slots_of_page` places them."""
    tokens = slot_tokens(slots_of_page, pages, page_size).clamp(min=0)
    return to_dims(logical(part, layers, tokens, heads, dim, dtype), layout, page_size).contiguous()


def check(buf: torch.Tensor, part: int, layout: str, layers: int, heads: int, dim: int, page_size: int,
          slots_of_page, pages: int) -> bool:
    """Whether the slots of `slots_of_page` in a part's buffer hold the request's pages."""
    got = from_dims(buf, layout, layers, pages * page_size, heads, dim, page_size)
    want = logical(part, layers, slot_tokens(slots_of_page, pages, page_size).clamp(min=0), heads, dim, buf.dtype)
    used = slot_tokens(slots_of_page, pages, page_size) >= 0
    return bool(torch.equal(got[:, used], want[:, used]))

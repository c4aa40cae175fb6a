"""One host-pool page to and from the canonical byte order of a stored object.

Canonical order, whatever the host layout: part (K then V for MHA; the latent for MLA), then
layer, then the page's tokens, each token's item (heads x head_dim elements) whole. It is
layer_first restricted to one page. The byte offsets come from `hal.transfer.layouts`
(`host_piece_offsets`, `host_layer_shift`), the one place host address math lives; this module
only orders them.

Copies: where one part's page is a single run in the host layout (page_first_direct, MLA or
MHA) `page_segments` returns views of the pool and `page_targets` writable views, so a backend
can write from and read into the pool with no copy; other layouts gather into (and scatter
from) one staging tensor per part.
"""

from __future__ import annotations

import numpy as np
import torch

from hal.transfer import layouts


def page_bytes(geom: layouts.KVGeometry) -> int:
    """Bytes of one page in canonical order (every part, layer and token of the page)."""
    return geom.parts * geom.layers * geom.page_size * geom.item_size


def check_pool(pool, name: str = "host_pool") -> None:
    """ValueError naming `name` unless `pool` is a host pool holding real, contiguous memory."""
    for attr in ("geom", "layout", "num_tokens", "buffers"):
        if not hasattr(pool, attr):
            raise ValueError(f"{name}: expected a hicache_ref.pools.HostPool, got {type(pool).__name__}")
    if pool.buffers is None:
        raise ValueError(f"{name}: the pool holds no KV memory (materialize it)")
    for buf in pool.buffers:
        if buf.device.type != "cpu" or not buf.is_contiguous():
            raise ValueError(f"{name}: needs contiguous CPU host buffers, got {layouts.layout_signature(buf)}")


def _rows(pool, page: int) -> np.ndarray:
    """Row numbers (in units of the layout's piece bytes) of one part's page, canonical order."""
    geom, layout, size = pool.geom, pool.layout, pool.num_tokens
    tokens = np.arange(page * geom.page_size, (page + 1) * geom.page_size, dtype=np.int64)
    offsets = layouts.host_piece_offsets(layout, geom, size, tokens)  # (tokens, pieces)
    shifts = np.array([layouts.host_layer_shift(layout, geom, size, layer) for layer in range(geom.layers)],
                      dtype=np.int64)
    return ((shifts[:, None, None] + offsets[None]).reshape(-1)) // geom.piece_bytes(layout)


def _part_rows(pool, part: int) -> torch.Tensor:
    pb = pool.geom.piece_bytes(pool.layout)
    return pool.buffers[part].view(torch.uint8).reshape(-1, pb)


def _run(rows: np.ndarray) -> tuple[int, int] | None:
    """(first, count) when `rows` is one ascending run of consecutive rows, else None."""
    first = int(rows[0])
    if int(rows[-1]) - first == len(rows) - 1 and bool(np.all(np.diff(rows) == 1)):
        return first, len(rows)
    return None


def page_segments(pool, page: int) -> list[torch.Tensor]:
    """The page's bytes as 1-D uint8 tensors whose concatenation is the canonical order.

    Views of the pool for parts stored as one run; a gathered copy per part otherwise."""
    rows = _rows(pool, page)
    run = _run(rows)
    out = []
    for part in range(pool.geom.parts):
        table = _part_rows(pool, part)
        if run is not None:
            out.append(table[run[0] : run[0] + run[1]].reshape(-1))
        else:
            out.append(table.index_select(0, torch.from_numpy(rows)).reshape(-1))
    return out


def page_targets(pool, page: int) -> list[torch.Tensor] | None:
    """Writable views of the page (canonical order across them) when each part is one run, else None."""
    run = _run(_rows(pool, page))
    if run is None:
        return None
    return [_part_rows(pool, part)[run[0] : run[0] + run[1]].reshape(-1) for part in range(pool.geom.parts)]


def write_page(pool, page: int, data: torch.Tensor) -> None:
    """Scatter one page given in canonical order (1-D uint8, `page_bytes` long) into the pool."""
    rows = torch.from_numpy(_rows(pool, page))
    pb = pool.geom.piece_bytes(pool.layout)
    per_part = data.numel() // pool.geom.parts
    for part in range(pool.geom.parts):
        src = data[part * per_part : (part + 1) * per_part].view(-1, pb)
        _part_rows(pool, part).index_copy_(0, rows, src)

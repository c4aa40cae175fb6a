"""One host-pool page to and from the canonical byte order of a stored object.

Canonical order is layer_first restricted to one page, whatever the pool's layout, so any layout
reads back any other's pages. Offsets come from the host layouts; this module only orders them.
Where a page is a few strided runs of the pool they are views (no copy); otherwise the page is
gathered into, or scattered from, a reused staging buffer.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from hal.transfer import layouts

# A part's page moves as runs of the pool when it is at most this many runs (layer_first: one per
# layer); beyond that (page_first: a run per token and layer, a few KB each) per-run work in the
# syscalls and transfer slices costs more than one gather pass.
MAX_RUNS = 256


def page_bytes(geom: layouts.KVGeometry) -> int:
    """Bytes of one page in canonical order (every part, layer and token of the page)."""
    return geom.parts * geom.layers * geom.page_size * geom.item_size


def check_pool(pool, name: str = "host_pool") -> None:
    """ValueError naming `name` unless `pool` is a host pool holding real, contiguous memory."""
    for attr in ("geom", "layout", "num_tokens", "buffers"):
        if not hasattr(pool, attr):
            raise ValueError(f"{name}: expected a hicache_ref.core.pools.HostPool, got {type(pool).__name__}")
    if pool.buffers is None:
        raise ValueError(f"{name}: the pool holds no KV memory (materialize it)")
    for buf in pool.buffers:
        if buf.device.type != "cpu" or not buf.is_contiguous():
            raise ValueError(f"{name}: needs contiguous CPU host buffers, got {layouts.layout_signature(buf)}")


def _rows(layout: str, geom: layouts.KVGeometry, size: int, page: int) -> np.ndarray:
    """Row numbers (units of the layout's piece bytes) of one part's page, shape (layers, tokens, pieces)."""
    tokens = np.arange(page * geom.page_size, (page + 1) * geom.page_size, dtype=np.int64)
    offsets = layouts.host_piece_offsets(layout, geom, size, tokens)  # (tokens, pieces)
    shifts = np.array([layouts.host_layer_shift(layout, geom, size, layer) for layer in range(geom.layers)],
                      dtype=np.int64)
    return (shifts[:, None, None] + offsets[None]) // geom.piece_bytes(layout)


def _affine(rows: np.ndarray) -> tuple[int, tuple[int, int, int]] | None:
    """(first row, row strides per axis) when rows[l, t, h] is affine in (l, t, h), else None."""
    first = int(rows[0, 0, 0])
    strides = []
    for axis in range(3):
        idx = [0, 0, 0]
        if rows.shape[axis] > 1:
            idx[axis] = 1
            strides.append(int(rows[tuple(idx)]) - first)
        else:
            strides.append(0)
    grid = np.indices(rows.shape, dtype=np.int64)
    model = first + sum(s * g for s, g in zip(strides, grid, strict=True))
    return (first, tuple(strides)) if np.array_equal(model, rows) else None


@functools.lru_cache(maxsize=256)
def _plan(layout: str, geom: layouts.KVGeometry, size: int):
    """(first row of page 0, rows per page, per-axis row strides), or None where not affine."""
    pages = size // geom.page_size
    zero = _affine(_rows(layout, geom, size, 0))
    if zero is None:
        return None
    step = 0
    if pages > 1:
        one = _affine(_rows(layout, geom, size, 1))
        last = _affine(_rows(layout, geom, size, pages - 1))
        if one is None or last is None or one[1] != zero[1] or last[1] != zero[1]:
            return None
        step = one[0] - zero[0]
        if last[0] != zero[0] + (pages - 1) * step:
            return None
    return zero[0], step, zero[1]


def _part_bytes(pool, part: int) -> torch.Tensor:
    return pool.buffers[part].view(torch.uint8).reshape(-1)


def _views(pool, page: int) -> list[torch.Tensor] | None:
    """Per part, the page as a strided uint8 view in canonical order (layers, tokens, pieces, piece bytes)."""
    geom, layout = pool.geom, pool.layout
    plan = _plan(layout, geom, pool.num_tokens)
    if plan is None:
        return None
    first, step, strides = plan
    pb = geom.piece_bytes(layout)
    shape = (geom.layers, geom.page_size, geom.pieces(layout), pb)
    stride = (strides[0] * pb, strides[1] * pb, strides[2] * pb, 1)
    out = []
    for part in range(geom.parts):
        flat = _part_bytes(pool, part)
        out.append(flat.as_strided(shape, stride, flat.storage_offset() + (first + page * step) * pb))
    return out


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    # numpy's strided copy runs at memory speed here; torch's byte-strided copy_ was ~25x slower
    np.copyto(dst.numpy(), src.numpy())


def _is_run(view: torch.Tensor) -> bool:
    return view.is_contiguous()


def page_segments(pool, page: int, staging=None) -> list[torch.Tensor]:
    """The page's bytes as 1-D uint8 tensors whose concatenation is the canonical order: views of
    the pool where a part is one run, else gathered into `staging(nbytes)` (a new tensor if None)."""
    views = _views(pool, page)
    take = staging or (lambda n: torch.empty(n, dtype=torch.uint8))
    if views is None:
        return [_gather_rows(pool, part, page, take) for part in range(pool.geom.parts)]
    out = []
    for v in views:
        if _is_run(v):
            out.append(v.reshape(-1))
        else:
            buf = take(v.numel())
            _copy(buf.view(v.shape), v)
            out.append(buf)
    return out


@functools.lru_cache(maxsize=256)
def _run_plan(layout: str, geom: layouts.KVGeometry, size: int):
    """(first byte of page 0, bytes between pages, runs, run bytes, bytes between runs) of one part,
    or None when a part's page is not equal runs at one stride (or is more than MAX_RUNS of them)."""
    plan = _plan(layout, geom, size)
    if plan is None:
        return None
    first, step, strides = plan
    pb = geom.piece_bytes(layout)
    dims = [(n, s * pb) for n, s in zip((geom.layers, geom.page_size, geom.pieces(layout)), strides, strict=True)
            if n > 1]
    run = pb  # bytes; merge inner dims while each continues the run below it
    while dims and dims[-1][1] == run:
        run *= dims.pop()[0]
    rows, gap = 1, run
    if dims:  # the outer dims must themselves form one arithmetic sequence of runs
        rows, gap = dims[-1]
        for n, stride in reversed(dims[:-1]):
            if stride != gap * rows:
                return None
            rows *= n
    if rows > MAX_RUNS:
        return None
    return first * pb, step * pb, rows, run, gap


def run_pager(pool):
    """For a pool whose pages are runs of it (`_run_plan`), a function page -> the page's runs as
    writable 2-D uint8 views of the pool, one per part; else None. The plan and the parts' bytes
    are looked up once, so a batch's pages cost a slice each."""
    plan = _run_plan(pool.layout, pool.geom, pool.num_tokens)
    if plan is None:
        return None
    first, step, rows, run, gap = plan
    flats = [_part_bytes(pool, part).numpy() for part in range(pool.geom.parts)]

    def strided(page: int) -> list[np.ndarray]:
        at = first + page * step
        return [np.lib.stride_tricks.as_strided(f[at:], (rows, run), (gap, 1)) for f in flats]

    if any(f.size % gap for f in flats):  # not a whole grid of rows
        return strided
    grids = [f.reshape(-1, gap) for f in flats]  # the part as rows of `gap` bytes; a page's runs are a block

    def block(page: int) -> list[np.ndarray]:
        row, col = divmod(first + page * step, gap)
        if col + run > gap:  # a run would wrap past a grid row (no host layout does this)
            return strided(page)
        return [g[row : row + rows, col : col + run] for g in grids]

    return block


def run_addresses(pool) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(addresses, byte counts, bytes between pages) of page 0's runs in canonical order, every part
    (uint64), where the pool's pages are runs of it (`_run_plan`): page p's runs are page 0's shifted
    by p times the step, so a batch of pages is addressed without a per-page step. Else None."""
    plan = _run_plan(pool.layout, pool.geom, pool.num_tokens)
    if plan is None:
        return None
    first, step, rows, run, gap = plan
    bases = np.array([_part_bytes(pool, part).data_ptr() for part in range(pool.geom.parts)], dtype=np.uint64)
    within = np.uint64(first) + np.arange(rows, dtype=np.uint64) * np.uint64(gap)
    addrs = (bases[:, None] + within[None, :]).reshape(-1)
    return addrs, np.full(addrs.size, run, dtype=np.uint64), step


def page_runs(pool, page: int, staging=None, pager=None) -> list[np.ndarray]:
    """The page's bytes as 2-D uint8 arrays of contiguous rows, canonical order row after row: views
    of the pool where `_run_plan` finds runs, else one row per part gathered into `staging(nbytes)`
    (a torch uint8 tensor; a new one if None). `pager`: `run_pager(pool)`, to look it up once a batch."""
    pager = pager or run_pager(pool)
    if pager is not None:
        return pager(page)
    return [s.numpy().reshape(1, -1) for s in page_segments(pool, page, staging)]


def page_run_targets(pool, page: int, pager=None) -> list[np.ndarray] | None:
    """Writable `page_runs` views of the pool where the page is runs of it, else None (stage it)."""
    pager = pager or run_pager(pool)
    return pager(page) if pager is not None else None


def page_targets(pool, page: int) -> list[torch.Tensor] | None:
    """Writable views of the page (canonical order across them) when each part is one run, else None."""
    views = _views(pool, page)
    if views is None or not all(_is_run(v) for v in views):
        return None
    return [v.reshape(-1) for v in views]


def write_page(pool, page: int, data: torch.Tensor) -> None:
    """Scatter one page given in canonical order (1-D uint8, `page_bytes` long) into the pool."""
    per_part = data.numel() // pool.geom.parts
    views = _views(pool, page)
    for part in range(pool.geom.parts):
        src = data[part * per_part : (part + 1) * per_part]
        if views is None:
            _scatter_rows(pool, part, page, src)
        else:
            _copy(views[part], src.view(views[part].shape))


def _table(pool, part: int) -> torch.Tensor:
    return _part_bytes(pool, part).view(-1, pool.geom.piece_bytes(pool.layout))


def _gather_rows(pool, part: int, page: int, take) -> torch.Tensor:
    rows = torch.from_numpy(_rows(pool.layout, pool.geom, pool.num_tokens, page).reshape(-1))
    table = _table(pool, part)
    buf = take(rows.numel() * table.shape[1])
    torch.index_select(table, 0, rows, out=buf.view(-1, table.shape[1]))
    return buf


def _scatter_rows(pool, part: int, page: int, src: torch.Tensor) -> None:
    rows = torch.from_numpy(_rows(pool.layout, pool.geom, pool.num_tokens, page).reshape(-1))
    table = _table(pool, part)
    table.index_copy_(0, rows, src.view(-1, table.shape[1]))


# ---- one part of a page in an upstream object's byte order --------------------------------------
# Upstream SGLang stores a host-pool page as the bytes its own host layout keeps it in: these are the
# axis orders of one part's page (L layers, T tokens, H heads of head_dim each) per layout.
OBJECT_ORDERS = {name: layouts.get_layout(name).page_axes for name in layouts.layout_names()}


@functools.lru_cache(maxsize=256)
def _head_rows(layout: str, geom: layouts.KVGeometry, size: int, page: int, order: str) -> np.ndarray:
    """Row numbers, in units of one head's bytes, of one part's page in `order`'s byte order (1-D)."""
    head_bytes = geom.head_dim * geom.elem_size
    piece = geom.piece_bytes(layout)
    per_piece = piece // head_bytes
    rows = _rows(layout, geom, size, page) * per_piece  # (layers, tokens, pieces) in head units
    heads = (rows[..., None] + np.arange(per_piece, dtype=np.int64)).reshape(geom.layers, geom.page_size, -1)
    out = np.ascontiguousarray(heads.transpose(OBJECT_ORDERS[order])).reshape(-1)
    out.setflags(write=False)
    return out


def _head_table(pool, part: int) -> torch.Tensor:
    return _part_bytes(pool, part).view(-1, pool.geom.head_dim * pool.geom.elem_size)


def ordered_view(pool, part: int, page: int, order: str) -> np.ndarray | None:
    """The part's page as one writable (1, bytes) view of the pool when, in `order`, it is one run
    of it; else None (gather or scatter it)."""
    rows = _head_rows(pool.layout, pool.geom, pool.num_tokens, page, order)
    if rows[-1] - rows[0] + 1 != rows.size or not np.array_equal(rows, np.arange(rows[0], rows[0] + rows.size)):
        return None
    table = _head_table(pool, part).numpy()
    return table[rows[0] : rows[0] + rows.size].reshape(1, -1)


def gather_ordered(pool, part: int, page: int, order: str, take) -> np.ndarray:
    """The part's page in `order` as a (1, bytes) array: a view of the pool or gathered into `take(n)`."""
    view = ordered_view(pool, part, page, order)
    if view is not None:
        return view
    rows = torch.from_numpy(_head_rows(pool.layout, pool.geom, pool.num_tokens, page, order).copy())
    table = _head_table(pool, part)
    buf = take(rows.numel() * table.shape[1])
    torch.index_select(table, 0, rows, out=buf.view(-1, table.shape[1]))
    return buf.numpy().reshape(1, -1)


@functools.lru_cache(maxsize=64)
def _ordered_plan(layout: str, geom: layouts.KVGeometry, size: int, order: str):
    """(page 0's head rows in `order`, rows between pages, whether a page is one run) where page p's
    rows are page 0's shifted by p times the step (every host layout), else None."""
    zero = _head_rows(layout, geom, size, 0, order)
    pages, step = size // geom.page_size, 0
    if pages > 1:
        one, last = _head_rows(layout, geom, size, 1, order), _head_rows(layout, geom, size, pages - 1, order)
        step = int(one[0]) - int(zero[0])
        if not (np.array_equal(one - zero, np.full_like(zero, step))
                and np.array_equal(last - zero, np.full_like(zero, (pages - 1) * step))):
            return None
    run = bool(np.array_equal(zero, np.arange(zero[0], zero[0] + zero.size)))
    return zero, step, run


def gather_ordered_pages(pool, part: int, page_list, order: str, take) -> list[np.ndarray]:
    """`gather_ordered` of many pages at once: per page a (1, bytes) array, a view of the pool where
    the part's page is one run in `order`, else a row of one buffer from `take(n)` that a single
    index_select gathered every page into."""
    page_list = [int(p) for p in page_list]
    if not page_list:
        return []
    plan = _ordered_plan(pool.layout, pool.geom, pool.num_tokens, order)
    if plan is None:
        return [gather_ordered(pool, part, p, order, take) for p in page_list]
    zero, step, run = plan
    table = _head_table(pool, part)
    width = zero.size * table.shape[1]
    if run:
        flat = table.numpy().reshape(-1)
        at = (int(zero[0]) + np.asarray(page_list, dtype=np.int64) * step) * table.shape[1]
        return [flat[a : a + width].reshape(1, -1) for a in at.tolist()]
    shifts = torch.tensor(page_list, dtype=torch.int64) * step
    rows = (torch.from_numpy(zero.copy())[None, :] + shifts[:, None]).reshape(-1)
    need = len(page_list) * width
    buf = take(1 << (need - 1).bit_length())[:need]  # a power of two: batches of any size reuse it
    torch.index_select(table, 0, rows, out=buf.view(-1, table.shape[1]))
    out = buf.numpy().reshape(len(page_list), width)
    return [out[j : j + 1] for j in range(len(page_list))]


def scatter_ordered(pool, part: int, page: int, order: str, data: np.ndarray) -> None:
    """Write one part's page given in `order` (uint8, its bytes) into the pool."""
    rows = torch.from_numpy(_head_rows(pool.layout, pool.geom, pool.num_tokens, page, order).copy())
    table = _head_table(pool, part)
    table.index_copy_(0, rows, torch.from_numpy(np.ascontiguousarray(data).reshape(-1)).view(-1, table.shape[1]))


def part_bytes(geom: layouts.KVGeometry) -> int:
    """Bytes of one part (K, V or MLA's latent) of one page."""
    return geom.layers * geom.page_size * geom.item_size

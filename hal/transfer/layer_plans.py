"""One-layer plans standing for whole pool transfers: cheap counting, and priced stand-ins without memory.

It lives in hal because it is address math: the controller counts segments and bytes without knowing a layout.
A transfer's segments and bytes are its layer-0 plan's times the layer count.
Where runs break only between pages, whole pages are planned as single tokens.
`LayerPlanner` checks that equivalence at construction. Why it holds: docs/architecture.md, "Design notes".
"""

from __future__ import annotations

import numpy as np

from hal.transfer import pool_ops as pool_transfer
from hal.transfer.direction import Direction
from hal.transfer.geometry import KVGeometry, device_offsets
from hal.transfer.layout_registry import check_layout
from hal.transfer.plan import TransferPlan


class LayerPlanner:
    """Layer-0 plans of device <-> host transfers for one pool pair."""

    def __init__(self, layout, geom: KVGeometry, host_size: int):
        self.layout = check_layout(layout, geom)  # a HostLayout (a name is looked up)
        self.geom, self.host_size = geom, host_size
        self.page_geom = self._page_geometry()

    def _page_geometry(self) -> KVGeometry | None:
        """The page-wide geometry where the layout's segment rule (`page_runs`) holds, checked
        against its address math; None: plan tokens."""
        g, ps, lay = self.geom, self.geom.page_size, self.layout
        if ps == 1 or not lay.page_runs or lay.pieces(g) != 1 or self.host_size < 2 * ps:
            return None
        pg = KVGeometry(g.attention, g.layers, g.heads, g.head_dim * ps, g.dtype, 1)
        tokens = np.arange(2 * ps, dtype=np.int64)
        host = lay.piece_offsets(g, self.host_size, tokens).reshape(-1)
        dev = device_offsets(g, tokens).reshape(-1)
        inside = (tokens[1:] % ps) != 0  # steps between two tokens of the same page
        if not ((np.diff(host)[inside] == g.item_size).all() and (np.diff(dev)[inside] == g.item_size).all()):
            return None
        pages = np.array([0, 1, self.host_size // ps - 1], dtype=np.int64)
        same_start = lay.piece_offsets(pg, self.host_size // ps, pages).reshape(-1) == \
            lay.piece_offsets(g, self.host_size, pages * ps).reshape(-1)
        return pg if same_start.all() else None

    def _whole_pages(self, indices: np.ndarray) -> np.ndarray | None:
        ps = self.geom.page_size
        if len(indices) % ps:
            return None
        grid = indices.reshape(-1, ps)
        first = grid[:, 0]
        if (first % ps).any() or (grid - first[:, None] != np.arange(ps)).any():
            return None
        return first // ps

    def layer0(self, direction: Direction | str, host_indices: np.ndarray, device_indices: np.ndarray) -> TransferPlan:
        """The plan of layer 0 (all K/V parts) of host[host_indices] <-> device[device_indices]."""
        if self.page_geom is not None:
            hp, dp = self._whole_pages(host_indices), self._whole_pages(device_indices)
            if hp is not None and dp is not None:
                return pool_transfer.plan_for(self.layout, self.page_geom, self.host_size // self.geom.page_size,
                                              hp, dp, direction, layers=[0])
        return pool_transfer.plan_for(self.layout, self.geom, self.host_size, host_indices, device_indices,
                                      direction, layers=[0])

    def layer0_pages(self, direction: Direction | str, host_pages: np.ndarray, device_pages: np.ndarray) -> TransferPlan:
        """layer0 of whole pages given by number (int64): the same plan as their token slots give."""
        if self.page_geom is not None:
            return pool_transfer.plan_for(self.layout, self.page_geom, self.host_size // self.geom.page_size,
                                          host_pages, device_pages, direction, layers=[0])
        ps = self.geom.page_size
        offsets = np.arange(ps, dtype=np.int64)
        slots = lambda pages: (pages[:, None] * ps + offsets).reshape(-1)  # noqa: E731
        return self.layer0(direction, slots(host_pages), slots(device_pages))

    def page_totals(self, jobs: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[int, int]]:
        """(bytes, segments) of layer 0 of each (host_pages, device_pages) job (int64 page
        numbers): what `layer0_pages` of each job counts, computed for all jobs in one pass.

        A priced replay only needs these totals (the link model is linear in them), and one
        plan per job was most of its transfer threads' time. Runs never continue from one
        job into the next: each job is its own submission.
        """
        if self.page_geom is None or not jobs:
            return [(p.nbytes, p.num_segments) for p in (self.layer0_pages(Direction.D2H, h, d) for h, d in jobs)]
        pg, ps = self.page_geom, self.geom.page_size
        sizes = np.fromiter((len(h) for h, _ in jobs), dtype=np.int64, count=len(jobs))
        host = np.concatenate([h for h, _ in jobs])
        dev = np.concatenate([d for _, d in jobs])
        # The offsets plan_copy merges (its pieces are whole pages here: see _page_geometry).
        ho = self.layout.piece_offsets(pg, self.host_size // ps, host).reshape(-1)
        do = device_offsets(pg, dev).reshape(-1)
        piece = pg.item_size
        brk = np.ones(len(host), dtype=bool)
        if len(host) > 1:
            brk[1:] = (np.diff(ho) != piece) | (np.diff(do) != piece)
        starts = np.cumsum(sizes) - sizes
        runs = np.zeros(len(jobs), dtype=np.int64)
        full = sizes > 0
        if full.any():
            brk[starts[full]] = True
            runs[full] = np.add.reduceat(brk, starts[full])
        parts = pg.parts  # one group per K/V part, each with the same runs
        return [(int(n) * piece * parts, int(r) * parts) for n, r in zip(sizes, runs, strict=True)]

    def all_layers(self, direction: Direction | str, layer0: list[tuple[int, int]],
                   kernel_items: int | None = None) -> TransferPlan:
        """One priced stand-in for every layer of every transfer whose layer 0 moves `layer0`
        = [(bytes, segments), ...] (from layer0 / layer0_pages / page_totals).

        Same bytes, segments and launches as the real submissions (one per backup, one per
        layer per load), hence the same modeled cost under a link model linear in them; its
        one group is counted (`TransferPlan.counted`: no offset arrays), so a backend that
        moves no bytes prices a whole batch at once and one that moves bytes refuses it.
        """
        direction = Direction(direction)
        layers = self.geom.layers
        nbytes, segments = sum(b for b, _ in layer0) * layers, sum(n for _, n in layer0) * layers
        launches = len(layer0) * (1 if direction == Direction.D2H else layers)
        return TransferPlan.counted(f"{direction}_{self.layout.name}", direction, launches, kernel_items, nbytes,
                                    segments)

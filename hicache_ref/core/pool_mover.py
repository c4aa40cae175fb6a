"""How the controller's jobs become backend submissions: plans and pool ops between its two pools.

A direction worker runs its jobs through a `PoolMover`, built once by the controller.
It plans layer 0 for the counters and copies through `hal.transfer.pool_ops`.
On a backend that moves no bytes it prices jobs instead, with one stand-in plan per batch.
`job_seconds` prices each job alone, so the figures do not depend on batching.
Details: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import numpy as np

from hal.transfer import kvcacheio, pool_ops
from hal.transfer.direction import Direction
from hal.transfer.geometry import device_shape
from hal.transfer.layer_plans import LayerPlanner
from hal.transfer.plan import TransferPlan
from hicache_ref.core.allocator import pages_to_slots

_PRICE_CACHE_MAX = 1 << 16  # job shapes remembered (a whole-trace replay has a few thousand)


def job_slots(job, page_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(host, device) token slots of `job`, made from its pages when it was queued by page."""
    if job.pages is None:
        return job.host_indices, job.device_indices
    host_pages, device_pages = job.pages
    return pages_to_slots(host_pages, page_size), pages_to_slots(device_pages, page_size)


class PoolMover:
    """Plans and submits D2H backups and H2D loads between `device_pool` and `host_pool` on `backend`."""

    def __init__(self, device_pool, host_pool, backend):
        for name, pool in (("device_pool", device_pool), ("host_pool", host_pool)):
            if pool.buffers is None:
                raise ValueError(f"{name}: has no buffers (materialize it; on a backend that moves no bytes, "
                                 "such as count, buffers take no memory)")
        self.device_pool, self.host_pool, self.backend = device_pool, host_pool, backend
        self.priced = not backend.capabilities().moves_bytes
        self.geom, self.layout = device_pool.geom, getattr(host_pool, "host_layout", host_pool.layout)
        self.layers = self.geom.layers
        self._planner = LayerPlanner(self.layout, self.geom, host_pool.num_tokens)
        self.io_backend = getattr(host_pool, "io_backend", None)  # hal.transfer.io_backend; None: seed's
        self._job_seconds: dict[tuple, float | None] = {}  # (direction, bytes, segments, items) -> price
        self._page_pools = None if self.priced else self._page_wide_pools()

    def _page_wide_pools(self):
        """(geometry, host buffers, device buffers) seeing each page as one wide token, where the
        layer planner found that view exact (LayerPlanner.page_geom): a job queued by page then
        runs through the same ops on page numbers, with no slot arrays to build, merge and
        check (the same bytes to the same places). None: jobs run on token slots."""
        pg = self._planner.page_geom
        if pg is None:
            return None
        ps = self.geom.page_size
        host_shape = self._planner.layout.shape(pg, self.host_pool.num_tokens // ps)[self.geom.parts - 1:]
        dev_shape = device_shape(pg, self.device_pool.num_tokens // ps)
        # The pools' buffers are contiguous views of one allocation each (pools.py), so these views exist.
        host = [b.view(host_shape) for b in self.host_pool.buffers]
        device = [[t.view(dev_shape) for t in part] for part in self.device_pool.buffers]
        return pg, host, device

    def layer0_plan(self, direction: Direction, job) -> TransferPlan:
        """Layer 0's plan of `job` (every layer repeats its runs): what the counters scale."""
        if job.pages is not None:  # queued by page: plan the pages, no slot arrays either way
            return self._planner.layer0_pages(direction, *job.pages)
        return self._planner.layer0(direction, job.host_indices, job.device_indices)

    def kernel_items(self, tokens: int) -> int | None:
        """Items a kernel copy of `tokens` tokens moves (one per token and layer), or None for
        a direct copy (priced per segment instead)."""
        return tokens * self.layers if self.io_backend == "kernel" else None

    def job_totals(self, direction: Direction, jobs: list) -> list[tuple[int, int]]:
        """(bytes, segments) of layer 0 of each job (every layer repeats them): what the
        counters scale and the price depends on. Page jobs are counted together in one pass
        (LayerPlanner.page_totals); slot jobs plan layer 0 each."""
        if all(job.pages is not None for job in jobs):
            return self._planner.page_totals([job.pages for job in jobs])
        return [(p.nbytes, p.num_segments) for p in (self.layer0_plan(direction, job) for job in jobs)]

    def job_seconds(self, direction: Direction, layer0: tuple[int, int], tokens: int = 0) -> float | None:
        """Modeled seconds of one job of `tokens` tokens whose layer 0 moves `layer0` = (bytes,
        segments) (None: the backend has no model): its all-layer plan priced by the backend,
        remembered per shape (the price depends only on direction, bytes, segments and kernel
        items, and replays repeat shapes)."""
        items = self.kernel_items(tokens)
        key = (direction, *layer0, items)
        if key not in self._job_seconds:
            if len(self._job_seconds) >= _PRICE_CACHE_MAX:
                self._job_seconds.clear()
            self._job_seconds[key] = self.backend.model_seconds(self._planner.all_layers(direction, [layer0], items))
        return self._job_seconds[key]

    def run(self, direction: Direction, jobs: list, layer0: list[tuple[int, int]]) -> list:
        """Submit `jobs` (one job, or with `priced` a batch; `layer0`: their job_totals) on the
        current kvcacheio stream; returns the events they share (one for a D2H, one per layer
        for an H2D)."""
        if self.priced:
            return self._price(direction, layer0, sum(job.handle.num_tokens for job in jobs))
        (job,) = jobs
        if job.pages is not None and self._page_pools is not None:
            args = (self.layout, *self._page_pools, *job.pages)
        else:
            args = (self.layout, self.geom, self.host_pool.buffers, self.device_pool.buffers,
                    *job_slots(job, self.geom.page_size))
        if direction == Direction.D2H:
            return [pool_ops.backup(*args)]
        return list(pool_ops.load_all_layers(*args))

    def _price(self, direction: Direction, layer0: list[tuple[int, int]], tokens: int) -> list:
        """Nothing to copy: one stand-in for every layer of every job, for the modeled clock.

        (Planning every layer would be 78 shifted copies of the same runs on the seed
        geometry: ~1.5 ms per backup of a whole-trace replay; the link model needs only the
        totals.)
        """
        plan = self._planner.all_layers(direction, layer0, self.kernel_items(tokens))
        ev = self.backend.execute(plan, kvcacheio.current_stream())
        return [ev] if direction == Direction.D2H else [ev] * self.layers

"""How the controller's jobs become backend submissions: plans and pool ops between its two pools.

A `PoolMover` is what a direction worker (hicache_ref.direction_worker) runs its jobs
through, built once by the controller from the device pool, the host pool and the
backend: layer-0 plans for the counters, and the copies themselves through
`hal.transfer.pool_ops`. On a backend that moves no bytes (`capabilities().moves_bytes`
False: the count backend, whose pools are meta tensors) jobs are priced instead: one
symbolic plan stands for every layer of every job in a batch, which prices the same as
the per-layer plans pool_ops would build (the link model is linear) at a fraction of
their planning cost.
"""

from __future__ import annotations

from hal.transfer import kvcacheio, pool_ops
from hal.transfer.layer_plans import LayerPlanner
from hal.transfer.plan import TransferPlan


class PoolMover:
    """Plans and submits D2H backups and H2D loads between `device_pool` and `host_pool` on `backend`."""

    def __init__(self, device_pool, host_pool, backend):
        for name, pool in (("device_pool", device_pool), ("host_pool", host_pool)):
            if pool.buffers is None:
                raise ValueError(f"{name}: has no buffers (materialize it; on a backend that moves no bytes, "
                                 "such as count, buffers take no memory)")
        self.device_pool, self.host_pool, self.backend = device_pool, host_pool, backend
        self.priced = not backend.capabilities().moves_bytes
        self.geom, self.layout = device_pool.geom, host_pool.layout
        self.layers = self.geom.layers
        self._planner = LayerPlanner(self.layout, self.geom, host_pool.num_tokens)

    def layer0_plan(self, direction: str, job) -> TransferPlan:
        """Layer 0's plan of `job` (every layer repeats its runs): what the counters scale."""
        return self._planner.layer0(direction, job.host_indices, job.device_indices)

    def run(self, direction: str, jobs: list, plans: list[TransferPlan]) -> list:
        """Submit `jobs` (one job, or with `priced` a batch) on the current kvcacheio stream;
        returns the events they share (one for a D2H, one per layer for an H2D)."""
        if self.priced:
            return self._price(direction, plans)
        (job,) = jobs
        args = (self.layout, self.geom, self.host_pool.buffers, self.device_pool.buffers, job.host_indices,
                job.device_indices)
        if direction == "d2h":
            return [pool_ops.backup(*args)]
        return list(pool_ops.load_all_layers(*args))

    def _price(self, direction: str, plans: list[TransferPlan]) -> list:
        """Nothing to copy: one plan standing for every layer of every job, for the modeled clock.

        (Planning every layer would be 78 shifted copies of the same runs on the seed
        geometry: ~1.5 ms per backup of a whole-trace replay.)
        """
        ev = self.backend.execute(self._planner.all_layers(direction, plans), kvcacheio.current_stream())
        return [ev] if direction == "d2h" else [ev] * self.layers

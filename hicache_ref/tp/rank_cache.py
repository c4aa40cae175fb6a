"""One TP rank's reference HiCache under the writer rule: tree, pools, controller, gate and digest.

Every rank runs the same ops; with a shared host pool only rank 0 writes it, and every rank loads
through the visibility gate. Completions happen at points every rank agrees on, so allocation
decisions depend on the op list alone. Every KV byte read back is checked and folded into a digest.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections import deque

import numpy as np
import torch

from hal.transfer import layouts
from hicache_ref.core.allocator import pages_to_slots
from hicache_ref.core.controller import CacheController
from hicache_ref.core.pools import DevicePool, HostPool
from hicache_ref.core.prefill import Prefill
from hicache_ref.core.radix import RadixTree
from hicache_ref.core.synthetic_kv import KVWriter, synthetic_kv
from hicache_ref.spec import CacheSpec
from hicache_ref.tp.digest import DecisionLog, RecordingAllocator
from hicache_ref.tp.visibility import VisibilityGate
from hicache_ref.tp.workload import Op, WorkloadConfig

HOST_LAYOUT = "layer_first"


def geometry(cfg: WorkloadConfig) -> layouts.KVGeometry:
    """The run's MLA geometry (one latent head, bf16)."""
    return layouts.KVGeometry("mla", cfg.layers, 1, cfg.kv_dim, torch.bfloat16, cfg.page_size)


def host_pool_bytes(cfg: WorkloadConfig) -> int:
    """Bytes of one L2 pool of the run (what a shared buffer must hold)."""
    geom = geometry(cfg)
    return math.prod(layouts.host_shape(HOST_LAYOUT, geom, cfg.l2_pages * cfg.page_size)) * geom.elem_size


class RankCache:
    """This rank's cache for `cfg` on `backend`, its L2 in `host_buffer` (see the module docstring)."""

    def __init__(self, cfg: WorkloadConfig, group, backend, host_buffer, log: DecisionLog):
        self.cfg, self.group, self.log = cfg, group, log
        self.rank = group.rank if group is not None else 0
        geom = geometry(cfg)
        self.ps = ps = cfg.page_size
        self.device = DevicePool(geom, cfg.l1_pages * ps, backend=backend, materialize=True, order=cfg.free_list)
        self.host = HostPool(geom, cfg.l2_pages * ps, HOST_LAYOUT, backend=backend, materialize=True,
                             order=cfg.free_list, host_buffer=host_buffer)
        self.device.allocator = RecordingAllocator(self.device.allocator, log, "l1")
        self.host.allocator = RecordingAllocator(self.host.allocator, log, "l2")
        self.tree = RadixTree(CacheSpec.of(page_size=ps, write_policy=cfg.write_policy), device=self.device,
                              host=self.host, on_write_back=self._on_write_back)
        self.controller = CacheController(self.device, self.host, backend)
        self.kv = KVWriter(self.device, backend)
        self.gate = VisibilityGate(group, cfg.l2_pages, shared=cfg.shared, enabled=cfg.gate, progress=self._progress)
        self.writes = self.gate.writer  # the writer rule: with a shared pool only rank 0 issues D2H
        self._outstanding: deque = deque()  # (WriteHandle, write seq), in D2H stream order
        self._backups: list = []  # TierCopy backups whose lock is released at the next op's start
        self._loads: list = []  # TierCopy loads of this op, released at its end
        self._delay = np.random.default_rng(cfg.seed + 1)
        self.read_mismatch_pages = 0
        self.pages_read = 0

    # -- the writer's D2H, the gate's progress ----------------------------------------------
    def _progress(self) -> bool:
        """Wait for the oldest outstanding D2H (rank 0's part of the gate); False if none."""
        if not self._outstanding:
            return False
        handle, seq = self._outstanding.popleft()
        handle.wait()
        self.gate.write_done(seq)
        return True

    def _submit_write(self, copy, wait: bool) -> None:
        seq = self.gate.before_write(copy.host_pages)
        if not self.writes:
            return
        if self.cfg.d2h_delay_ms:
            time.sleep(float(self._delay.uniform(0, self.cfg.d2h_delay_ms)) / 1000)
        handle = self.controller.write_pages(copy.device_pages, copy.host_pages)
        if wait:
            handle.wait()
            self.gate.write_done(seq)
        else:
            self._outstanding.append((handle, seq))

    def _on_write_back(self, copies) -> None:
        for t in copies:  # the tree frees these device pages when we return: wait for each
            self._submit_write(t, wait=True)

    def _back_up(self, copy) -> None:
        self._submit_write(copy, wait=False)
        self._backups.append(copy)

    def settle(self) -> None:
        """Wait for this rank's transfers and release the backups' locks (start of every op)."""
        while self._progress():
            pass
        self.controller.flush()
        for t in self._backups:
            self.tree.tiers.complete(t)
        self._backups = []

    # -- reads ----------------------------------------------------------------------------
    def _check(self, tokens: np.ndarray, start: int, pages: np.ndarray) -> None:
        """Compare the device KV at `pages` with what was written for tokens at positions start..."""
        if not len(pages):
            return
        n = len(pages) * self.ps
        tokens, pos = tokens[start: start + n], np.arange(start, start + n)
        bad = np.zeros(n, dtype=bool)
        for part, per_layer in enumerate(self.kv.read(pages_to_slots(pages, self.ps))):
            for layer, t in enumerate(per_layer):
                rows = t.view(torch.uint8).reshape(n, -1).numpy()
                self.log.record_read(rows.tobytes())
                bad |= (rows != synthetic_kv(tokens, pos, part, layer, rows.shape[1])).any(axis=1)
        self.pages_read += len(pages)
        self.read_mismatch_pages += int(bad.reshape(-1, self.ps).any(axis=1).sum())

    def _load(self, copy, tokens: np.ndarray, start: int) -> None:
        seq = self.gate.before_load(copy.host_pages)
        self.controller.load_pages(copy.host_pages, copy.device_pages).wait_all()
        self.gate.load_done(seq)
        self._loads.append(copy)
        self._check(tokens, start, copy.device_pages)

    # -- ops ------------------------------------------------------------------------------
    def run(self, index: int, op: Op) -> None:
        """Op `index` of the workload, between log.begin and log.end."""
        self.log.begin(index)
        try:
            self.settle()
            self._hooks(index)
            getattr(self, f"_op_{op.kind}")(op)
        finally:
            for t in self._loads:
                self.tree.tiers.complete(t)
            self._loads = []
        self.log.end()

    def _hooks(self, index: int) -> None:
        cfg = self.cfg
        kill = cfg.faults.get("kill_at")
        if kill is not None and list(kill) == [self.rank, index]:
            os.kill(os.getpid(), signal.SIGKILL)
        hang = cfg.faults.get("hang_at")
        while hang is not None and list(hang) == [self.rank, index]:
            time.sleep(1.0)  # outside any collective: only the launcher can tell
        if cfg.inject_divergence_at == index and self.group is not None and self.rank == self.group.world - 1:
            pages = self.device.allocator.alloc_pages(1)  # one rank takes (and returns) a page the others do not
            if pages is not None:
                self.device.allocator.free_pages(pages)

    def _op_insert(self, op: Op) -> None:
        tree, ps, tokens = self.tree, self.ps, op.tokens
        m = tree.match_pages(tokens)
        tree.lock(m.last_device_node)
        try:
            self._check(tokens, 0, m.device_pages)
            fill = Prefill(tree, m, len(tokens))
            fill.admit(on_load=lambda copy: self._load(copy, tokens, fill.l1))
            prefix = fill.prefix
            self.kv.write(tokens[prefix: prefix + len(fill.new_pages) * ps], prefix, pages_to_slots(fill.new_pages, ps))
            res = fill.insert(tokens)
            for b in res.backups if res is not None else ():
                self._back_up(b)
            fill.release()
        finally:
            tree.unlock(m.last_device_node)

    def _op_match(self, op: Op) -> None:
        m = self.tree.match_pages(op.tokens)
        self._check(op.tokens, 0, m.device_pages)

    def _op_evict(self, op: Op) -> None:
        self.tree.tiers.evict(op.pages * self.ps)

    def _op_evict_host(self, op: Op) -> None:
        self.tree.tiers.evict_host(op.pages * self.ps)

    def _op_load_back(self, op: Op) -> None:
        m = self.tree.match_pages(op.tokens)
        if len(m.host_pages) and (t := self.tree.tiers.load_back(m)) is not None:
            self._load(t, op.tokens, len(m.device_pages) * self.ps)

    def _op_backup(self, op: Op) -> None:
        m = self.tree.match_pages(op.tokens)
        path, node = [], m.last_device_node
        while node.parent is not None:
            path.append(node)
            node = node.parent
        todo = [x for x in reversed(path) if x.dev is not None and x.host is None]
        if todo and (t := self.tree.tiers.back_up(todo)) is not None:
            self._back_up(t)

    # -- figures and teardown ---------------------------------------------------------------
    def stats(self) -> dict:
        s = self.controller.stats()
        return {"d2h_bytes": s.d2h.bytes, "h2d_bytes": s.h2d.bytes, "d2h_transfers": s.d2h.transfers,
                "h2d_transfers": s.h2d.transfers, "read_mismatch_pages": self.read_mismatch_pages,
                "pages_read": self.pages_read, "gate_syncs": self.gate.syncs, "host_pool_bytes": self.host.nbytes}

    def close(self) -> None:
        try:
            self.controller.shutdown(timeout=10.0, drain=True)
        finally:
            self.device.close()
            self.host.close()

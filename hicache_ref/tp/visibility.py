"""Visibility of a TP-shared host pool: no load before rank 0's write has landed, no overwrite during a load.

Writes and loads get sequence numbers every rank agrees on; `sync()` takes the group's MIN of the
completed counters (upstream's all_reduce(MIN)), and a load or write waits until it covers the
page. With private pools no collective runs. The protocol: hicache_ref/README.md, "Visibility".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hicache_ref.tp.group import INT64_MAX, Group


class VisibilityGate:
    """Sequence numbers and the MIN-ack protocol for one host pool of `num_pages` pages."""

    def __init__(self, group: Group | None, num_pages: int, *, shared: bool, enabled: bool = True,
                 progress: Callable[[], bool] | None = None):
        self.group = group
        self.shared = shared and group is not None and group.world > 1
        self.enabled = enabled
        self.writer = group is None or group.rank == 0 or not shared
        self.progress = progress or (lambda: False)  # rank 0: wait one outstanding D2H; False if none
        self.page_write = np.zeros(num_pages, dtype=np.int64)  # last write sequence number per page
        self.page_read = np.zeros(num_pages, dtype=np.int64)  # last load sequence number per page
        self.writes_issued = self.writes_completed = 0
        self.reads_issued = self.reads_completed = 0
        self.visible_writes = self.visible_reads = 0
        self.syncs = 0

    def sync(self) -> None:
        """One round: visible = MIN over ranks of (completed writes, completed reads)."""
        mine = [self.writes_completed if self.writer else INT64_MAX, self.reads_completed]
        self.visible_writes, self.visible_reads = self.group.all_reduce(mine, "min")
        self.syncs += 1

    def _wait(self, counter: str, need: int) -> None:
        if not self.enabled:
            return
        if not self.shared:  # private pool: only this rank's own D2H can be outstanding
            while counter == "visible_writes" and self.writes_completed < need and self.progress():
                pass
            return
        while getattr(self, counter) < need:
            # The same numbers on every rank decide the loop, so every rank runs the same rounds.
            self.sync()
            if getattr(self, counter) < need and self.writer:
                self.progress()

    def before_load(self, host_pages: np.ndarray) -> int:
        """Block until rank 0's writes of `host_pages` are visible; the load's sequence number."""
        if len(host_pages):
            self._wait("visible_writes", int(self.page_write[host_pages].max()))
        self.reads_issued += 1
        self.page_read[host_pages] = self.reads_issued
        return self.reads_issued

    def load_done(self, seq: int) -> None:
        """This rank's load `seq` (and every earlier one: loads complete in order) landed."""
        self.reads_completed = max(self.reads_completed, seq)

    def before_write(self, host_pages: np.ndarray) -> int:
        """Block until every rank's loads of `host_pages`' old content are done; the write's number."""
        if len(host_pages):
            self._wait("visible_reads", int(self.page_read[host_pages].max()))
        self.writes_issued += 1
        self.page_write[host_pages] = self.writes_issued
        if not self.writer:  # nothing to wait for here: this rank writes nothing
            self.writes_completed = self.writes_issued
        return self.writes_issued

    def write_done(self, seq: int) -> None:
        """Rank 0's write `seq` (and every earlier one: one in-order D2H stream) completed."""
        self.writes_completed = max(self.writes_completed, seq)

"""A TP group of threads in one process: hicache_ref.tp.group.Group's collectives, for fast tests.

Every rank is a thread; a collective is a real rendezvous (each rank blocks until all have
called it), so the ranks run the same rounds as processes would, without the seconds a
process group takes to start. `run_ranks(world, fn)` runs `fn(group)` on each rank.
"""

from __future__ import annotations

import threading

import torch

from hicache_ref.tp.group import Group


class _Rendezvous:
    """What the ranks of one world share: one slot per rank, filled once per collective round."""

    def __init__(self, world: int, timeout: float):
        self.world, self.timeout = world, timeout
        self.cond = threading.Condition()
        self.round = self.arrived = 0
        self.slots: list = [None] * world
        self.last: list = []  # the values of the round that completed last
        self.failed = False  # a rank raised: a round it will never join must not wait for it

    def exchange(self, rank: int, value) -> list:
        """Every rank's `value`, by rank (all ranks must call it)."""
        with self.cond:
            mine = self.round
            self.slots[rank] = value
            self.arrived += 1
            if self.arrived == self.world:
                self.last, self.slots, self.arrived = self.slots, [None] * self.world, 0
                self.round += 1
                self.cond.notify_all()
                return list(self.last)
            # the next round cannot complete before this rank joins it: `last` is this round's
            if not self.cond.wait_for(lambda: self.round != mine or self.failed, self.timeout):
                raise TimeoutError(f"rank {rank}: a collective waited {self.timeout:g} s for the other ranks")
            if self.round == mine:
                raise RuntimeError(f"rank {rank}: another rank failed before this collective")
            return list(self.last)

    def fail(self) -> None:
        with self.cond:
            self.failed = True
            self.cond.notify_all()


def _int64(values) -> list[int]:
    """`values` as the int64 tensor Group sends carries them: a value out of range is refused."""
    return torch.tensor([int(v) for v in values], dtype=torch.int64).tolist()


class ThreadGroup(Group):
    """Rank `rank` of a world of threads: Group's collectives (and so its agree) over a rendezvous."""

    def __init__(self, rendezvous: _Rendezvous, rank: int):
        self._rv, self.rank, self.world = rendezvous, rank, rendezvous.world
        self.timeout = rendezvous.timeout
        self.calls = 0  # collectives this rank joined

    def _exchange(self, value) -> list:
        self.calls += 1
        return self._rv.exchange(self.rank, value)

    def all_reduce(self, values, op: str) -> list[int]:
        pick = {"min": min, "max": max}[op]
        return [int(pick(col)) for col in zip(*self._exchange(_int64(values)), strict=True)]

    def all_gather(self, values) -> list[list[int]]:
        return [list(v) for v in self._exchange(_int64(values))]

    def all_gather_object(self, obj) -> list:
        return self._exchange(obj)

    def broadcast_object(self, obj, src: int = 0):
        return self._exchange(obj)[src]

    def close(self) -> None:
        pass


def run_ranks(world: int, fn, timeout: float = 10.0) -> list:
    """`fn(group)` on `world` thread ranks; each rank's result (or the exception it raised), by rank."""
    rv = _Rendezvous(world, timeout)
    out: list = [None] * world

    def one(rank: int) -> None:
        try:
            out[rank] = fn(ThreadGroup(rv, rank))
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out[rank] = e
            rv.fail()  # the other ranks stop waiting for this one

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    return out

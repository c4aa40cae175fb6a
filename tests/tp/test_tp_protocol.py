"""hicache_ref.tp's pieces on their own: the visibility gate, the decision digest, the workload."""

from __future__ import annotations

import numpy as np
import pytest

from hal.backend import get_backend
from hicache_ref.core.allocator import PageAllocator
from hicache_ref.tp.digest import DecisionLog, RecordingAllocator, SpmdCheck, SpmdDivergence, signed
from hicache_ref.tp.group import INT64_MAX
from hicache_ref.tp.rank_cache import RankCache
from hicache_ref.tp.report import KEYS, ok, report
from hicache_ref.tp.visibility import VisibilityGate
from hicache_ref.tp.workload import KINDS, WorkloadConfig, make_ops


class OneOfTwo:
    """Rank `rank` of a two-rank group whose other rank reports `peer` to every collective."""

    def __init__(self, rank, peer):
        self.rank, self.world, self.peer, self.calls = rank, 2, peer, 0

    def all_reduce(self, values, op):
        self.calls += 1
        other = self.peer(self.calls) if callable(self.peer) else self.peer
        return [min(a, b) if op == "min" else max(a, b) for a, b in zip(values, other, strict=False)]

    def all_gather(self, values):
        return [list(values), list(self.peer)] if self.rank == 0 else [list(self.peer), list(values)]

    def all_gather_object(self, obj):
        return [obj, self.peer_obj]


def test_a_reader_waits_until_the_writers_completed_writes_cover_its_pages():
    # rank 1 reads; rank 0 reports 0 completed writes twice, then 1
    reports = {1: [0, 0], 2: [0, 0], 3: [1, 0]}
    g = OneOfTwo(1, lambda n: reports[n])
    gate = VisibilityGate(g, 8, shared=True)
    assert not gate.writer
    seq = gate.before_write(np.array([2, 3]))  # rank 1 does not write, but numbers the write alike
    assert seq == 1 and gate.writes_completed == 1
    gate.before_load(np.array([3]))
    assert g.calls == 3 and gate.visible_writes == 1  # three rounds: until rank 0 said 1
    gate.before_load(np.array([2]))  # already visible: no collective
    assert g.calls == 3


def test_the_writer_waits_for_every_ranks_loads_before_overwriting_a_page():
    progressed = []
    g = OneOfTwo(0, lambda n: [INT64_MAX, 0 if n < 3 else 1])  # rank 1 reports its load done from round 3
    gate = VisibilityGate(g, 4, shared=True, progress=lambda: progressed.append(1) or False)
    gate.write_done(gate.before_write(np.array([0])))
    gate.load_done(gate.before_load(np.array([0])))  # needs write 1: rank 0 completed it
    gate.before_write(np.array([0]))  # page 0's last load (1) must be done on every rank
    assert g.calls == 3 and gate.visible_reads == 1
    assert progressed == [1]  # the writer waited for a D2H while short (of reads here: harmless)


def test_private_pools_sync_nothing_and_wait_only_for_own_writes():
    g = OneOfTwo(1, [0, 0])
    done = []
    gate = VisibilityGate(g, 4, shared=False, progress=lambda: bool(done.append(1)) or gate.write_done(1) or True)
    gate.before_write(np.array([1]))
    gate.before_load(np.array([1]))
    assert g.calls == 0 and done == [1]


def test_a_load_of_pages_from_two_writes_waits_for_the_later_write():
    # private pool: write 1 covers page 0, write 2 page 1; only write 1 has completed
    pending = [2]
    gate = VisibilityGate(None, 4, shared=False, progress=lambda: bool(pending) and (gate.write_done(pending.pop()) or True))
    gate.write_done(gate.before_write(np.array([0])))
    gate.before_write(np.array([1]))
    assert gate.writes_completed == 1
    gate.before_load(np.array([0, 1]))  # needs write 2 as well: it waits for it
    assert gate.writes_completed == 2 and not pending
    # the same across ranks: rank 1 waits until rank 0's completed writes cover the later page too
    reports = {1: [1, 0], 2: [2, 0]}
    g = OneOfTwo(1, lambda n: reports[n])
    gate = VisibilityGate(g, 4, shared=True)
    gate.before_write(np.array([0]))
    gate.before_write(np.array([1]))
    gate.before_load(np.array([1, 0]))
    assert g.calls == 2 and gate.visible_writes == 2
    # and a write waits for the later of two loads of its pages
    g = OneOfTwo(0, lambda n: [INT64_MAX, n - 1])  # rank 1 has completed n - 1 loads by round n
    gate = VisibilityGate(g, 4, shared=True)
    gate.write_done(gate.before_write(np.array([0, 1])))
    gate.load_done(gate.before_load(np.array([0])))
    gate.load_done(gate.before_load(np.array([1])))
    gate.before_write(np.array([0, 1]))
    assert gate.visible_reads == 2 and g.calls == 3


def test_a_disabled_gate_never_waits():
    g = OneOfTwo(1, [0, 0])
    gate = VisibilityGate(g, 4, shared=True, enabled=False)
    gate.before_write(np.array([1]))
    gate.writes_completed = 0
    gate.before_load(np.array([1]))
    assert g.calls == 0


def _logged(order, extra=False):
    log = DecisionLog()
    a = RecordingAllocator(PageAllocator(32, 4, order), log, "l2")
    for op in range(3):
        log.begin(op)
        pages = a.alloc_pages(2)
        if extra and op == 1:
            a.free_pages(a.alloc_pages(1))
        a.free_pages(pages[:1])
        log.end()
    return log


def test_the_digest_is_a_function_of_the_decisions():
    assert _logged("fifo").digest == _logged("fifo").digest
    assert _logged("fifo").digest != _logged("fifo", extra=True).digest
    assert _logged("fifo").window[0][3] == "l2 alloc 2 [0, 1]; l2 free [0]"
    assert -(1 << 63) <= signed((1 << 64) - 1) == -1


def test_a_mismatch_names_the_first_diverging_op_and_each_ranks_decision():
    mine, theirs = _logged("fifo"), _logged("fifo", extra=True)
    g = OneOfTwo(0, [signed(theirs.digest), signed(theirs.read_digest)])
    g.peer_obj = theirs.window
    with pytest.raises(SpmdDivergence) as e:
        SpmdCheck(g, mine, every=3).after_op(2)
    assert e.value.op == 1 and e.value.decisions[0] != e.value.decisions[1]
    assert "first at op 1" in str(e.value) and "rank 1: l2 alloc 2" in str(e.value)


def test_agreeing_checks_clear_the_window():
    mine = _logged("lifo")
    g = OneOfTwo(0, [signed(mine.digest), signed(mine.read_digest)])
    check = SpmdCheck(g, mine, every=1)
    check.check()
    assert check.checks == 1 and mine.window == []


def test_the_workload_depends_on_the_seed_alone():
    a, b = make_ops(WorkloadConfig(ops=60, seed=5)), make_ops(WorkloadConfig(ops=60, seed=5))
    assert [(o.kind, o.tokens.tolist(), o.pages) for o in a] == [(o.kind, o.tokens.tolist(), o.pages) for o in b]
    assert {o.kind for o in a} == set(KINDS)
    assert [o.tokens.tolist() for o in make_ops(WorkloadConfig(ops=60, seed=6))] != [o.tokens.tolist() for o in a]


@pytest.mark.parametrize("kw, name", [
    (dict(ops=0), "ops"), (dict(seed=-1), "seed"), (dict(free_list="random"), "free_list"),
    (dict(check_every=0), "check_every"), (dict(inject_divergence_at=200), "inject_divergence_at"),
    (dict(shared=True), "shared_dir"), (dict(timeout=0), "timeout"), (dict(write_policy="x"), "write_policy"),
])
def test_a_bad_config_names_the_field(kw, name):
    with pytest.raises(ValueError, match=f"^{name}:"):
        WorkloadConfig(**kw)


def _one_rank(cfg, corrupt_host: bool) -> dict:
    """One rank's run in this process (no group); `corrupt_host`: zero the host pool after every op."""
    with get_backend("emu") as backend:
        cache = RankCache(cfg, None, backend, None, DecisionLog())
        try:
            for i, op in enumerate(make_ops(cfg)):
                cache.run(i, op)
                if corrupt_host:
                    cache.settle()  # the op's D2H landed: now its bytes go wrong
                    for buf in cache.host.buffers:
                        buf.zero_()
            cache.settle()
            return cache.stats()
        finally:
            cache.close()


def test_a_load_of_wrong_bytes_is_counted_as_a_mismatching_page():
    cfg = WorkloadConfig(ops=60, seed=1)
    clean = _one_rank(cfg, corrupt_host=False)
    assert clean["h2d_transfers"] >= 1 and clean["pages_read"] > 0 and clean["read_mismatch_pages"] == 0
    bad = _one_rank(cfg, corrupt_host=True)
    assert bad["h2d_transfers"] >= 1 and 0 < bad["read_mismatch_pages"] <= bad["pages_read"]


def test_the_report_counts_every_ranks_mismatches():
    cfg = WorkloadConfig(ops=10, seed=1)
    rank = {"digest": "00", "read_digest": "00", "host_pool_bytes": 8, "d2h_bytes": 0, "h2d_bytes": 0,
            "pages_read": 4, "registered_bytes": 0, "checks": 1, "pool": {}}
    results = [dict(rank, rank=0, read_mismatch_pages=0), dict(rank, rank=1, read_mismatch_pages=3),
               dict(rank, rank=2, read_mismatch_pages=2)]
    rep = report(cfg, results)
    assert rep["read_mismatches"] == 5 and rep["consistent"] and rep["ranks"] == 3
    assert not ok(rep) and ok(report(cfg, [dict(r, read_mismatch_pages=0) for r in results]))


def test_the_report_names_every_key_and_counts_a_private_pool_per_rank():
    cfg = WorkloadConfig(ops=10, seed=4, shared=False)
    rank = {"host_pool_bytes": 8, "h2d_bytes": 5, "pages_read": 4, "registered_bytes": 2, "checks": 3,
            "pool": {"kind": "private", "file_uid": 9}, "read_mismatch_pages": 0, "read_digest": "ab"}
    results = [dict(rank, rank=0, digest="01", d2h_bytes=7), dict(rank, rank=1, digest="01", d2h_bytes=6)]
    rep = report(cfg, results)
    assert list(rep)[:len(KEYS)] == list(KEYS)
    assert (rep["ranks"], rep["ops"], rep["digest"], rep["host_bytes_total"]) == (2, 10, "01", 16)
    assert rep["d2h_bytes_by_rank"] == {"0": 7, "1": 6} and rep["h2d_bytes_by_rank"] == {"0": 5, "1": 5}
    assert rep["pages_read_by_rank"] == {"0": 4, "1": 4} and rep["registered_bytes_by_rank"] == {"0": 2, "1": 2}
    assert rep["first_divergence"] is None and rep["reads_identical"] and rep["checks"] == 3
    assert rep["host_pool"] == {"kind": "private"}  # the file's identity is not a figure
    assert (rep["seed"], rep["shared"], rep["geometry"]["page_size"]) == (4, False, cfg.page_size)
    assert ok(rep)
    shared = report(WorkloadConfig(ops=10, seed=4, shared=True, shared_dir="/dev/shm"),
                    [results[0], dict(results[1], digest="02", read_digest="cd")])
    assert shared["host_bytes_total"] == 8 and not shared["consistent"] and shared["digest"] is None
    assert not shared["reads_identical"] and not ok(shared)
    # reads that differ fail a run on their own; a report without the key (older) does not
    assert not ok({"consistent": True, "read_mismatches": 0, "reads_identical": False})
    assert ok({"consistent": True, "read_mismatches": 0})


def test_signed_maps_a_64_bit_digest_to_int64_and_back():
    assert signed(5) == 5 and signed((1 << 63) - 1) == (1 << 63) - 1  # below 2^63: unchanged
    assert signed(1 << 63) == -(1 << 63) and signed((1 << 64) - 1) == -1
    assert all(signed(u) % (1 << 64) == u for u in (0, 1, 1 << 62, 1 << 63, (1 << 64) - 1))

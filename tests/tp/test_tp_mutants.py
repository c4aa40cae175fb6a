"""hicache_ref.tp's deciding modules, pinned where mutation testing found them loose (ci/mutation.sh).

Test names carry the module they guard (gate_, digest_, report_, rank_cache_): ci/mutation.sh
selects them by that prefix. Ranks are threads of one process (thread_group), so a group of
three runs in milliseconds; the rank processes are tests/tp/test_tp_ranks.py's.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import numpy as np
import pytest

from hal.backend import get_backend
from hicache_ref.core.allocator import PageAllocator
from hicache_ref.tp.digest import DECISION_CHARS, DecisionLog, RecordingAllocator, SpmdCheck, SpmdDivergence
from hicache_ref.tp.group import INT64_MAX
from hicache_ref.tp.rank_cache import RankCache, geometry, host_pool_bytes
from hicache_ref.tp.report import KEYS, divergence_report, report
from hicache_ref.tp.shared_pool import open_host_buffer
from hicache_ref.tp.visibility import VisibilityGate
from hicache_ref.tp.worker import run_ops
from hicache_ref.tp.workload import Op, WorkloadConfig, make_ops
from tests.thread_group import run_ranks


class Peer:
    """Rank `rank` of a two-rank group whose other rank answers round n of all_reduce with `answer(n)`."""

    def __init__(self, rank, answer):
        self.rank, self.world, self.answer, self.calls = rank, 2, answer, 0

    def all_reduce(self, values, op):
        self.calls += 1
        assert op == "min"
        return [min(a, b) for a, b in zip(values, self.answer(self.calls), strict=True)]


# -- visibility ------------------------------------------------------------------------------

def test_gate_counts_one_sync_per_collective_round():
    reports = {1: [0, 0], 2: [0, 0], 3: [1, 0]}
    g = Peer(1, lambda n: reports[n])
    gate = VisibilityGate(g, 8, shared=True)
    assert gate.syncs == 0
    gate.before_write(np.array([2]))
    gate.before_load(np.array([2]))
    assert g.calls == 3 and gate.syncs == 3  # bench spmd reports this as gate_syncs
    gate.before_load(np.array([2]))  # visible already: no round
    assert gate.syncs == 3


def test_gate_of_a_non_writer_takes_the_writers_count_not_its_own():
    # rank 1 numbers writes but issues none: its own count must not hold back what rank 0 made visible
    g = Peer(1, lambda n: [3, 0])  # rank 0 has completed 3 writes
    gate = VisibilityGate(g, 8, shared=True)
    gate.before_write(np.array([0]))
    gate.before_load(np.array([0]))
    assert gate.visible_writes == 3 and gate.syncs == 1
    gate.before_write(np.array([1]))
    gate.before_load(np.array([1]))  # write 2 is covered by the 3 rank 0 reported: no second round
    assert gate.syncs == 1 and g.calls == 1


def test_gate_writer_waits_for_its_own_outstanding_write_before_a_load():
    # rank 0 writes page 0 (D2H not yet completed); rank 1 reports nothing outstanding
    pending = [1]
    g = Peer(0, lambda n: [INT64_MAX, 0])
    gate = VisibilityGate(g, 4, shared=True,
                          progress=lambda: bool(pending) and (gate.write_done(pending.pop()) or True))
    assert gate.writer
    gate.before_write(np.array([0]))
    gate.before_load(np.array([0]))
    assert not pending and gate.writes_completed == 1 and gate.visible_writes == 1
    assert gate.syncs == 2  # round 1: short of its own write, progress; round 2: visible


def test_gate_of_one_rank_or_no_group_is_private():
    assert not VisibilityGate(None, 4, shared=True).shared
    one = Peer(0, lambda n: [0, 0])
    one.world = 1
    gate = VisibilityGate(one, 4, shared=True)
    assert gate.writer
    gate.write_done(gate.before_write(np.array([0])))
    gate.before_load(np.array([0]))
    assert gate.writes_completed == 1


# -- digest ----------------------------------------------------------------------------------

def _log(decisions) -> DecisionLog:
    """A log of ops whose allocator calls are `decisions[op]`: lists of ("alloc", n) / ("free", k)."""
    log = DecisionLog()
    a = RecordingAllocator(PageAllocator(64, 4, "fifo"), log, "l1")
    held = []
    for op, calls in enumerate(decisions):
        log.begin(op)
        for kind, n in calls:
            if kind == "alloc":
                held.append(a.alloc_pages(n))
            else:
                a.free_pages(held.pop(0)[:n])
        log.end()
    return log


def test_digest_window_shows_each_ops_decisions_or_that_there_were_none():
    log = _log([[("alloc", 2)], [], [("free", 1)]])
    assert [(op, text) for op, _, _, text in log.window] == [
        (0, "l1 alloc 2 [0, 1]"), (1, "no allocator call"), (2, "l1 free [0]")]
    assert log.window[1][1] == log.window[0][1]  # nothing decided at op 1: the digest did not move
    assert log.window[2][1] != log.window[1][1]


def test_digest_window_shows_a_decision_of_exactly_decision_chars_whole():
    log = DecisionLog()
    log.begin(0)
    kind = "k" * (DECISION_CHARS - len("l1  none"))
    log.record("l1", kind, None)
    log.end()
    assert log.window[0][3] == f"l1 {kind} none" and len(log.window[0][3]) == DECISION_CHARS


def test_digest_window_cuts_a_long_decision_at_decision_chars():
    log = _log([[("alloc", 1)] * 40])
    text = log.window[0][3]
    assert len(text) == DECISION_CHARS and text.endswith("...") and text.startswith("l1 alloc 1 [0]; l1 alloc 1 [1]")
    short = _log([[("alloc", 1)]]).window[0][3]
    assert short == "l1 alloc 1 [0]"


def test_digest_tells_apart_what_and_when_and_which_tier():
    def one(tier, kind, pages, op=0):
        log = DecisionLog()
        log.begin(op)
        log.record(tier, kind, pages)
        return log.digest
    base = one("l1", "alloc 1", [3])
    assert base == one("l1", "alloc 1", [3])
    assert len({base, one("l2", "alloc 1", [3]), one("l1", "free", [3]), one("l1", "alloc 1", [4]),
                one("l1", "alloc 1", [3], op=1), one("l1", "alloc 1", None), one("l1", "alloc 1", [])}) == 7
    assert one("l1", "alloc 1", None) != 0


def test_digest_of_reads_chains_every_read_and_is_off_when_logging_is():
    t0 = time.perf_counter()
    log = DecisionLog()
    log.record_read(b"ab")
    first, spent = log.read_digest, log.seconds
    assert first != 0 and spent > 0
    log.record_read(b"ab")
    assert log.read_digest not in (0, first) and log.seconds > spent  # the time adds up
    log.begin(0)
    spent = log.seconds
    log.record("l1", "free", [1])
    log.record("l1", "free", None)
    assert spent < log.seconds <= time.perf_counter() - t0  # logging's own time, within the test's
    off = DecisionLog(enabled=False)
    off.begin(0)
    off.record("l1", "alloc 1", [1])
    off.record_read(b"ab")
    off.end()
    assert (off.digest, off.read_digest, off.window, off.seconds) == (0, 0, [], 0.0)


def _checked(world, decisions_of, every=1, reads_of=None):
    """Each thread rank's SpmdCheck over its own log (`decisions_of(rank)`), checked after every op
    and at the end; the check, or the exception the rank raised."""
    def rank(group):
        log = DecisionLog()
        a = RecordingAllocator(PageAllocator(64, 4, "fifo"), log, "l1")
        check = SpmdCheck(group, log, every)
        for op, calls in enumerate(decisions_of(group.rank)):
            log.begin(op)
            for n in calls:
                a.alloc_pages(n)
            if reads_of is not None:
                log.record_read(reads_of(group.rank, op))
            log.end()
            check.after_op(op)
        check.check()
        return check
    return run_ranks(world, rank)


def test_digest_checks_count_every_comparison():
    t0 = time.perf_counter()
    out = _checked(3, lambda r: [[1], [2], [], [1]], every=2)
    assert [c.checks for c in out] == [3, 3, 3]  # after ops 1 and 3, and the final check
    assert all(c.reads_identical and c.log.window == [] for c in out)
    assert all(0 < c.seconds <= time.perf_counter() - t0 for c in out)  # within the run's wall time
    one = _checked(3, lambda r: [[1]], every=5)  # the final check only
    assert all(c.checks == 1 for c in one)


def test_digest_check_seconds_sum_every_checks_wait_for_the_slowest_rank():
    def rank(group):
        log = DecisionLog()
        check = SpmdCheck(group, log, 1)
        for op in range(3):
            log.begin(op)
            log.end()
            if group.rank == 1:
                time.sleep(0.1)  # rank 0 waits for it in every check
            check.after_op(op)
        return check
    fast, slow = run_ranks(2, rank)
    assert fast.checks == slow.checks == 3 and fast.seconds >= 0.25 > slow.seconds


def test_digest_divergence_of_one_rank_in_three_is_raised_on_every_rank_naming_each_decision():
    out = _checked(3, lambda r: [[1], [2] if r != 2 else [3], [1]], every=3)
    assert all(isinstance(e, SpmdDivergence) for e in out)
    e = out[0]
    assert (e.op, e.what) == (1, "allocator decisions")
    assert e.decisions == {0: "l1 alloc 2 [1, 2]", 1: "l1 alloc 2 [1, 2]", 2: "l1 alloc 3 [1, 2, 3]"}
    assert str(e) == ("SPMD divergence: allocator decisions differ first at op 1 "
                      "(rank 0: l1 alloc 2 [1, 2]; rank 1: l1 alloc 2 [1, 2]; rank 2: l1 alloc 3 [1, 2, 3])")
    assert all((x.op, x.decisions) == (e.op, e.decisions) for x in out)


def test_digest_read_divergence_of_one_rank_in_three_is_raised_as_kv_bytes_read():
    out = _checked(3, lambda r: [[1], [1], [1]], every=3,
                   reads_of=lambda r, op: b"bad" if (r, op) == (1, 2) else b"kv")
    assert all(isinstance(e, SpmdDivergence) for e in out)
    assert (out[1].op, out[1].what) == (2, "KV bytes read")
    assert str(out[1]).startswith("SPMD divergence: KV bytes read differ first at op 2 (rank 0: l1 alloc 1 [2]; ")


def test_digest_reads_that_differ_are_noted_before_the_raise():
    log = DecisionLog()
    log.begin(0)
    log.record_read(b"a")
    log.end()

    def rank(group):
        mine = DecisionLog()
        mine.begin(0)
        mine.record_read(b"a" if group.rank == 0 else b"b")
        mine.end()
        check = SpmdCheck(group, mine, 1)
        try:
            check.check()
        except SpmdDivergence:
            return check
    out = run_ranks(2, rank)
    assert [c.reads_identical for c in out] == [False, False] and [c.checks for c in out] == [1, 1]


def test_digest_divergence_in_window_length_only_names_each_ranks_count():
    # rank 1 logged one op more than rank 0 since the last check: no op differs, the lengths do
    out = _checked(2, lambda r: [[1], [2]] + ([[1]] if r == 1 else []), every=5)
    assert all(isinstance(e, SpmdDivergence) for e in out)
    e = out[0]
    assert e.op == 1 and e.decisions == {0: "2 ops logged", 1: "3 ops logged"}
    assert str(e) == ("SPMD divergence: allocator decisions differ first at op 1 "
                      "(rank 0: 2 ops logged; rank 1: 3 ops logged)")


def test_digest_read_divergence_in_window_length_only_still_says_kv_bytes_read():
    # rank 1 logged one more op, with a read and no allocator call: decisions agree, reads do not
    out = _checked(2, lambda r: [[1]] + ([[]] if r == 1 else []), every=5, reads_of=lambda r, op: b"kv")
    assert [(e.op, e.what, e.decisions) for e in out] == [(0, "KV bytes read", {0: "1 ops logged",
                                                                                 1: "2 ops logged"})] * 2


def test_digest_divergence_names_op_minus_one_when_a_rank_logged_nothing():
    out = _checked(2, lambda r: [[1]] if r == 1 else [], every=5)
    assert [(e.op, e.decisions) for e in out] == [(-1, {0: "0 ops logged", 1: "1 ops logged"})] * 2


def test_digest_divergence_default_names_allocator_decisions():
    e = SpmdDivergence(4, {1: "b", 0: "a"})
    assert (e.op, e.what, e.decisions) == (4, "allocator decisions", {1: "b", 0: "a"})
    assert str(e) == "SPMD divergence: allocator decisions differ first at op 4 (rank 0: a; rank 1: b)"


@pytest.mark.parametrize("every", [0, -1, True, 1.5, "2"])
def test_digest_check_every_must_be_a_positive_count(every):
    with pytest.raises(ValueError, match="^check_every: expected a positive number of ops, got "):
        SpmdCheck(None, DecisionLog(), every)


def test_digest_disabled_log_is_never_compared():
    check = SpmdCheck(None, DecisionLog(enabled=False), 1)  # no group: a collective would fail
    check.after_op(0)
    check.check()
    assert check.checks == 0 and check.seconds == 0.0


def test_digest_recording_allocator_logs_slot_calls_as_pages_and_delegates_the_rest():
    log = DecisionLog()
    inner = PageAllocator(32, 4, "fifo")
    a = RecordingAllocator(inner, log, "l2")
    log.begin(0)
    slots = a.alloc(8)
    assert slots.tolist() == list(range(8)) and a.page_size == 4
    a.free(slots[:4])
    assert a.alloc(1000) is None
    log.end()
    assert log.window[0][3] == "l2 alloc 2 [0, 1]; l2 free [0]; l2 alloc 250 none"


# -- report ----------------------------------------------------------------------------------

def _cfg(**kw):
    base = dict(ops=12, seed=7, free_list="lifo", check_every=5, shared=True, shared_dir="/dev/shm",
                inject_divergence_at=3, write_policy="write_through", layers=3, kv_dim=32, page_size=2,
                l1_pages=9, l2_pages=17)
    return WorkloadConfig(**dict(base, **kw))


def _echo_expected(cfg):
    geom = geometry(cfg)
    return {"seed": 7, "shared": True, "free_list": "lifo", "check_every": 5, "write_policy": "write_through",
            "inject_divergence_at": 3,
            "geometry": {"attention": geom.attention, "layers": geom.layers, "kv_dim": geom.head_dim,
                         "dtype": "bf16", "page_size": geom.page_size, "l1_pages": 9, "l2_pages": 17}}


def test_report_echoes_the_workload_it_ran():
    cfg = _cfg()
    rank = {"digest": "0a", "read_digest": "0b", "host_pool_bytes": 8, "d2h_bytes": 1, "h2d_bytes": 2,
            "pages_read": 3, "registered_bytes": 4, "checks": 5, "pool": {}, "read_mismatch_pages": 0}
    rep = report(cfg, [dict(rank, rank=0), dict(rank, rank=1)])
    expected = _echo_expected(cfg)
    assert {k: rep[k] for k in expected} == expected
    assert str(geometry(cfg).dtype) == "torch.bfloat16" and expected["geometry"]["attention"] == "mla"


def test_report_of_a_divergence_names_the_op_what_and_each_ranks_decision():
    cfg = _cfg()
    rep = divergence_report(cfg, 3, SpmdDivergence(2, {2: "l1 alloc 1 [5]", 0: "l1 alloc 1 [4]"}, "KV bytes read"))
    assert list(rep)[:len(KEYS)] == list(KEYS)
    assert (rep["ranks"], rep["ops"], rep["consistent"], rep["digest"]) == (3, 12, False, None)
    assert (rep["host_bytes_total"], rep["d2h_bytes_by_rank"], rep["read_mismatches"]) == (None, None, None)
    assert rep["first_divergence"] == {"op": 2, "what": "KV bytes read",
                                       "decisions": {"0": "l1 alloc 1 [4]", "2": "l1 alloc 1 [5]"}}
    assert list(rep["first_divergence"]["decisions"]) == ["0", "2"]
    expected = _echo_expected(cfg)
    assert {k: rep[k] for k in expected} == expected


# -- rank_cache ------------------------------------------------------------------------------

def _spmd(cfg, world, tmp_path):
    """`cfg` on `world` thread ranks, each with its own emu backend, over the run's host buffer
    (shared_pool's, in `tmp_path` when shared): each rank's stats, digests and cache, or its error."""
    def rank(group):
        with get_backend("emu") as backend:
            buf, _ = open_host_buffer(group, host_pool_bytes(cfg), shared=cfg.shared,
                                      shared_dir=str(tmp_path) if cfg.shared else None, backend=backend)
            try:
                stats, log, _, _ = run_ops(cfg, group, backend, buf)
                return dict(stats, digest=log.digest, read_digest=log.read_digest, calls=group.calls)
            finally:
                buf.close()
    return run_ranks(world, rank)


STATS = {"d2h_bytes", "h2d_bytes", "d2h_transfers", "h2d_transfers", "read_mismatch_pages", "pages_read",
         "gate_syncs", "host_pool_bytes"}


def test_rank_cache_shared_pool_only_rank_0_writes_and_every_rank_reads_its_bytes(tmp_path):
    cfg = WorkloadConfig(ops=40, seed=3, shared=True, shared_dir=str(tmp_path), check_every=8)
    out = _spmd(cfg, 3, tmp_path)
    assert not [e for e in out if isinstance(e, BaseException)], out
    assert all(set(r) - {"digest", "read_digest", "calls"} == STATS for r in out)
    assert len({r["digest"] for r in out}) == 1 and len({r["read_digest"] for r in out}) == 1
    assert out[0]["d2h_bytes"] > 0 and out[0]["d2h_transfers"] > 0  # the writer rule:
    assert [r["d2h_bytes"] for r in out[1:]] == [0, 0] and [r["d2h_transfers"] for r in out[1:]] == [0, 0]
    assert all(r["read_mismatch_pages"] == 0 and r["pages_read"] > 0 and r["h2d_transfers"] > 0 for r in out)
    assert len({(r["h2d_bytes"], r["pages_read"], r["gate_syncs"]) for r in out}) == 1  # the same rounds
    assert out[0]["gate_syncs"] > 0
    assert all(r["host_pool_bytes"] == host_pool_bytes(cfg) for r in out)
    # without the gate no collective runs for visibility (the mode that shows the gate is needed)
    off = _spmd(WorkloadConfig(ops=12, seed=3, shared=True, shared_dir=str(tmp_path), gate=False,
                               self_check=False), 2, tmp_path)
    assert [r["gate_syncs"] for r in off] == [0, 0]


def test_rank_cache_private_pools_each_rank_writes_its_own(tmp_path):
    cfg = WorkloadConfig(ops=30, seed=3)
    out = _spmd(cfg, 2, tmp_path)
    assert out[0]["d2h_bytes"] == out[1]["d2h_bytes"] > 0 and [r["gate_syncs"] for r in out] == [0, 0]
    assert all(r["read_mismatch_pages"] == 0 for r in out) and out[0]["digest"] == out[1]["digest"]


def test_rank_cache_injected_divergence_is_the_last_ranks_extra_page_at_that_op(tmp_path):
    cfg = WorkloadConfig(ops=8, seed=2, inject_divergence_at=5, check_every=1)
    for world in (2, 3):
        out = _spmd(cfg, world, tmp_path)
        assert all(isinstance(e, SpmdDivergence) for e in out), out
        e = out[0]
        assert (e.op, e.what) == (5, "allocator decisions")
        last = e.decisions[world - 1]
        assert last.startswith("l1 alloc 1 [") and "; l1 free [" in last
        assert all(e.decisions[r] == e.decisions[0] != last for r in range(world - 1))
        assert f"rank {world - 1}: l1 alloc 1 [" in str(e)
    # one rank alone has nobody to diverge from: the hook does nothing
    alone = _one_rank_cache(cfg)
    assert alone["stats"]["read_mismatch_pages"] == 0


def _one_rank_cache(cfg, ops=None, host_buffer=None, after=None):
    """`ops` (default: the workload's) on one rank without a group; its stats, log and cache state
    (`after(i, cache)`: called after op i)."""
    with get_backend("emu") as backend:
        log = DecisionLog()
        cache = RankCache(cfg, None, backend, host_buffer, log)
        try:
            steps = []
            for i, op in enumerate(make_ops(cfg) if ops is None else ops):
                cache.run(i, op)
                if after is not None:
                    after(i, cache)
                steps.append(dict(cache.stats(), issued=cache.gate.writes_issued,
                                  completed=cache.gate.writes_completed, decisions=log.window[-1][3]))
            cache.settle()
            on_device = backend.is_device(cache.device.buffers[0][0])
            registered = cache.host.host_buffer.report()["registered_bytes"] if host_buffer is None else None
            return {"stats": cache.stats(), "steps": steps, "log": log, "on_device": on_device,
                    "registered": registered, "settled": (cache.gate.writes_issued, cache.gate.writes_completed)}
        finally:
            cache.close()


def _doc(pages, ps=4, base=1000):
    return np.arange(base, base + pages * ps, dtype=np.int64)


def test_rank_cache_fresh_stats_are_zero_and_its_pools_live_where_the_backend_put_them():
    cfg = WorkloadConfig(ops=1, seed=0)
    r = _one_rank_cache(cfg, ops=[])
    assert r["stats"] == dict(dict.fromkeys(STATS, 0), host_pool_bytes=host_pool_bytes(cfg))
    # one L2 pool: every layer's latent row (kv_dim bf16 values, one head) of every L2 token
    assert host_pool_bytes(cfg) == cfg.layers * cfg.l2_pages * cfg.page_size * cfg.kv_dim * 2
    assert r["on_device"]  # L1 is the backend's device memory, not host memory
    assert r["registered"] >= host_pool_bytes(cfg)  # L2 registered with the backend


def test_rank_cache_insert_allocates_only_what_the_cached_prefix_lacks_and_frees_a_partial_page():
    cfg = WorkloadConfig(ops=1, seed=0, write_policy="write_back")
    a = _doc(2)
    ops = [Op("insert", a, 0),
           Op("insert", np.concatenate([a, _doc(1, base=5000)]), 0),  # one page more: one page allocated
           Op("insert", np.concatenate([a, _doc(1, base=6000)[:2]]), 0)]  # half a page more: taken and returned
    steps = _one_rank_cache(cfg, ops)["steps"]
    assert steps[0]["decisions"] == "l1 alloc 2 [0, 1]"  # write_back: no L2 page yet
    assert steps[1]["decisions"] == "l1 alloc 1 [2]"
    assert steps[2]["decisions"] == "l1 alloc 1 [3]; l1 free [3]"
    assert all(s["d2h_bytes"] == 0 and s["read_mismatch_pages"] == 0 for s in steps)
    assert [s["pages_read"] for s in steps] == [0, 2, 4]  # each insert reads back its cached prefix


def test_rank_cache_insert_of_a_page_size_1_token_is_cached():
    cfg = WorkloadConfig(ops=1, seed=0, page_size=1, write_policy="write_back")
    t = np.array([7], dtype=np.int64)
    steps = _one_rank_cache(cfg, [Op("insert", t, 0), Op("match", t, 0)])["steps"]
    assert steps[0]["decisions"] == "l1 alloc 1 [0]" and steps[1]["pages_read"] == 1
    short = _one_rank_cache(WorkloadConfig(ops=1, seed=0), [Op("insert", t, 0), Op("match", t, 0)])["steps"]
    assert short[0]["decisions"] == "l1 alloc 1 [0]; l1 free [0]" and short[1]["pages_read"] == 0


def test_rank_cache_insert_takes_what_fits_when_l1_is_short():
    cfg = WorkloadConfig(ops=1, seed=0, l1_pages=3, write_policy="write_back")
    doc = _doc(5)
    steps = _one_rank_cache(cfg, [Op("insert", doc, 0), Op("match", doc, 0)])["steps"]
    assert steps[0]["decisions"].endswith("; l1 alloc 3 [0, 1, 2]")  # all 5 refused: the 3 there are
    assert steps[1]["pages_read"] == 3


def test_rank_cache_write_through_backs_up_asynchronously_until_the_next_op():
    cfg = WorkloadConfig(ops=1, seed=0, write_policy="write_through")
    r = _one_rank_cache(cfg, [Op("insert", _doc(2), 0), Op("match", _doc(2), 0)])
    s0, s1 = r["steps"]
    assert s0["decisions"] == "l1 alloc 2 [0, 1]; l2 alloc 2 [0, 1]"
    assert (s0["issued"], s0["completed"]) == (1, 0)  # the backup's D2H is still in flight after its op
    assert (s1["issued"], s1["completed"]) == (1, 1) and s1["d2h_bytes"] > 0  # the next op waited for it
    assert r["settled"] == (1, 1)


def test_rank_cache_load_of_a_page_whose_backup_is_in_flight_waits_for_it_through_the_gate():
    # Ops settle at their start, so no op loads mid-D2H today; the gate is the guard if one ever does.
    def load_now(i, cache):
        host_pages = cache._backups[0].host_pages  # op 0's backup, its D2H still outstanding
        seen.append((len(cache._outstanding), cache.gate.writes_completed))
        cache.gate.before_load(host_pages)
        seen.append((len(cache._outstanding), cache.gate.writes_completed))

    for gate, after in ((True, (0, 1)), (False, (1, 0))):
        seen = []
        cfg = WorkloadConfig(ops=1, seed=0, write_policy="write_through", gate=gate)
        _one_rank_cache(cfg, [Op("insert", _doc(2), 0)], after=load_now)
        assert seen == [(1, 0), after], gate  # gated: rank 0 waited for its own write; off: it did not


def test_rank_cache_injected_divergence_returns_its_page_so_later_decisions_agree():
    # the last rank of two, its digest never compared: after the injected op its L1 has a plain run's room
    group = Peer(1, lambda n: [INT64_MAX, INT64_MAX])
    base = WorkloadConfig(ops=10, seed=2, self_check=False)
    runs = {}
    for inject in (None, 4):
        cfg = dataclasses.replace(base, inject_divergence_at=inject)
        with get_backend("emu") as backend:
            log = DecisionLog()
            cache = RankCache(cfg, group, backend, None, log)
            try:
                free = []
                for i, op in enumerate(make_ops(cfg)):
                    cache.run(i, op)
                    free.append(cache.device.allocator.available_pages)
                runs[inject] = free, [w[3] for w in log.window]
            finally:
                cache.close()
    (plain_free, plain_log), (inj_free, inj_log) = runs[None], runs[4]
    assert inj_free == plain_free  # the injected page came back: every later op has the same room
    page = inj_log[4].split("]")[0].removeprefix("l1 alloc 1 [")
    assert inj_log[4].startswith(f"l1 alloc 1 [{page}]; l1 free [{page}]; ") and inj_log[:4] == plain_log[:4]


def test_rank_cache_settle_waits_for_every_outstanding_backup():
    cfg = WorkloadConfig(ops=1, seed=0, write_policy="write_through")
    r = _one_rank_cache(cfg, [Op("insert", _doc(2), 0), Op("insert", _doc(2, base=3000), 0),
                              Op("insert", _doc(2, base=4000), 0)])
    assert r["steps"][-1]["issued"] == 3 and r["settled"] == (3, 3)
    assert r["stats"]["d2h_transfers"] == 3


def _split_doc_evicted(policy):
    """A 4-page document inserted as 2 + 2 pages, its last 2 evicted from L1 (so kept in L2 only)."""
    a, b = _doc(2), _doc(4)
    return [Op("insert", a, 0), Op("insert", b, 0), Op("backup", b, 0), Op("evict", b, 2)], b


@pytest.mark.parametrize("policy", ["write_back", "write_through"])
def test_rank_cache_load_back_of_an_evicted_tail_reads_its_bytes_at_their_positions(policy):
    cfg = WorkloadConfig(ops=1, seed=0, write_policy=policy)
    ops, b = _split_doc_evicted(policy)
    r = _one_rank_cache(cfg, ops + [Op("load_back", b, 0), Op("match", b, 0), Op("load_back", b, 0)])
    ev, lb, m, again = r["steps"][3:]
    assert ev["decisions"].startswith("l1 free [")
    assert lb["h2d_transfers"] == 1 and lb["pages_read"] - ev["pages_read"] == 2  # the tail, checked
    assert m["pages_read"] - lb["pages_read"] == 4 and r["stats"]["read_mismatch_pages"] == 0
    assert again["h2d_transfers"] == 1  # all on L1 now: nothing to load


def test_rank_cache_insert_over_an_evicted_tail_loads_it_and_writes_after_it():
    cfg = WorkloadConfig(ops=1, seed=0, write_policy="write_back")
    ops, b = _split_doc_evicted("write_back")
    longer = np.concatenate([b, _doc(2, base=9000)])
    r = _one_rank_cache(cfg, ops + [Op("insert", longer, 0), Op("match", longer, 0)])
    ins, m = r["steps"][4:]
    assert ins["h2d_transfers"] == 1 and ins["decisions"].count("l1 alloc 2 [") == 2  # the tail, then 2 new
    assert m["pages_read"] - ins["pages_read"] == 6 and r["stats"]["read_mismatch_pages"] == 0


def test_rank_cache_counts_each_page_whose_bytes_differ_in_any_layer():
    # a 3-page document backed up to L2, evicted from L1; then layer 0 of its last two L2 pages goes
    # wrong (the other layer stays right), and the load back must count exactly those two pages
    cfg = WorkloadConfig(ops=1, seed=0, write_policy="write_through")
    doc = _doc(3)

    def corrupt(i, cache):
        if i == 1:
            cache.settle()
            layer0 = cache.host.buffers[0][0]  # layer_first: [layer][token]...
            layer0[cfg.page_size: 3 * cfg.page_size] = 0
    r = _one_rank_cache(cfg, [Op("insert", doc, 0), Op("evict", doc, 3), Op("load_back", doc, 0)], after=corrupt)
    lb = r["steps"][2]
    assert (lb["pages_read"], lb["read_mismatch_pages"]) == (3, 2)


def test_rank_cache_backup_writes_only_the_pages_l2_lacks():
    cfg = WorkloadConfig(ops=1, seed=0, write_policy="write_back")
    a, b = _doc(2), _doc(4)
    steps = _one_rank_cache(cfg, [Op("insert", a, 0), Op("insert", b, 0), Op("backup", a, 0), Op("backup", b, 0),
                                  Op("backup", b, 0), Op("match", b, 0)])["steps"]
    assert steps[2]["decisions"] == "l2 alloc 2 [0, 1]"
    assert steps[3]["decisions"] == "l2 alloc 2 [2, 3]"  # only the two pages not yet in L2
    assert steps[4]["decisions"] == "no allocator call" and steps[-1]["d2h_transfers"] == 2


def test_rank_cache_write_back_writes_evicted_pages_before_freeing_them():
    cfg = WorkloadConfig(ops=1, seed=0, write_policy="write_back")
    b = _doc(4)
    r = _one_rank_cache(cfg, [Op("insert", b, 0), Op("evict", b, 4), Op("load_back", b, 0), Op("match", b, 0)])
    ev = r["steps"][1]
    assert ev["d2h_bytes"] > 0 and (ev["issued"], ev["completed"]) == (1, 1)  # written, waited for, then freed
    assert r["stats"]["h2d_transfers"] == 1 and r["stats"]["pages_read"] == 8
    assert r["stats"]["read_mismatch_pages"] == 0


def test_rank_cache_free_list_order_reaches_both_pools():
    def second(order, pages):  # the pages a second allocation gets after the first was freed
        alloc = PageAllocator(pages * 4, 4, order)
        alloc.free_pages(alloc.alloc_pages(2))
        return alloc.alloc_pages(2).tolist()
    a, b = _doc(2), _doc(2, base=3000)
    for order in ("fifo", "lifo"):
        cfg = WorkloadConfig(ops=1, seed=0, free_list=order, write_policy="write_through")
        steps = _one_rank_cache(cfg, [Op("insert", a, 0), Op("evict", a, 2), Op("evict_host", a, 2),
                                      Op("insert", b, 0)])["steps"]
        assert steps[-1]["decisions"] == f"l1 alloc 2 {second(order, 24)}; l2 alloc 2 {second(order, 48)}"
    assert second("fifo", 24) != second("lifo", 24) and second("fifo", 48) != second("lifo", 48)


def test_rank_cache_d2h_delay_sleeps_before_each_write_and_changes_no_decision(monkeypatch):
    from types import SimpleNamespace

    from hicache_ref.tp import rank_cache as rank_cache_module

    slept = []  # the delays asked for, in seconds (recorded, not slept)
    monkeypatch.setattr(rank_cache_module, "time", SimpleNamespace(sleep=slept.append))
    cfg = WorkloadConfig(ops=12, seed=1, write_policy="write_through")
    plain = _one_rank_cache(cfg)
    assert slept == []
    slow = _one_rank_cache(dataclasses.replace(cfg, d2h_delay_ms=600.0))
    writes = slow["stats"]["d2h_transfers"]
    assert writes >= 2 and len(slept) == writes  # one delay before each D2H
    assert all(0 <= s <= 0.6 for s in slept) and max(slept) > 0.06 and len(set(slept)) > 1  # drawn up to 600 ms (seeded)
    assert slow["log"].digest == plain["log"].digest and slow["stats"] == plain["stats"]


def test_rank_cache_kill_at_kills_that_rank_at_that_op():
    # kill_at is for the rank processes (tests/tp/test_tp_ranks.py); here one rank alone, in a fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run ops, noting each one's index before it starts
        try:
            os.close(read)
            ops = (Op("match", _doc(1), 0) for i in range(6) if os.write(write, b"%d " % i))
            _one_rank_cache(WorkloadConfig(ops=6, seed=0, faults={"kill_at": [0, 3]}), ops=ops)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        noted = f.read().split()
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert noted == [b"0", b"1", b"2", b"3"]  # killed at op 3, before op 4 was taken
    # another rank's kill_at leaves this rank running
    r = _one_rank_cache(WorkloadConfig(ops=6, seed=0, faults={"kill_at": [1, 3]}))
    assert len(r["steps"]) == 6

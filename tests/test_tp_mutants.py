"""hicache_ref.tp's deciding modules, pinned where mutation testing found them loose (ci/mutation.sh).

Test names carry the module they guard (gate_, digest_, report_, rank_cache_): ci/mutation.sh
selects them by that prefix. Ranks are threads of one process (thread_group), so a group of
three runs in milliseconds; the rank processes are tests/test_tp_ranks.py's.
"""

from __future__ import annotations

import numpy as np
import pytest
from thread_group import run_ranks

from hicache_ref.core.allocator import PageAllocator
from hicache_ref.tp.digest import DECISION_CHARS, DecisionLog, RecordingAllocator, SpmdCheck, SpmdDivergence
from hicache_ref.tp.group import INT64_MAX
from hicache_ref.tp.rank_cache import geometry
from hicache_ref.tp.report import KEYS, divergence_report, report
from hicache_ref.tp.visibility import VisibilityGate
from hicache_ref.tp.workload import WorkloadConfig


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
    log = DecisionLog()
    log.record_read(b"ab")
    first = log.read_digest
    assert first != 0
    log.record_read(b"ab")
    assert log.read_digest not in (0, first) and log.seconds > 0
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
    out = _checked(3, lambda r: [[1], [2], [], [1]], every=2)
    assert [c.checks for c in out] == [3, 3, 3]  # after ops 1 and 3, and the final check
    assert all(c.reads_identical and c.log.window == [] for c in out)
    assert all(c.seconds > 0 for c in out)


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

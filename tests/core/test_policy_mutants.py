"""The write policy's decisions one by one (hicache_ref.core.policy): thresholds, which inserts
count, per-request hit memory, refusals naming the option, and the LRU order of LeafHeap."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hicache_ref.core.policy import HIT_COUNTS, POLICIES, LeafHeap, WritePolicy, make_policy


@pytest.mark.parametrize("name, threshold, backs_up_at", [
    ("write_back", 2, None), ("write_through", 5, 1), ("write_through_selective", 3, 3),
])
def test_a_node_is_backed_up_on_insert_from_the_policys_threshold(name, threshold, backs_up_at):
    p = WritePolicy(name, threshold)
    assert p.threshold == backs_up_at and p.writes_back_on_evict == (name == "write_back")
    assert [p.should_back_up(h) for h in range(1, 6)] == [backs_up_at is not None and h >= backs_up_at
                                                       for h in range(1, 6)]


def test_the_defaults_are_selective_at_two_hits_per_request():
    for p in (make_policy(), WritePolicy("write_through_selective")):
        assert (p.name, p.threshold, p.hit_count) == ("write_through_selective", 2, "per_request")
        assert not p.should_back_up(1) and p.should_back_up(2)
    assert repr(make_policy("write_back", hit_count="per_insert")) == \
        "WritePolicy('write_back', threshold=None, hit_count='per_insert')"
    assert make_policy("write_through_selective", 4, "per_request_insert").hit_count == "per_request_insert"


@pytest.mark.parametrize("args, message", [
    (("write_around",), "policy: 'write_around' is not one of write_back, write_through, write_through_selective"),
    (("write_through_selective", 0), "threshold: must be a positive integer, got 0"),
    (("write_through_selective", 1.5), "threshold: must be a positive integer, got 1.5"),
    (("write_through_selective", 2, "per_token"),
     "hit_count: 'per_token' is not one of per_insert, per_request, per_request_insert"),
])
def test_a_bad_option_is_refused_in_one_line_naming_it(args, message):
    with pytest.raises(ValueError) as e:
        WritePolicy(*args)
    assert str(e.value) == message
    assert WritePolicy("write_through_selective", 1).threshold == 1  # the smallest threshold


@pytest.mark.parametrize("hit_count", HIT_COUNTS)
@pytest.mark.parametrize("name", POLICIES)
def test_which_inserts_count_hits(name, hit_count):
    p = WritePolicy(name, hit_count=hit_count)
    counts = {"per_request": (True, True), "per_request_insert": (name != "write_back",) * 2,
              "per_insert": (name != "write_back", False)}[hit_count]
    assert (p.counts_insert(chunked=False), p.counts_insert(chunked=True)) == counts
    assert p.backs_up_counted_only == (hit_count == "per_request_insert")


@pytest.mark.parametrize("hit_count", ["per_request", "per_request_insert"])
def test_a_requests_memory_is_kept_per_request_until_it_finishes(hit_count):
    p = WritePolicy("write_through_selective", hit_count=hit_count)
    p.record("a", 3, finished=False)
    p.record("b", 1, finished=False)
    p.record(None, 9, finished=False)  # an insert without a request is never remembered
    assert (p.counted_pages("a"), p.counted_pages("b"), p.counted_pages(None)) == (3, 1, 0)
    assert p.counted_pages("c") == 0 and p.requests_in_flight == 2
    p.record("z", 0, finished=False)  # an insert shorter than a page counted none
    assert p.counted_pages("z") == 0 and p.requests_in_flight == 3
    p.forget("z")
    p.record("b", 4, finished=True)
    assert p.counted_pages("b") == 0 and p.counted_pages("a") == 3 and p.requests_in_flight == 1
    p.forget("a")
    p.forget("never-seen")  # an unknown request is nothing to forget, not an error
    p.record("c", 2, finished=True)  # a request finished on its first insert leaves nothing
    assert p.requests_in_flight == 0 and p.counted_pages("a") == 0


def _node(i, t):
    return SimpleNamespace(id=i, last_access=t, leaf=True)


def test_leaf_heap_pops_least_recently_used_leaves_ties_to_the_older_node():
    heap = LeafHeap(lambda n: n.leaf)
    a, b, c, d, e = _node(1, 5), _node(2, 3), _node(3, 5), _node(4, 1), _node(0, 5)
    d.leaf = False  # not a leaf: never queued
    for n in (a, b, c, d):
        heap.push(n)
    assert len(heap) == 3
    b.last_access = 9  # touched since it was pushed: its stale entry is skipped
    heap.push(b)
    c.leaf = False  # stopped being a leaf
    assert [heap.pop(), heap.pop()] == [a, b] and heap.pop() is None and len(heap) == 0
    heap.rebuild([a, b, c, d])
    assert len(heap) == 2 and heap.pop() is a and heap.pop() is b and heap.pop() is None
    heap.rebuild([a, e])
    assert heap.pop() is e  # used as long ago as a: the older node (lower id) goes first

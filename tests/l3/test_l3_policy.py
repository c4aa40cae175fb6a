"""Prefetch policies on the modeled clock: pages used and modeled wait, worked out by hand."""

from __future__ import annotations

import math

import pytest

from hicache_ref.l3.guard import FaultGuard
from hicache_ref.l3.policy import (
    PREFETCH_POLICIES,
    BestEffort,
    L3Link,
    Timeout,
    WaitComplete,
    make_prefetch_policy,
)

# 32-byte pages at 32e-6 GB/s: one page per millisecond, after a 1 ms round trip.
LINK = L3Link(page_bytes=32, read_gbps=32e-6, write_gbps=32e-6, latency_s=1e-3)


def test_link_lands_pages_in_order_after_the_round_trip():
    assert LINK.read_seconds(0) == 0.0
    assert LINK.read_seconds(3) == pytest.approx(4e-3)
    assert LINK.pages_within(0.5e-3) == 0  # still in the round trip
    assert LINK.pages_within(4.5e-3) == 3
    assert LINK.pages_within(math.inf) == math.inf


def test_best_effort_takes_what_landed_within_the_slack_and_never_waits():
    assert BestEffort().decide(LINK, 10, 4, 0.0) == (0, 0.0)  # serial replay: no queue time
    used, wait = BestEffort().decide(LINK, 10, 4, 5.5e-3)  # (5.5 - 1) ms -> 4 whole pages
    assert used == 4 and wait == 0.0
    assert BestEffort().decide(LINK, 2, 4, 5.5e-3)[0] == 2  # never more than L3 holds


def test_wait_complete_takes_everything_and_waits_past_the_slack():
    used, wait = WaitComplete().decide(LINK, 10, 4, 0.0)
    assert used == 10 and wait == pytest.approx(11e-3)  # 1 ms + 10 pages x 1 ms
    used, wait = WaitComplete().decide(LINK, 10, 4, 5e-3)
    assert used == 10 and wait == pytest.approx(6e-3)


def test_timeout_stops_at_base_plus_per_ki_token():
    # 40 tokens: 2.5 ms + 0.1024 s x 40 / 1024 = 6.5 ms -> (6.5 - 1) ms -> 5 pages, waiting 6 ms.
    policy = Timeout(base_s=2.5e-3, per_ki_token_s=0.1024)
    assert policy.limit_seconds(40) == pytest.approx(6.5e-3)
    used, wait = policy.decide(LINK, 10, 4, 0.0)
    assert used == 5 and wait == pytest.approx(6e-3)
    # the limit follows the tokens asked for: 12 tokens -> 2.5 + 1.2 = 3.7 ms -> 2 pages, 3 ms
    assert policy.decide(LINK, 3, 4, 0.0) == (2, pytest.approx(3e-3))
    assert policy.decide(LINK, 3, 4, 4.5e-3) == (3, 0.0)  # a slack past the limit: done in the queue
    # upstream's defaults (1 s + 0.25 s per 1024 tokens) let an ordinary prefetch finish
    assert Timeout().decide(LINK, 10, 4, 0.0)[0] == 10


def test_policies_by_name_and_bad_names_refused():
    assert set(PREFETCH_POLICIES) == {"best_effort", "wait_complete", "timeout"}
    assert isinstance(make_prefetch_policy("timeout"), Timeout)
    with pytest.raises(ValueError, match="prefetch_policy"):
        make_prefetch_policy("eager")
    with pytest.raises(ValueError, match="read_gbps"):
        L3Link(page_bytes=32, read_gbps=0)


def test_guard_backs_off_doubling_in_requests_and_resets_on_success():
    g = FaultGuard(max_backoff=4)
    g.failed("x")
    assert g.errors == 1 and not g.available
    g.tick()
    assert g.available  # 1 request skipped
    g.failed("x")
    g.tick()
    assert not g.available  # 2 requests now
    g.tick()
    assert g.available
    for _ in range(5):
        g.failed("x")
    assert g._skip == 4  # capped
    g.succeeded()
    g.failed("x")
    assert g._skip == 1 and g.errors == 8

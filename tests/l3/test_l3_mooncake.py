"""The L3 tier on a real loopback Mooncake cluster: a tiny L1 and L2 over it reach the unlimited hit
rate, and a replay whose master is killed, restarted and stopped for a while completes with
l3_errors > 0, every hit's KV correct, and L3 in use again once the master is back."""

from __future__ import annotations

import pytest

from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.trace.reader import read_trace, request_tokens
from hicache_ref.spec import CacheSpec

SMALL = dict(page_size=256, attention="mla", layers=1, kv_dim=4, dtype="bf16", materialize=True,
             write_policy="write_through", l1_tokens=140_000, l2_tokens=280_000)
SEGMENT = ",segment=512MiB"  # the 1,500 requests' pages are ~110 MB of objects


pytestmark = pytest.mark.slow  # replays on a real loopback Mooncake cluster


def test_tiny_l1_l2_over_mooncake_reach_the_unlimited_hit_rate(mooncake_cluster, synthetic):
    unlimited = replay(CacheSpec.of(**{k: v for k, v in SMALL.items() if not k.endswith("_tokens")}), synthetic, 1500)
    fig = replay(CacheSpec.of(**SMALL, l3=mooncake_cluster.spec + SEGMENT), synthetic, 1500)
    assert fig["hit_rate"] == pytest.approx(unlimited["hit_rate"], abs=0.01)
    assert fig["l3_hit_tokens"] > 0 and fig["l3_errors"] == 0 and fig["kv_mismatch_tokens"] == 0
    assert fig["l3_storage"] == "mooncake"


def test_master_killed_mid_replay(fresh_mooncake_cluster, synthetic):
    cluster = fresh_mooncake_cluster
    spec = CacheSpec.of(**SMALL, l3=cluster.spec)
    backend, _ = spec.open_backend()
    cache = spec.build(backend)
    mismatches, written_when_back, resumed_at = 0, None, None
    try:
        for i, r in enumerate(read_trace(synthetic, 700)):
            if i == 100:
                cluster.restart_master()  # SIGKILL, then up again on the same ports: every object is gone
            elif i == 150:
                cluster.stop_master()  # down for 50 requests
            elif i == 200:
                cluster.start_master()
                written_when_back = cache.l3.counters["l3_pages_written"]
            res = cache.request(request_tokens(r.hash_ids, r.input_length))
            mismatches += res.kv_mismatch_tokens
            if i > 200 and cache.l3.counters["l3_pages_written"] > written_when_back:
                resumed_at = i
            if i >= 300 and resumed_at is not None:
                break  # the backoff (at most 64 requests) and the client's reconnect may take a while
    finally:
        cache.close()
        backend.close()
    fig = cache.l3.figures()
    assert fig["l3_errors"] > 0 and fig["l3_last_error"]
    assert mismatches == 0  # every L1, L2 and L3 hit's KV checked bit for bit
    assert resumed_at is not None  # written again once the master was back


def test_a_full_store_refuses_pages_for_room_not_as_errors(fresh_mooncake_cluster, synthetic):
    """A segment smaller than what the replay writes: the master has no room (NO_AVAILABLE_HANDLE)
    until it evicts, and objects under their lease cannot go. Those pages count as l3_full_pages,
    the store is not marked down for them, and writes go on (the later ones land as it evicts)."""
    big = {**SMALL, "kv_dim": 256, "l1_tokens": 70_000, "l2_tokens": 140_000}  # 128 KiB pages: 128 fill the segment
    fig = replay(CacheSpec.of(**big, l3=fresh_mooncake_cluster.spec + ",segment=16MiB"), synthetic, 300)
    assert fig["l3_full_pages"] > 0
    assert fig["l3_store_errors"] == 0 and fig["l3_errors"] == 0 and fig["l3_last_error"] is None
    assert fig["l3_writes_skipped"] == 0 and fig["kv_mismatch_tokens"] == 0
    assert fig["l3_pages_written"] > 16 * 2**20 // (256 * 512 + 48)  # more than one segment's worth: evicted and reused

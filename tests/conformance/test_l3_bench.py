"""conformance.bench.l3_hits: with and without L3 on the same requests; the gains are differences of the rows."""

from __future__ import annotations

import pytest

from conformance.bench.l3_hits import measure, summary_lines, tiers_for
from hicache_ref.sim.trace import TraceRequest


def test_tiers_hold_the_longest_request():
    reqs = [TraceRequest(0.0, 1000, 1, (1, 2)), TraceRequest(1.0, 300, 1, (3,))]
    assert tiers_for(reqs, 256) == (1024, 2048)


@pytest.mark.slow
def test_measure_file_store_on_the_conversation_trace():
    res = measure(limit=40, stores=("file",))
    row, base = res["stores"]["file"], res["without"]
    assert row["hit_rate_gain"] == pytest.approx(row["hit_rate"] - base["hit_rate"])
    assert row["hit_rate"] <= res["unlimited_hit_rate"] + 1e-12
    assert row["l3_errors"] == 0 and row["kv_mismatch_tokens"] == 0
    if row["net_benefit_seconds"] is not None:
        assert row["net_benefit_gain_seconds"] == pytest.approx(row["net_benefit_seconds"] - base["net_benefit_seconds"])
    assert any(line.startswith("L3 file: hit rate") for line in summary_lines(res))

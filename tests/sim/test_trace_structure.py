"""Where `trace synth` puts the reuse (global prefix, interleaved sessions, think time, turns, long
pauses), the seed's workload it makes, and `trace stats --l1-tokens` reading the one-pass curve."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from conformance.cli.main import main
from hicache_ref.sim.stack_distance import stack_profile
from hicache_ref.sim.synth_schedule import schedule
from hicache_ref.sim.trace_stats import prefix_reuse_tokens, trace_stats
from hicache_ref.sim.trace_synth import (
    SEED_WORKLOAD,
    global_share,
    seed_trace,
    synthesize,
    synthesize_trace,
    write_trace,
)

LONG = dict(requests=600, min_tokens=24_000, max_tokens=64_000, reuse=0.82, rate=2.0, seed=3)


def _hit(requests, capacity_tokens: int) -> float:
    return float(stack_profile(requests, 64).hit_rate([capacity_tokens])[0])


def test_the_new_options_keep_a_seed_deterministic(tmp_path):
    kw = dict(LONG, sessions=60, global_prefix_share=0.4, turns=5, think_time=8.0)
    write_trace(tmp_path / "a", synthesize(**kw))
    write_trace(tmp_path / "b", synthesize(**kw))
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert synthesize(**kw) != synthesize(**(kw | dict(seed=4)))
    assert synthesize(**kw) != synthesize(**(kw | dict(think_time=9.0)))


@pytest.mark.parametrize("share", [0.2, 0.5, 0.8])
def test_the_global_prefix_carries_the_share_of_reuse_asked(share):
    trace = synthesize_trace(**LONG, sessions=100, global_prefix_share=share)
    assert trace.global_prefix_tokens % 512 == 0 and trace.global_prefix_tokens > 0
    assert global_share(trace, prefix_reuse_tokens(trace.requests)) == pytest.approx(share, abs=0.05)


def test_a_larger_global_prefix_share_raises_a_small_cache_s_hit_rate():
    # 100 sessions of 24K-64K: 200K tokens hold the global prefix, hardly any conversation's history
    rates = [_hit(synthesize(**LONG, sessions=100, global_prefix_share=f), 200_000) for f in (0.2, 0.5, 0.8)]
    assert rates[0] + 0.15 < rates[1] and rates[1] + 0.15 < rates[2], rates


def test_more_interleaved_sessions_lengthen_reuse_distances():
    rates = [_hit(synthesize(**LONG, sessions=s, global_prefix_share=0.3), 400_000) for s in (5, 20, 80, 300)]
    assert all(a > b + 0.02 for a, b in zip(rates, rates[1:], strict=False)), rates
    # the reuse is the same: it only moves beyond the cache
    assert all(abs(trace_stats(synthesize(**LONG, sessions=s))["prefix_reuse_rate"] - 0.82) <= 0.02 for s in (5, 300))


def test_a_longer_think_time_lengthens_reuse_distances():
    kw = dict(LONG, sessions=40, global_prefix_share=0.3)
    at_once, short, long = (_hit(synthesize(**kw, think_time=t), 400_000) for t in (None, 2.0, 10.0))
    assert at_once > short + 0.02 and short > long + 0.05, (at_once, short, long)
    # nobody speaks again before it has thought (give or take the spread): no turn follows its own
    plan = schedule(np.random.default_rng(0), 400, 1000, 8000, 40, None, 10.0, 2.0)
    assert all(a.conversation != b.conversation for a, b in zip(plan, plan[1:], strict=False))


@pytest.mark.slow
def test_long_pauses_put_reuse_beyond_a_large_cache_and_keep_the_reuse_rate():
    kw = dict(LONG, requests=1200, sessions=40, global_prefix_share=0.4)
    plain, paused = synthesize(**kw), synthesize(**kw, long_pause_share=0.4, long_pause=300.0)
    assert synthesize(**kw, long_pause_share=0.4, long_pause=300.0) == paused  # deterministic
    assert synthesize(**kw, long_pause_share=None, long_pause=None) == plain  # off: the same bytes
    beyond = [trace_stats(r)["prefix_reuse_rate"] - _hit(r, 3_000_000) for r in (plain, paused)]
    assert beyond[0] < 0.01 < 0.05 < beyond[1], beyond  # 40 open conversations fit in 3M tokens
    assert abs(trace_stats(paused)["prefix_reuse_rate"] - 0.82) <= 0.02
    # a paused conversation comes back: a later turn continues it (its conversation number again)
    plan = schedule(np.random.default_rng(3), 1200, 24_000, 64_000, 40, None, None, 2.0, 0.4, 300.0)
    last: dict[int, float] = {}
    gaps = []
    for t in plan:
        if t.conversation in last:
            gaps.append(t.timestamp_ms - last[t.conversation])
        last[t.conversation] = t.timestamp_ms
    assert sum(g >= 0.75 * 300_000 for g in gaps) > 100


def test_a_conversation_ends_after_its_turns():
    plan = schedule(np.random.default_rng(1), 500, 1000, 64_000, 10, 3, None, None)
    per_conversation = Counter(t.conversation for t in plan)
    assert max(per_conversation.values()) == 3 and sum(t.first for t in plan) == len(per_conversation)
    unlimited = Counter(t.conversation for t in schedule(np.random.default_rng(1), 500, 1000, 64_000, 10,
                                                          None, None, None))
    assert max(unlimited.values()) > 3


@pytest.mark.slow
def test_the_seed_trace_has_the_seed_s_structure():
    reqs = seed_trace()
    assert reqs == seed_trace()  # deterministic
    assert all(24_000 <= r.input_length <= 64_000 for r in reqs)
    assert SEED_WORKLOAD.min_tokens == 24_000 and SEED_WORKLOAD.max_tokens == 64_000
    s = trace_stats(reqs, page_size=64, l1_tokens=400_000)
    assert abs(s["prefix_reuse_rate"] - 0.82) <= 0.02
    assert abs(s["l1_hit_rate"] - 0.4628) <= 0.02  # the seed's L1 alone (400K tokens): 46.28%
    shared_l2 = 400_000 + 8 * 835_000  # L1 and the TP-8 group's shared L2: ~72%
    full = trace_stats(reqs, page_size=64, l1_tokens=shared_l2)["l1_hit_rate"]
    assert abs(full - 0.72) <= 0.02
    # the seed's L2 was on a plateau: five eighths of it hit within a point of the whole
    assert full - trace_stats(reqs, page_size=64, l1_tokens=400_000 + 5 * 835_000)["l1_hit_rate"] <= 0.01
    assert 300 <= len(reqs) <= 2000  # a served replay of it stays quick


@pytest.mark.slow
def test_trace_stats_l1_tokens_reads_the_one_pass_curve(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    reqs = synthesize(**LONG, sessions=60, global_prefix_share=0.4)
    write_trace(path, reqs)
    assert main(["trace", "stats", str(path), "--l1-tokens", "300K", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["l1_tokens"] == 300_000
    assert s["l1_hit_rate"] == pytest.approx(_hit(reqs, 300_000))
    assert 0 < s["l1_hit_rate"] < s["unlimited_hit_rate"]
    # at a capacity the curve lists, the same figure
    point = s["hit_rate_by_capacity"][10]
    assert main(["trace", "stats", str(path), "--l1-tokens", str(point["capacity_tokens"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["l1_hit_rate"] == pytest.approx(point["hit_rate"])
    assert main(["trace", "stats", str(path), "--l1-tokens", "300K"]) == 0
    assert f"hit rate {s['l1_hit_rate']:.4f}" in capsys.readouterr().out
    assert main(["trace", "stats", str(path), "--json"]) == 0
    assert "l1_hit_rate" not in json.loads(capsys.readouterr().out)  # asked for only


def test_trace_synth_reports_where_the_reuse_sits(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["trace", "synth", "--out", str(out), "--requests", "300", "--min-tokens", "24K", "--max-tokens",
                 "64K", "--reuse", "0.8", "--sessions", "50", "--global-prefix-share", "0.5", "--turns", "8",
                 "--think-time", "5", "--rate", "2", "--json"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert abs(fig["prefix_reuse_rate"] - 0.8) <= 0.02 and fig["global_prefix_share"] == pytest.approx(0.5, abs=0.05)
    assert fig["global_prefix_tokens"] > 0 and fig["turns"] == 8 and fig["think_time"] == 5.0


@pytest.mark.parametrize("reuse, seed, sessions", [(0.6, 1, 16), (0.3, 2, 40)])
def test_the_reuse_feedback_lands_within_a_block_of_the_rate_asked(reuse, seed, sessions):
    """The feedback cuts each request's reuse to the running target: over ~1.5M tokens the rate is
    within a fraction of one 512-token block of it, not merely near it."""
    got = trace_stats(synthesize(requests=300, min_tokens=2000, max_tokens=8000, reuse=reuse, seed=seed,
                                 sessions=sessions))["prefix_reuse_rate"]
    assert abs(got - reuse) <= 5e-4, got

"""hicache trace stats / synth: the reuse-rate definition, synth determinism and its reuse target.
(Where synth puts the reuse, and the seed workload: test_trace_structure.py.)"""

from __future__ import annotations

import json

import pytest

from conformance.cli.main import main
from hicache_ref.sim.trace import TraceRequest, read_trace
from hicache_ref.sim.trace_stats import prefix_reuse_tokens, trace_stats
from hicache_ref.sim.trace_synth import synthesize, write_trace


def test_reuse_counts_the_leading_run_of_blocks_seen_with_the_same_prefix():
    reqs = [TraceRequest(0, 1024, 1, (1, 2)),
            TraceRequest(0, 1300, 1, (1, 2, 3)),  # blocks 1, 2 seen: 1024 reused
            TraceRequest(0, 1024, 1, (9, 2)),  # block 2 seen, but after another first block: not reused
            TraceRequest(0, 700, 1, (1, 7)),  # block 1 seen: 512
            TraceRequest(0, 1300, 1, (1, 2, 3))]  # all seen; the partial last block counts its 276 tokens
    assert prefix_reuse_tokens(reqs) == [0, 1024, 0, 512, 1300]
    s = trace_stats(reqs, page_size=64)
    assert s["prefix_reuse_rate"] == pytest.approx(2836 / sum(r.input_length for r in reqs))
    assert s["requests"] == 5 and s["input_length"]["p0"] == 700 and s["input_length"]["p100"] == 1300


# (requests, shortest, longest, sessions, the new structure options) and the reuse rates asked of each;
# the short requests' set stops at 0.82: 1K-8K turns cannot carry 0.9 (each adds ~600 fresh tokens)
REUSE_SETS = [
    ((300, 24_000, 64_000, 10, {}), (0.0, 0.25, 0.5, 0.82, 0.9)),
    ((400, 1000, 8000, 40, {}), (0.0, 0.25, 0.5, 0.82)),
    ((600, 24_000, 64_000, 100, dict(global_prefix_share=0.5, turns=6)), (0.25, 0.5, 0.82)),
    ((500, 4000, 32_000, 50, dict(global_prefix_share=0.3, think_time=20.0)), (0.25, 0.5, 0.82)),
    ((400, 2000, 16_000, 20, dict(global_prefix_share=0.8, turns=3)), (0.25, 0.5, 0.7)),
]


@pytest.mark.parametrize(("shape", "reuse"), [(shape, r) for shape, rates in REUSE_SETS for r in rates])
def test_synth_hits_the_reuse_rate_it_is_asked_for(tmp_path, shape, reuse):
    n, lo, hi, sessions, extra = shape
    path = tmp_path / "s.jsonl"
    write_trace(path, synthesize(n, lo, hi, reuse, sessions=sessions, rate=3.0, seed=11, **extra))
    reqs = read_trace(path)  # through the Mooncake reader: hash_ids match input_length
    stats = trace_stats(reqs, page_size=64)
    assert abs(stats["prefix_reuse_rate"] - reuse) <= 0.02
    assert all(lo <= r.input_length <= hi for r in reqs)
    times = [r.timestamp for r in reqs]
    assert times == sorted(times) and times[-1] > 0


def test_synth_is_deterministic_for_a_seed_and_differs_across_seeds(tmp_path):
    a = synthesize(200, 2000, 9000, 0.6, sessions=8, rate=5, seed=4)
    assert a == synthesize(200, 2000, 9000, 0.6, sessions=8, rate=5, seed=4)
    assert a != synthesize(200, 2000, 9000, 0.6, sessions=8, rate=5, seed=5)
    write_trace(tmp_path / "a", a)
    write_trace(tmp_path / "b", synthesize(200, 2000, 9000, 0.6, sessions=8, rate=5, seed=4))
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_synth_sessions_are_multi_turn():
    reqs = synthesize(100, 2000, 20000, 0.8, sessions=4, seed=1)
    earlier: set[tuple] = set()  # every earlier request's whole-block prompt
    turns = 0
    for r in reqs:
        full = r.input_length // 512
        # a next turn: the whole of an earlier prompt's full blocks, then more
        turns += any(r.hash_ids[:k] in earlier for k in range(1, min(full, len(r.hash_ids) - 1) + 1))
        earlier.add(tuple(r.hash_ids[:full]))
    assert turns >= 30


@pytest.mark.parametrize(("kw", "word"), [
    (dict(requests=0), "requests"), (dict(min_tokens=0), "min_tokens"), (dict(max_tokens=10), "max_tokens"),
    (dict(reuse=1.0), "reuse"), (dict(reuse=-0.1), "reuse"), (dict(sessions=0), "sessions"),
    (dict(rate=0), "rate"), (dict(rate=float("inf")), "rate"), (dict(seed=-1), "seed"),
    (dict(requests=10**6, max_tokens=10**7), "requests"), (dict(global_prefix_share=1.5), "global_prefix_share"),
    (dict(global_prefix_share=-0.1), "global_prefix_share"), (dict(turns=0), "turns"), (dict(turns=2.5), "turns"),
    (dict(think_time=0, rate=1.0), "think_time"), (dict(think_time=float("nan"), rate=1.0), "think_time"),
    (dict(think_time=5.0), "think_time"),  # think time without a rate: nothing to think between
    (dict(long_pause_share=1.0, long_pause=60.0, rate=1.0), "long_pause_share"),
    (dict(long_pause_share=0.2, rate=1.0), "long_pause_share"),  # a share with no pause length
    (dict(long_pause=60.0, rate=1.0), "long_pause"), (dict(long_pause=-1.0, long_pause_share=0.2, rate=1.0), "long_pause"),
    (dict(long_pause=60.0, long_pause_share=0.2), "long_pause")])  # a pause in time needs arrival times
def test_synth_refuses_bad_arguments(kw, word):
    args = dict(requests=10, min_tokens=100, max_tokens=1000, reuse=0.5) | kw
    with pytest.raises(ValueError, match=word):
        synthesize(**args)


@pytest.mark.slow
def test_trace_cli_synth_then_stats(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["trace", "synth", "--out", str(out), "--requests", "300", "--min-tokens", "4K",
                 "--max-tokens", "16K", "--reuse", "0.7", "--sessions", "6", "--rate", "2", "--seed", "9",
                 "--json"]) == 0
    synth = json.loads(capsys.readouterr().out)
    assert abs(synth["prefix_reuse_rate"] - 0.7) <= 0.02
    plot = tmp_path / "s.png"
    assert main(["trace", "stats", str(out), "--json", "--plot", str(plot)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["prefix_reuse_rate"] == pytest.approx(synth["prefix_reuse_rate"])
    assert abs(stats["prefix_reuse_rate"] - 0.7) <= 0.02
    assert set(stats) >= {"requests", "input_tokens", "input_length", "unlimited_hit_rate", "reuse_distance_tokens",
                          "hit_rate_by_capacity"}
    assert plot.read_bytes()[:4] == b"\x89PNG"
    curve = [p["hit_rate"] for p in stats["hit_rate_by_capacity"]]
    assert curve == sorted(curve) and curve[-1] == pytest.approx(stats["unlimited_hit_rate"])
    assert main(["trace", "stats", str(out)]) == 0
    assert "prefix reuse rate" in capsys.readouterr().out
    # refused before the work, in one line naming the option, nothing written
    assert main(["trace", "stats", str(out), "--plot", str(tmp_path / "s.svg")]) == 2
    assert "--plot" in capsys.readouterr().err and not (tmp_path / "s.svg").exists()


@pytest.mark.parametrize(("argv", "where"), [
    (["trace", "stats", "/nonexistent.jsonl"], "path"),
    (["trace", "synth", "--out", "/nonexistent/dir/x.jsonl", "--requests", "5", "--min-tokens", "1K",
      "--max-tokens", "2K", "--reuse", "0.5"], "--out"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "2K", "--max-tokens", "1K",
      "--reuse", "0.5"], "--max-tokens"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "1.5"], "--reuse"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--rate", "-1"], "--rate"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--global-prefix-share", "1.5"], "--global-prefix-share"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--turns", "0"], "--turns"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--rate", "2", "--think-time", "-3"], "--think-time"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--think-time", "3"], "--think-time"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--rate", "2", "--long-pause-share", "1"], "--long-pause-share"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--rate", "2", "--long-pause-share", "0.3"], "--long-pause-share"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--rate", "2", "--long-pause", "100"], "--long-pause"),
    (["trace", "synth", "--out", "x.jsonl", "--requests", "5", "--min-tokens", "1K", "--max-tokens", "2K",
      "--reuse", "0.5", "--long-pause-share", "0.3", "--long-pause", "100"], "--long-pause"),
    (["trace", "stats", "t.jsonl", "--l1-tokens", "lots"], "--l1-tokens"),
])
def test_trace_cli_refusals_are_one_line(tmp_path, monkeypatch, capsys, argv, where):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: {where}"), err
    assert not (tmp_path / "x.jsonl").exists()  # refused before anything is written


def test_reuse_distance_histogram_counts_every_reused_page_once():
    reqs = synthesize(200, 1000, 6000, 0.6, sessions=8, seed=12)
    s = trace_stats(reqs, page_size=64)
    hist = s["reuse_distance_histogram"]
    assert sum(b["pages"] for b in hist) == s["reused_pages"] > 0
    assert hist[-1]["below_tokens"] is None and all(a["below_tokens"] == b["from_tokens"]
                                                     for a, b in zip(hist, hist[1:], strict=False))
    # the hit-rate curve is the histogram accumulated: pages below each edge, as tokens
    for point, upto in zip(s["hit_rate_by_capacity"], range(1, len(hist)), strict=False):
        below = sum(b["pages"] for b in hist[:upto])
        assert point["hit_rate"] == pytest.approx(below * 64 / s["input_tokens"])

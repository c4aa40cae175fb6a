"""Traces as teams have them: re-blocking keeps prefix sharing (a round trip gives the same hits), each
converter on a small hand-made input, SGLang's generated-shared-prefix shape, and the fits-in-L1 word."""

from __future__ import annotations

import json

import pytest

from conformance.cli.main import main
from hicache_ref.sim.run.serial_replay import replay, summary_lines
from hicache_ref.sim.trace.convert import read_format
from hicache_ref.sim.trace.convert.blocked import Labels
from hicache_ref.sim.trace.convert.reblock import reblock
from hicache_ref.sim.trace.convert.sglang_gsp import GspShape, gsp_requests
from hicache_ref.sim.trace.reader import TraceRequest, find_trace, read_trace
from hicache_ref.sim.trace.stats import FITS_IN_L1, prefix_reuse_tokens, trace_stats
from hicache_ref.spec import CacheSpec

SPEC = CacheSpec.of(l1_tokens=262_144, l2_tokens=4_194_304, profile="p800")
HITS = ("hit_rate", "l1_hit_tokens", "l2_hit_tokens", "d2h_tokens", "h2d_tokens")


def _renaming(a: list, b: list) -> bool:
    """Whether b's ids are a's under a one-to-one renaming (the same sharing, other names)."""
    fwd, back = {}, {}
    for x, y in zip(a, b, strict=True):
        if (x.input_length, x.output_length, x.timestamp) != (y.input_length, y.output_length, y.timestamp) \
                or len(x.hash_ids) != len(y.hash_ids):
            return False
        for i, j in zip(x.hash_ids, y.hash_ids, strict=True):
            if fwd.setdefault(i, j) != j or back.setdefault(j, i) != i:
                return False
    return True


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.slow
def test_a_mooncake_trace_reblocked_to_16_and_back_gives_the_same_hits_at_512():
    requests = read_trace(find_trace("synthetic_trace.jsonl"), 150)
    small = reblock(requests, 512, 16)
    assert all(len(s.hash_ids) == -(-s.input_length // 16) for s in small)
    back = reblock(small, 16, 512)
    assert _renaming(requests, back)
    a, b = replay(SPEC, requests), replay(SPEC, back)
    assert {k: a[k] for k in HITS} == {k: b[k] for k in HITS} and a["l2_hit_tokens"] > 0 and a["l1_hit_tokens"] > 0


def test_the_cli_round_trip_through_16_token_blocks(tmp_path, capsys):
    src = find_trace("synthetic_trace.jsonl")
    assert main(["trace", "convert", str(src), "--from", "mooncake", "--out", str(tmp_path / "t16.jsonl"),
                 "--out-block-tokens", "16", "--limit", "80", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["block_tokens"] == 16
    assert main(["trace", "convert", str(tmp_path / "t16.jsonl"), "--from", "mooncake", "--block-tokens", "16",
                 "--out", str(tmp_path / "t512.jsonl.gz")]) == 0
    assert _renaming(read_trace(src, 80), read_trace(tmp_path / "t512.jsonl.gz"))


def test_reblocking_keeps_sharing_at_the_coarser_block_and_tails_join_their_block():
    a = TraceRequest(0.0, 1024, 1, tuple(range(64)))  # 64 blocks of 16
    b = TraceRequest(1.0, 1024, 1, tuple(range(40)) + tuple(range(100, 124)))  # shares 40 x 16 = 640 tokens
    c = TraceRequest(2.0, 304, 1, tuple(range(19)))  # A's first 19 blocks: the start of A's first 512
    d = TraceRequest(3.0, 300, 1, tuple(range(18)) + (999,))  # ends in a block of its own
    ra, rb, rc, rd = reblock([a, b, c, d], 16, 512)
    assert ra.hash_ids[0] == rb.hash_ids[0] and ra.hash_ids[1] != rb.hash_ids[1]  # 640 shared -> one block of 512
    assert rc.hash_ids == (ra.hash_ids[0],)  # a tail that begins a whole block is that block
    assert rd.hash_ids != (ra.hash_ids[0],)
    assert prefix_reuse_tokens([ra, rc]) == [0, 304]
    # a block size that does not divide 512: a source block across the boundary keys both
    e, f = reblock([TraceRequest(0.0, 1000, 1, tuple(range(10))), TraceRequest(0.0, 1000, 1, tuple(range(6)) + (7, 8, 9, 10))], 100)
    assert e.hash_ids[0] == f.hash_ids[0] and e.hash_ids[1] != f.hash_ids[1]
    with pytest.raises(ValueError, match="hash ids for 1000 tokens in blocks of 16"):
        reblock([e], 16)


def test_vllm_timed_trace_fields_chunk_size_and_seconds(tmp_path):
    rows = [dict(ts=1.5, prompt_len=40, gen_len=3, chunks=[5, 6, 7]), dict(ts=2.0, prompt_len=20, gen_len=4, chunks=[5, 6])]
    path = _write(tmp_path / "v.jsonl", rows)
    got = read_format("vllm", path, labels=Labels("ts", "prompt_len", "gen_len", "chunks"))
    assert [(r.timestamp, r.input_length, r.output_length) for r in got] == [(1500.0, 40, 3), (2000.0, 20, 4)]
    assert got[0].hash_ids == got[1].hash_ids  # 20 tokens = the start of 40's only 512 block
    with pytest.raises(ValueError, match="line 1: chunks: expected ceil"):
        read_format("vllm", path, block_tokens=8, labels=Labels("ts", "prompt_len", "gen_len", "chunks"))


def test_token_id_jsonl_is_hashed_into_chained_blocks(tmp_path):
    base = list(range(1000, 1600))
    rows = [dict(token_ids=base, timestamp=0, output_length=5), dict(input_ids=base[:560] + [7] * 100),
            dict(prompt_token_ids=base[:304]), dict(token_ids=[1] + base[1:600])]
    got = read_format("tokens", _write(tmp_path / "t.jsonl", rows))
    assert [r.input_length for r in got] == [600, 660, 304, 600]
    assert got[0].hash_ids[0] == got[1].hash_ids[0] and got[0].hash_ids[1] != got[1].hash_ids[1]
    assert got[2].hash_ids == (got[0].hash_ids[0],)  # 19 whole blocks of 16: the start of the first 512
    assert got[3].hash_ids[0] != got[0].hash_ids[0]  # one token differs: chained, nothing after it is shared
    with pytest.raises(ValueError, match="line 1: token_ids or input_ids or prompt_token_ids"):
        read_format("tokens", _write(tmp_path / "bad.jsonl", [dict(tokens=[1, 2])]))


def test_the_generated_shared_prefix_shape_and_its_turns():
    shape = GspShape(num_groups=3, prompts_per_group=4, system_prompt_len=1024, question_len=100, output_len=50,
                     num_turns=2, seed=3)
    reqs = gsp_requests(shape)
    assert len(reqs) == 3 * 4 * 2 and reqs == gsp_requests(shape)  # seeded: the same trace
    first, second = reqs[:12], reqs[12:]
    assert all(r.input_length == 1124 for r in first) and all(r.input_length == 1124 + 150 for r in second)
    assert len({r.hash_ids[:2] for r in first}) == 3  # each group's 1,024-token system prompt: two shared blocks
    # every second turn extends a first turn's prompt (its answer and a new question follow)
    assert all(any(s.hash_ids[:2] == f.hash_ids[:2] for f in first) for s in second)
    reuse = sum(prefix_reuse_tokens(reqs)) / sum(r.input_length for r in reqs)
    assert reuse > 0.6
    with pytest.raises(ValueError, match="num_groups"):
        gsp_requests(shape._replace(num_groups=0))


def test_the_cli_writes_the_gsp_shape_and_refuses_a_bad_argument_in_one_line(tmp_path, capsys):
    out = tmp_path / "gsp.jsonl"
    assert main(["trace", "gsp", "--out", str(out), "--gsp-num-groups", "2", "--gsp-prompts-per-group", "3",
                 "--gsp-system-prompt-len", "600", "--gsp-num-turns", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 12 and len(read_trace(out)) == 12
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(dict(input_length=40, hash_ids=[1])) + "\n")
    assert main(["trace", "convert", str(bad), "--from", "mooncake", "--block-tokens", "16",
                 "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hicache: path: ") and "expected ceil(input_length / 16) = 3 ids, got 1" in err
    assert "\n" not in err and not (tmp_path / "o.jsonl").exists()


@pytest.mark.slow
def test_trace_stats_says_fits_in_l1_and_reports_the_pressure(capsys):
    requests = read_trace(find_trace("synthetic_trace.jsonl"), 200)
    big = trace_stats(requests, 64, l1_tokens=64_000_000, l2_tokens=1_000_000)["pressure"]
    small = trace_stats(requests, 64, l1_tokens=64_000, l2_tokens=1_000_000)["pressure"]
    assert big["fits_in_l1"] and not small["fits_in_l1"] and big["block_tokens"] == 512
    assert 0 < big["working_set_tokens"] < sum(r.input_length for r in requests)
    assert small["working_set_over_l1"] == pytest.approx(small["working_set_tokens"] / 64_000)
    trace = str(find_trace("synthetic_trace.jsonl"))
    assert main(["trace", "stats", trace, "--l1-tokens", "100M", "--l2-tokens", "1M"]) == 0
    assert FITS_IN_L1 in capsys.readouterr().out
    assert main(["trace", "stats", trace, "--l1-tokens", "64K"]) == 0
    assert "fits in L1" not in capsys.readouterr().out


def test_a_replay_of_a_trace_that_fits_in_l1_says_hicache_cannot_help():
    requests = read_trace(find_trace("synthetic_trace.jsonl"), 120)
    fits = replay(CacheSpec.of(l1_tokens=64_000_000, l2_tokens=64_000_000, profile="p800"), requests)
    assert fits["fits_in_l1"] is True and FITS_IN_L1 in summary_lines(fits)
    assert fits["net_benefit_seconds"] <= 0  # no hit to add, only transfers
    tight = replay(CacheSpec.of(l1_tokens=65_536, l2_tokens=4_000_000, profile="p800"), requests)
    assert tight["fits_in_l1"] is False and FITS_IN_L1 not in summary_lines(tight)

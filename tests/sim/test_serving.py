"""Served replay (`hicache replay --concurrency`): concurrency 1 is the serial replay; in-flight KV stays in L1."""

from __future__ import annotations

import json

import pytest

from conformance.cli.main import main
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.run.served_replay import replay_served
from hicache_ref.sim.trace.synth import synthesize, write_trace
from hicache_ref.spec import CacheSpec

KEYS = ("requests", "input_tokens", "l1_hit_tokens", "l2_hit_tokens", "hit_rate", "d2h_tokens", "h2d_tokens",
        "d2h_bytes", "h2d_bytes", "d2h_segments", "h2d_segments", "truncated_requests", "l2_unloaded_tokens")


@pytest.fixture(scope="module")
def trace():
    return synthesize(150, 500, 4000, 0.7, sessions=10, rate=20, seed=8)


@pytest.mark.parametrize("policy", ["write_through_selective", "write_back", "write_through"])
@pytest.mark.parametrize("kw", [dict(), dict(timestamps=True), dict(pd_disagg=True)])
@pytest.mark.slow
def test_concurrency_one_equals_serial_replay(trace, policy, kw):
    spec = CacheSpec.of(page_size=64, l1_tokens=20_000, l2_tokens=60_000, write_policy=policy,
                        pd_disagg=kw.get("pd_disagg", False))
    serial = replay(spec, trace)
    served = replay_served(spec.replace(concurrency=1, **kw), trace)
    assert {k: served[k] for k in KEYS} == {k: serial[k] for k in KEYS}


def test_pd_batches_at_most_concurrency_prefills_per_step_and_releases_them_at_its_end(trace):
    spec = CacheSpec.of(page_size=64, l1_tokens=20_000, l2_tokens=60_000, concurrency=8, pd_disagg=True)
    fig = replay_served(spec, trace)
    assert fig["max_in_flight"] == 8 and fig["steps"] >= -(-len(trace) // 8)  # 150 requests: 19 steps
    assert fig["requests"] == len(trace) and fig["truncated_requests"] == 0  # nothing held past its step


def test_in_flight_pages_are_never_evicted(trace):
    spec = CacheSpec.of(page_size=64, l1_tokens=12_000, l2_tokens=30_000, concurrency=6)
    checked = []

    def check(cache, nodes):
        for node in nodes:
            x = node
            while x is not cache.tree.root:  # still in the tree and in L1, all the way up
                assert x.parent is not None and x.dev is not None and x.lock_ref > 0
                x = x.parent
        checked.append(len(nodes))

    fig = replay_served(spec, trace, on_step=check)
    assert max(checked) > 1 and fig["max_in_flight"] == 6
    assert fig["truncated_requests"] > 0  # L1 really was under pressure from the held requests


def test_served_replay_refuses_bad_arguments(trace):
    spec = CacheSpec.of(page_size=64, l1_tokens=20_000, l2_tokens=0)
    for kw, option in ((dict(concurrency=0), "--concurrency"), (dict(concurrency=True), "--concurrency"),
                       (dict(concurrency=2, step_ms=0), "--step-ms")):
        with pytest.raises(ValueError, match=f"^{option}: "):
            replay_served(spec.replace(**kw), trace)
    with pytest.raises(ValueError, match="^--concurrency: "):
        replay_served(spec, trace)  # serial: no concurrency


@pytest.mark.slow
def test_replay_cli_concurrency(tmp_path, trace, capsys):
    path = tmp_path / "t.jsonl"
    write_trace(path, trace)
    base = ["replay", "--trace", str(path), "--l1-tokens", "20000", "--l2-tokens", "60000", "--json", "--quiet"]
    assert main(base) == 0
    serial = json.loads(capsys.readouterr().out)
    assert main(base + ["--concurrency", "1"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert {k: one[k] for k in KEYS} == {k: serial[k] for k in KEYS} and one["concurrency"] == 1
    assert main(base + ["--concurrency", "4", "--timestamps"]) == 0
    four = json.loads(capsys.readouterr().out)
    assert four["max_in_flight"] <= 4
    # priced on the default profile (p800): the served clock's mean TTFT is 4 clients x busy / requests
    for fig, clients in ((serial, 1), (one, 1), (four, 4)):
        assert fig["profile"] == "p800" and fig["net_benefit_seconds"] is not None
        assert fig["modeled_ttft_seconds"] == pytest.approx(
            clients * fig["net_benefit_service"]["total"] / fig["requests"])
    assert main(base + ["--timestamps"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hicache: --timestamps:")
    text = [x for x in base if x != "--json"]
    assert main(text + ["--concurrency", "3", "--pd-disagg"]) == 0  # the summary says the replay was served, and how
    out = capsys.readouterr().out.splitlines()
    served = [x for x in out if x.startswith("served:")]
    assert len(served) == 1 and "up to 3 requests in flight" in served[0] and "(--pd-disagg)" in served[0]
    assert any(x.startswith("net benefit against HiCache off") for x in out)
    assert main(text) == 0
    assert "served:" not in capsys.readouterr().out

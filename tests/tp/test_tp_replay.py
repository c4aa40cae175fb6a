"""`hicache replay --tp N [--shared-host]`: per-rank L2 as given, N x effective L2 shared, D2H 1/N."""

from __future__ import annotations

import json

import pytest

from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.run.tp_replay import tp_replay
from hicache_ref.sim.trace.reader import find_trace, read_trace
from hicache_ref.spec import CacheSpec

TRACE = find_trace("conversation_trace.jsonl")


@pytest.fixture(scope="module")
def requests():
    return read_trace(TRACE, 1500)


@pytest.mark.slow
def test_unlimited_l2_shared_writes_one_nth_of_private(requests):
    spec = CacheSpec.of(write_policy="write_through")
    private, shared = (tp_replay(spec.replace(tp=4, shared_host=s), requests) for s in (False, True))
    alone = replay(spec, requests)
    assert private["hit_rate"] == shared["hit_rate"] == alone["hit_rate"]  # L2 never limited: same hits
    assert private["d2h_bytes_all_ranks"] == 4 * alone["d2h_bytes"] == 4 * shared["d2h_bytes_all_ranks"] > 0
    assert (private["host_kv_copies"], shared["host_kv_copies"]) == (4, 1)
    assert (private["d2h_writer_ranks"], shared["d2h_writer_ranks"]) == (4, 1)
    assert private["h2d_bytes_all_ranks"] == 4 * private["h2d_bytes"]


@pytest.mark.slow
def test_a_shared_pool_is_n_times_the_per_rank_l2_and_raises_the_hit_rate(requests):
    spec = CacheSpec.of(l1_tokens=1_000_000, l2_tokens=1_000_000, write_policy="write_through")
    private, shared = (tp_replay(spec.replace(tp=8, shared_host=s), requests) for s in (False, True))
    assert private["l2_tokens_per_rank"] == shared["l2_tokens_per_rank"] == 1_000_000 // 64 * 64
    assert private["effective_l2_tokens"] == private["l2_tokens_per_rank"]
    assert shared["effective_l2_tokens"] == 8 * shared["l2_tokens_per_rank"]
    assert shared["hit_rate"] > private["hit_rate"]
    assert shared["d2h_bytes_all_ranks"] == shared["d2h_bytes"]  # rank 0 alone writes
    assert shared["d2h_bytes_all_ranks"] < private["d2h_bytes_all_ranks"] / 4
    assert shared["host_pool_bytes_all_ranks"] == private["host_pool_bytes_all_ranks"]  # same memory, one copy


def test_a_rank_of_a_shared_group_holds_n_times_the_l2_and_bad_groups_are_refused():
    spec = CacheSpec.of(l2_tokens=1000, tp=4)
    assert spec.tp_rank() is spec and spec.replace(shared_host=True).tp_rank().tiers.l2_tokens == 4 * 960
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="^--tp:"):
            spec.replace(tp=bad)
    with pytest.raises(ValueError, match="^--shared-host:"):
        spec.replace(shared_host=1)


@pytest.mark.slow
def test_cli_replay_tp(capsys):
    from conformance.cli import main

    args = ["replay", "--limit", "200", "--l1-tokens", "1M", "--l2-tokens", "1M", "--write-policy", "write_through"]
    assert main.main(args + ["--tp", "8", "--shared-host", "--json"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert fig["tp"] == 8 and fig["shared_host"] and fig["effective_l2_tokens"] == 8 * fig["l2_tokens_per_rank"]
    assert main.main(args + ["--tp", "8"]) == 0
    assert "TP 8, a private host pool per rank" in capsys.readouterr().out
    assert main.main(args + ["--shared-host"]) == 2
    assert capsys.readouterr().err.strip() == ("hicache: --shared-host: shares one host pool among the ranks of "
                                              "--tp N; give --tp")
    assert main.main(args + ["--tp", "2", "--concurrency", "4", "--json"]) == 0  # served, as ablate's TP rungs
    fig = json.loads(capsys.readouterr().out)
    assert fig["tp"] == 2 and fig["concurrency"] == 4 and fig["net_benefit_seconds"] is not None
    assert main.main(args + ["--tp", "0"]) == 2
    assert capsys.readouterr().err.startswith("hicache: --tp: must be positive")


def test_a_tp_replay_echoes_the_group_spec_as_given_not_the_rank_replayed():
    """Fed back, the echoed spec must give the same run: L2 per rank, the group's size and sharing."""
    spec = CacheSpec.of(l1_tokens=64_000, l2_tokens=256_000, tp=8, shared_host=True, profile="emu")
    fig = tp_replay(spec, find_trace("conversation_trace.jsonl"), 20)
    assert fig["spec"]["tiers"]["l2_tokens"] == 256_000 and fig["effective_l2_tokens"] == 8 * 256_000
    assert fig["spec"]["tp"] == {"ranks": 8, "shared_host": True}

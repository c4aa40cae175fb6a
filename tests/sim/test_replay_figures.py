"""Replay figures that must not drift: bit-for-bit reproducible runs, and pinned figures on fixed
slices of both packaged traces (a change of behaviour shows here as a changed number)."""

import json

import pytest

import hicache_ref.core.direction_worker as direction_worker
from conformance.cli.main import main as cli_main
from hardware_profiles import load_profile
from hicache_ref.sim.price import cost
from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.trace.reader import find_trace, read_trace
from hicache_ref.spec import CacheSpec

WALL_KEYS = ("wall_seconds", "read_seconds", "tokens_per_second", "max_d2h_enqueue_seconds",
             "max_h2d_enqueue_seconds")


def _reproducible(figures: dict) -> dict:
    return {k: v for k, v in figures.items() if k not in WALL_KEYS}


@pytest.fixture(scope="module")
def conversation():
    return read_trace(find_trace("conversation_trace.jsonl"))


@pytest.fixture(scope="module")
def synthetic():
    return read_trace(find_trace("synthetic_trace.jsonl"))


@pytest.mark.slow
def test_modeled_seconds_do_not_depend_on_how_timing_batched_the_transfers(conversation, monkeypatch):
    """Unlimited capacity applies completions as they come, so priced jobs are batched by thread
    timing; a batch priced as one plan rounds differently from its jobs (the 12th digit)."""
    runs = []
    for batch_max in (1, 7, 256):
        monkeypatch.setattr(direction_worker, "_BATCH_MAX", batch_max)
        runs.append(_reproducible(replay(CacheSpec.of(), conversation, 1500)))
    assert runs[0]["d2h_transfers"] > 100 and runs[0]["modeled_d2h_seconds"] > 0
    assert runs[1] == runs[0] and runs[2] == runs[0]


@pytest.mark.slow
def test_two_default_replays_print_the_same_json_bit_for_bit(capsys):
    """The default run (whole conversation trace, unlimited) twice: identical but for wall time."""
    outs = []
    for _ in range(2):
        assert cli_main(["replay", "--json", "--quiet"]) == 0
        outs.append(_reproducible(json.loads(capsys.readouterr().out)))
    assert outs[0] == outs[1]
    assert outs[0]["requests"] > 10_000 and outs[0]["modeled_transfer_seconds"] > 0


# Expected figures on fixed slices of the packaged traces, on the default (P800 seed) geometry
# and profile, unmaterialized, as this replay (hicache_ref.sim.run.serial_replay.replay on the slice and spec
# below) computes them; modeled seconds are an exactly rounded sum, so they repeat to the bit.
# The capacities are small enough that both tiers evict and L2 hits are loaded back. A change
# in matching, insertion, eviction order, write policy, free-list order, planning or pricing
# changes some number here: update the table only for an intended change, and say why.
PINNED = [
    ("conversation", 1000, dict(l1_tokens=150_000, l2_tokens=600_000, write_policy="write_through", free_list="fifo"),
     dict(requests=1000, input_tokens=13732944, hit_rate=0.03925858869008714, l1_hit_tokens=511488,
          l2_hit_tokens=27648, l2_unloaded_tokens=0, truncated_requests=0, d2h_tokens=13163328, h2d_tokens=27648,
          d2h_bytes=1182804000768, h2d_bytes=2484338688, d2h_segments=5262504, h2d_segments=13026,
          d2h_transfers=1000, h2d_transfers=3)),
    ("conversation", 1000, dict(l1_tokens=150_000, l2_tokens=600_000, write_policy="write_back", free_list="lifo"),
     dict(requests=1000, input_tokens=13732944, hit_rate=0.04103883333391587, l1_hit_tokens=511488,
          l2_hit_tokens=52096, l2_unloaded_tokens=0, truncated_requests=0, d2h_tokens=12988992, h2d_tokens=52096,
          d2h_bytes=1167138865152, h2d_bytes=4681138176, d2h_segments=2622906, h2d_segments=10452,
          d2h_transfers=985, h2d_transfers=5)),
    ("synthetic", 300, dict(l1_tokens=100_000, l2_tokens=400_000, write_policy="write_through_selective",
                            free_list="fifo"),
     dict(requests=300, input_tokens=3853165, hit_rate=0.015015188812314033, l1_hit_tokens=43520,
          l2_hit_tokens=14336, l2_unloaded_tokens=0, truncated_requests=1, d2h_tokens=43520, h2d_tokens=14336,
          d2h_bytes=3910533120, h2d_bytes=1288175616, d2h_segments=2574, h2d_segments=2652,
          d2h_transfers=2, h2d_transfers=1)),
    ("synthetic", 300, dict(l1_tokens=60_000, l2_tokens=300_000, write_policy="write_back", free_list="lifo"),
     dict(requests=300, input_tokens=3853165, hit_rate=0.016343966583315276, l1_hit_tokens=14336,
          l2_hit_tokens=48640, l2_unloaded_tokens=0, truncated_requests=3, d2h_tokens=3624256, h2d_tokens=48640,
          d2h_bytes=325661147136, h2d_bytes=4370595840, d2h_segments=394134, h2d_segments=3042,
          d2h_transfers=219, h2d_transfers=4)),
]


@pytest.mark.parametrize("trace_name, limit, spec, expected", PINNED,
                         ids=[f"{t}-{n}-{s['write_policy']}-{s['free_list']}" for t, n, s, _ in PINNED])
@pytest.mark.slow
def test_pinned_figures_on_fixed_slices_of_both_packaged_traces(trace_name, limit, spec, expected,
                                                                  conversation, synthetic):
    trace = {"conversation": conversation, "synthetic": synthetic}[trace_name]
    got = replay(CacheSpec.of(**spec), trace[:limit])
    assert {k: got[k] for k in expected} == expected
    # the modeled seconds are the profile's link model over exactly those counters (direct copies:
    # linear in launches, segments and bytes) in the replay's host state, whatever the profile's values are today
    profile = load_profile(got["profile"])
    factors = mech.bandwidth_factors(profile, cost.replay_state(got["registered_bytes"]))
    priced = sum(profile.link.seconds(d, got[f"{d}_bytes"], got[f"{d}_segments"], got[f"{d}_launches"],
                                      factors.of(d)) for d in ("d2h", "h2d"))
    assert got["modeled_transfer_seconds"] == pytest.approx(priced, rel=1e-9)

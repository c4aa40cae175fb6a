"""A hostile pass on `hicache sweep` on another accelerator (docs/hostile-cases.md, round 4): where no
tier pays by its central value but the profile's uncertainty reaches a gain, the sweep says it
cannot tell, with the best tier's interval, never "leave HiCache off" or "not modeled"."""

from __future__ import annotations

import pytest

from conformance.cli.sweep import summary_lines
from hicache_ref.sim.sweep.sweep_l2 import sweep
from hicache_ref.sim.trace.synth import synthesize
from hicache_ref.spec import CacheSpec

REQUESTS = synthesize(80, 2000, 12000, 0.6, sessions=8, seed=5)


@pytest.mark.parametrize("policy", ["write_through_selective", "write_through"])
def test_no_tier_paying_inside_the_profiles_error_is_undecided_not_leave_it_off(policy):
    """p900's every figure is the P800's, assumed with wide ranges: the sweep said "no L2 tier pays ...
    leave L2 and HiCache off" and "answer: not modeled (the smallest tier is already on the plateau)"
    while each tier's own answer was undecided."""
    spec = CacheSpec.of(page_size=64, l1_tokens=16384, write_policy=policy, profile="p900")
    r = sweep(spec, REQUESTS, [32768, 131072], method="replay", workers=1)
    assert r["none_pays"] and all(t["net_benefit_seconds"] < 0 for t in r["tiers"])
    assert any(t["answer"] == "undecided" for t in r["tiers"])
    lines = summary_lines(r)
    assert r["answer"] == "undecided" and r["answer_l2_tokens"] in (32768, 131072)
    assert lines[0].startswith("answer: undecided: modeled TTFT") and "(the best tier; none pays)" in lines[0]
    rows = lines[3:5]  # every tier's net benefit with its interval and word, not bare
    assert all(t.rstrip().endswith(t_["answer"]) and "[" in t for t, t_ in zip(rows, r["tiers"], strict=True)), rows
    where = lines[-2]
    assert where.startswith("no L2 tier is a sure gain") and "leave L2 and HiCache off" not in where, where


def test_an_l3_sweep_where_no_tier_pays_gives_no_answer_of_a_tier_against_l1_alone():
    """An L3 tier's word is against L1 alone, while paying is judged against the same L1 and L2 without
    L3: a tier adding nothing to that run read "answer: gain ... (the best tier; none pays)"."""
    from conformance.cli.sweep import summary_l3_lines
    from hicache_ref.sim.sweep.sweep_l3 import sweep_l3

    spec = CacheSpec.of(page_size=64, l1_tokens=16384, l2_tokens=65536, profile="h200")
    r = sweep_l3(spec, REQUESTS, [131072, 524288], 0.01)
    assert r["none_pays"] and r["answer"] is None and r["answer_l3_tokens"] is None
    lines = summary_l3_lines(r)
    assert lines[0] == "answer: no L3 tier pays (the plateau line below says against what)", lines[0]
    assert lines[-2].startswith("no L3 tier pays: every tier's net benefit is a loss against the same L1 and L2")

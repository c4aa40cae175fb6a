"""A hostile pass on `hicache advise` (docs/hostile-cases.md, round 4): every ranked figure holds its
central value inside its interval, and the reason to leave HiCache off is the trace's own."""

from __future__ import annotations

import dataclasses

from hardware_profiles import load_profile
from hicache_ref.advise.advisor import advise
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.spec import CacheSpec

SEMANTICS = "sglang-0.5.23"


def _requests(chains) -> list[TraceRequest]:
    return [TraceRequest(float(i), len(c) * 512, 1, tuple(c))
            for i, c in enumerate(chains)]


def test_every_ranked_figure_holds_its_central_value(monkeypatch):
    """The profile itself at one extreme of its ensemble (every other member slower): its figure was
    printed outside its own interval (`TTFT -2.22% [-2.17%, +1.17%]`)."""
    from hicache_ref.sim.price import uncertainty

    profile = load_profile("p800")
    slow = dataclasses.replace(profile, link=dataclasses.replace(profile.link, h2d_gbps=profile.link.h2d_gbps / 5,
                                                                 d2h_gbps=profile.link.d2h_gbps / 5))
    monkeypatch.setattr(uncertainty, "ensemble", lambda p: (p, *[slow] * 19))
    firsts = [tuple(range(100 * i, 100 * i + 32)) for i in range(40)]
    requests = _requests(firsts + [p + (10_000 + i,) for i, p in enumerate(firsts)])
    r = advise([(profile, CacheSpec.of(profile="p800", l1_tokens=40_000, semantics=SEMANTICS))], requests)
    rows = [row for row in r["profiles"][0]["ranked"] if row["ttft_change_pct"] is not None]
    assert rows
    for row in rows:
        lo, hi = row["ttft_change_pct_interval"]
        assert lo <= row["ttft_change_pct"] <= hi, row
        lo, hi = row["net_benefit_seconds_interval"]
        assert lo <= row["net_benefit_seconds"] <= hi, row


def test_l1_hitting_all_the_reuse_is_said_so_not_reuse_beyond_host_memory():
    """One short shared prefix and unique rest: more distinct tokens than L1 holds, but every reuse
    already hits in L1. The reason read "the reuse there is (62.85% with an unlimited cache) lies
    beyond what host memory holds": no reuse lay beyond L1 at all."""
    requests = _requests([(1, 2, 3, 1000 + 2 * i, 1001 + 2 * i) for i in range(60)])
    spec = CacheSpec.of(profile="p800", l1_tokens=8192, semantics=SEMANTICS)
    r = advise([(load_profile("p800"), spec)], requests)["profiles"][0]
    assert not r["on"] and r["reason"].startswith("L1 alone already hits all the reuse there is"), r["reason"]
    assert "beyond what host memory holds" not in r["headline"]


def test_each_profiles_answer_is_in_the_keys_every_command_spells():
    """advise spelled its intervals ttft_change_interval_pct / net_benefit_interval_seconds, and only in
    ranked rows: a script reading `answer` and `ttft_change_pct_interval`, as of replay, sweep and
    ablate, found nothing."""
    firsts = [tuple(range(100 * i, 100 * i + 32)) for i in range(20)]
    requests = _requests(firsts + [p + (10_000 + i,) for i, p in enumerate(firsts)])
    r = advise([(load_profile("p800"), CacheSpec.of(profile="p800", l1_tokens=20_000, semantics=SEMANTICS))],
               requests)["profiles"][0]
    top = r["ranked"][0]
    for key in ("answer", "ttft_change_pct", "ttft_change_pct_interval", "net_benefit_seconds",
                "net_benefit_seconds_interval"):
        assert key in top and r[key] == top[key], key
    assert r["answer"] in ("gain", "loss", "undecided")
    assert not any(k.endswith(("_interval_pct", "_interval_seconds")) for k in top)

"""hicache sweep: the plateau rule on constructed curves, the one-pass curve against per-tier replays."""

from __future__ import annotations

import json
import random

import pytest

from conformance.cli.main import main
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.sweep.plateau import find_plateau
from hicache_ref.sim.sweep.sweep_l2 import NET_ONE_PASS, sweep
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.sim.trace.stack_distance import stack_profile
from hicache_ref.sim.trace.synth import synthesize, write_trace
from hicache_ref.spec import CacheSpec

TIERS = [100, 200, 300, 400, 500]


@pytest.mark.parametrize(("rates", "alone", "plateau", "on"), [
    ([0.30, 0.40, 0.45, 0.455, 0.46], 0.10, 300, True),  # 300 -> 400 gains 0.005 < 0.01
    ([0.30, 0.40, 0.50, 0.60, 0.70], 0.10, 500, False),  # still rising: the largest tier, flagged
    ([0.105, 0.2, 0.3, 0.4, 0.5], 0.10, 0, True),  # the first tier already gains < G: L1 alone suffices
    ([0.30, 0.305, 0.50, 0.51, 0.52], 0.10, 100, True),  # the first flat step decides, not a later rise
    ([0.30, 0.40, 0.50, 0.60, 0.605], 0.10, 400, True),  # only the last tier is flat
])
def test_plateau_on_constructed_curves(rates, alone, plateau, on):
    p = find_plateau(TIERS, rates, alone, 0.01)
    assert (p.plateau_l2_tokens, p.on_plateau) == (plateau, on)
    assert p.marginal_gains[0] == pytest.approx(rates[0] - alone)
    assert p.marginal_gains[1:] == pytest.approx([b - a for a, b in zip(rates, rates[1:], strict=False)])


def test_plateau_gain_threshold_is_strict_and_configurable():
    rates = [0.2, 0.25, 0.27]
    assert find_plateau(TIERS[:3], rates, 0.1, 0.02).plateau_l2_tokens == 300  # 0.02 is not below 0.02
    assert find_plateau(TIERS[:3], rates, 0.1, 0.03).plateau_l2_tokens == 200
    assert find_plateau(TIERS[:3], rates, 0.1, 0.0).on_plateau is False
    # a gain exactly at the threshold (binary fractions: 0.27 - 0.25 is not 0.02 in floats) is not below it
    exact = find_plateau(TIERS[:3], [0.25, 0.5, 0.625], 0.0, 0.125)
    assert exact.marginal_gains == [0.25, 0.25, 0.125] and (exact.plateau_l2_tokens, exact.on_plateau) == (300, False)
    assert find_plateau(TIERS[:3], [0.25, 0.5, 0.625], 0.0, 0.25).plateau_l2_tokens == 200


@pytest.mark.parametrize(("tiers", "rates", "gain", "word"), [
    ([], [], 0.01, "l2_tokens"), ([200, 100], [0.1, 0.2], 0.01, "l2_tokens"), ([100], [0.1, 0.2], 0.01, "hit_rates"),
    ([100], [0.1], 1.5, "plateau_gain"), ([100], [0.1], True, "plateau_gain")])
def test_plateau_refuses_bad_input(tiers, rates, gain, word):
    with pytest.raises(ValueError, match=word):
        find_plateau(tiers, rates, 0.0, gain)


def _documents_trace(n=80, docs=7, pages=4, page_size=64, seed=1) -> list[TraceRequest]:
    """Whole documents repeated: each is one tree node and every eviction frees exactly what it
    needs, so the tree's node-granular LRU is the page LRU the stack pass models."""
    rng = random.Random(seed)
    order = [rng.randrange(docs) for _ in range(n)]
    return [TraceRequest(float(i), pages * page_size, 10, (d,)) for i, d in enumerate(order)]


@pytest.mark.slow
def test_one_pass_curve_equals_per_tier_replays_exactly():
    reqs = _documents_trace()
    spec = CacheSpec.of(page_size=64, l1_tokens=8 * 64, write_policy="write_through")
    tiers = [8 * 64, 12 * 64, 16 * 64, 20 * 64, 28 * 64]
    one = sweep(spec, reqs, tiers, method="one_pass")
    per = sweep(spec, reqs, tiers, method="replay", workers=1)
    assert one["method"] == "one_pass" and per["method"] == "replay"
    keys = ("hit_rate", "l1_hit_tokens", "l2_hit_tokens", "d2h_tokens", "h2d_tokens", "d2h_bytes", "h2d_bytes")
    for a, b in zip(one["tiers"], per["tiers"], strict=True):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert len({t["hit_rate"] for t in one["tiers"]}) > 2  # the curve really moves over these tiers
    # one pass prices nothing, so its plateau is the hit-rate rule's; the replays' is among the tiers that pay
    rule = find_plateau(tiers, [t["hit_rate"] for t in per["tiers"]], per["l1_alone_hit_rate"])
    assert (one["plateau_l2_tokens"], one["on_plateau"]) == (rule.plateau_l2_tokens, rule.on_plateau)


def test_one_pass_refuses_a_tier_below_l1():
    """Below L1, L2 cannot hold all of L1: the stack pass's curve (L2 a superset of L1) would be wrong."""
    reqs = _documents_trace(n=20)
    spec = CacheSpec.of(page_size=64, l1_tokens=8 * 64, write_policy="write_through")
    for tiers in ([4 * 64, 12 * 64], [8 * 64 - 1, 12 * 64]):  # a page short of L1, once pages are whole
        with pytest.raises(ValueError, match=r"^--method: one_pass does not apply: tier [\d,]+ below L1 512"):
            sweep(spec, reqs, tiers, method="one_pass")
    assert sweep(spec, reqs, [8 * 64 + 63, 12 * 64], method="one_pass")["method"] == "one_pass"


@pytest.mark.slow
def test_one_pass_is_an_upper_bound_close_to_replays_on_a_session_trace():
    reqs = synthesize(150, 600, 4000, 0.7, sessions=12, seed=5)
    whole = sum(r.input_length for r in reqs)
    spec = CacheSpec.of(page_size=64, l1_tokens=whole // 16, write_policy="write_through")
    tiers = [whole // 8, whole // 4, whole // 2]
    one = sweep(spec, reqs, tiers, method="one_pass")
    per = sweep(spec, reqs, tiers, method="replay", workers=2)
    for a, b in zip(one["tiers"], per["tiers"], strict=True):
        assert b["hit_rate"] <= a["hit_rate"] + 1e-12
        assert a["hit_rate"] - b["hit_rate"] < 0.03
        assert b["d2h_segments"] is not None and a["d2h_segments"] is None and "segments_reason" in a


@pytest.mark.slow
def test_stack_profile_unlimited_equals_unlimited_replay():
    reqs = synthesize(120, 300, 3000, 0.6, sessions=5, seed=2)
    for ps in (16, 64, 100):
        prof = stack_profile(reqs, ps)
        fig = replay(CacheSpec.of(page_size=ps), reqs)
        assert int(prof.seen_pages.sum()) * ps == fig["l1_hit_tokens"] + fig["l2_hit_tokens"]


def test_auto_falls_back_to_replays_where_one_pass_does_not_apply():
    reqs = _documents_trace(n=30)
    spec = CacheSpec.of(page_size=64, l1_tokens=8 * 64, write_policy="write_through_selective",
                        profile="emu")
    r = sweep(spec, reqs, [12 * 64, 16 * 64], workers=1)
    assert r["method"] == "replay" and "write_through" in r["one_pass_refusal"]
    # the emu profile has no compute model: net benefit is not modeled, and says why
    assert all(t["net_benefit_seconds"] is None and "compute model" in t["net_benefit_reason"] for t in r["tiers"])
    assert all(t["d2h_segments"] is not None for t in r["tiers"])
    with pytest.raises(ValueError, match="method"):
        sweep(spec, reqs, [12 * 64], method="one_pass")
    with pytest.raises(ValueError, match="l2_tokens"):
        sweep(spec, reqs, [16 * 64, 12 * 64])


@pytest.mark.slow
def test_sweep_cli_writes_json_and_png(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, _documents_trace())
    out = tmp_path / "out"
    argv = ["sweep", "--trace", str(trace), "--l1-tokens", "512", "--l2-tokens", "512,768,1024,1280,1792",
            "--out", str(out), "--json", "--quiet"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "sweep.json").read_text())
    assert printed == saved
    assert set(saved) >= {"tiers", "plateau_l2_tokens", "on_plateau"}
    assert set(saved["tiers"][0]) >= {"l2_tokens", "hit_rate", "marginal_gain", "net_benefit_seconds",
                                      "registered_bytes", "d2h_bytes", "h2d_bytes", "d2h_segments", "h2d_segments"}
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = (out / "sweep.png").read_bytes()
    assert main(argv) == 0  # reproducible: the same JSON and the same PNG bytes
    capsys.readouterr()
    assert json.loads((out / "sweep.json").read_text()) == saved and (out / "sweep.png").read_bytes() == first


@pytest.mark.parametrize(("args", "where"), [
    (["--l2-tokens", "2K,1K"], "--l2-tokens"), (["--l2-tokens", "1K,x"], "--l2-tokens"),
    (["--l2-tokens", "10"], "--l2-tokens"), (["--l1-tokens", "0"], "--l1-tokens"),
    (["--plateau-gain", "2"], "--plateau-gain"), (["--method", "one_pass", "--write-policy", "write_back"], "--method"),
])
def test_sweep_cli_refusals_are_one_line(tmp_path, capsys, args, where):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, _documents_trace(n=5))
    base = {"--l1-tokens": "512", "--l2-tokens": "1K"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    argv = ["sweep", "--trace", str(trace)] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: {where}"), err


@pytest.mark.slow
def test_bench_sweep_reports_the_ratio_and_the_largest_tier_check(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, synthesize(120, 500, 3000, 0.6, sessions=6, seed=3))
    rc = main(["bench", "sweep", "--trace", str(trace), "--json", "--quiet"])
    r = json.loads(capsys.readouterr().out)
    assert rc == (0 if r["ok"] else 1)  # timing decides the verdict; the figures must be there either way
    assert r["sweep"]["method"] == "one_pass" and len(r["config"]["l2_tiers"]) == 8
    assert r["largest_tier_hit_rate_difference"] >= 0
    assert r["sweep_over_replay"] == pytest.approx(r["sweep"]["median_wall_seconds"]
                                                   / r["replay_largest_tier"]["median_wall_seconds"])


def test_replayed_tiers_carry_the_net_benefit_of_their_own_replay():
    """With a compute model (p800), each replayed tier reports the net benefit `hicache replay`
    gives at that capacity; the one-pass method, which has no per-request hits, says why not."""

    reqs = _documents_trace(n=30)
    spec = CacheSpec.of(page_size=64, l1_tokens=8 * 64, write_policy="write_through_selective", profile="p800")
    r = sweep(spec, reqs, [12 * 64, 16 * 64], workers=1)
    for tier in r["tiers"]:
        own = replay(spec.replace(l2_tokens=tier["l2_tokens"]), reqs)
        assert own["net_benefit_seconds"] is not None
        assert tier["net_benefit_seconds"] == own["net_benefit_seconds"]
    lru = spec.replace(write_policy="write_through")
    one = sweep(lru, reqs, [12 * 64, 16 * 64], method="one_pass")
    assert all(t["net_benefit_seconds"] is None and t["net_benefit_reason"] == NET_ONE_PASS for t in one["tiers"])


def test_synth_writes_gzip_where_the_name_says_gz(tmp_path):
    """A synthesized trace named .jsonl.gz is gzip, and reads back to the same requests."""
    import gzip

    from hicache_ref.sim.trace.reader import read_trace
    from hicache_ref.sim.trace.synth import write_trace

    reqs = synthesize(20, 300, 3000, 0.5, sessions=3, seed=4)
    write_trace(tmp_path / "t.jsonl.gz", reqs)
    write_trace(tmp_path / "t.jsonl", reqs)
    assert (tmp_path / "t.jsonl.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress((tmp_path / "t.jsonl.gz").read_bytes()) == (tmp_path / "t.jsonl").read_bytes()
    assert read_trace(tmp_path / "t.jsonl.gz") == read_trace(tmp_path / "t.jsonl")


def test_cli_says_when_tiers_rise_again_after_the_plateau_and_warns_on_tiers_not_above_l1(tmp_path, capsys):
    from conformance.cli.sweep import summary_lines

    # L1 alone 0.10; the first tier (= L1) gains nothing, later ones gain: the rule stops at 0
    r = dict(requests=10, l1_tokens=100, l1_alone_hit_rate=0.10, method="replay", one_pass_refusal=None,
             plateau_gain=0.01, plateau_l2_tokens=0, on_plateau=True,
             tiers=[dict(l2_tokens=l2, hit_rate=h, marginal_gain=g, d2h_bytes=0, h2d_bytes=0, registered_bytes=0,
                         net_benefit_reason="x") for l2, h, g in ((100, 0.10, 0.0), (200, 0.15, 0.05))])
    where = summary_lines(r)[-2]
    assert where.startswith("L1 alone is already on the plateau") and "later tiers gain again (+0.0500 at 200)" in where
    assert "0 tokens" not in where
    r["tiers"][1]["marginal_gain"] = 0.001  # flat after the step: no such note
    assert "later tiers" not in summary_lines(r)[-2]


@pytest.mark.slow
def test_cli_warns_on_l2_tiers_not_above_l1(capsys):
    from conformance.cli.main import main

    rc = main(["sweep", "--limit", "20", "--profile", "p800", "--l1-tokens", "64K", "--l2-tokens", "64K,128K",
               "--quiet"])
    err = capsys.readouterr().err
    assert rc == 0 and "hicache: warning: --l2-tokens 64,000: not above --l1-tokens 64,000" in err


@pytest.mark.parametrize(("rates", "nets", "plateau", "on", "none"), [
    ([0.30, 0.40, 0.45, 0.455, 0.46], [-1.0, -0.5, -0.2, -0.1, -0.3], None, False, True),  # every tier loses
    ([0.30, 0.40, 0.45, 0.455, 0.46], [-1.0, 0.5, 0.2, 0.1, -0.3], 300, True, False),  # the rule among payers
    ([0.105, 0.2, 0.3, 0.4, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5], 100, True, False),  # flat first payer: never L1 alone
    ([0.30, 0.40, 0.50, 0.60, 0.70], [-1.0, -1.0, -1.0, 0.1, 0.2], 500, False, False),  # payers still rising
    ([0.30, 0.40, 0.45, 0.455, 0.46], [None] * 5, 300, True, False),  # unpriced: the hit-rate rule
])
def test_the_plateau_is_named_only_among_tiers_that_pay(rates, nets, plateau, on, none):
    from hicache_ref.sim.sweep.plateau import paying_plateau

    p = paying_plateau(TIERS, rates, 0.10, nets, 0.01)
    assert (p.plateau_l2_tokens, p.on_plateau, p.none_pays) == (plateau, on, none)
    assert p.marginal_gains == find_plateau(TIERS, rates, 0.10, 0.01).marginal_gains


def test_a_sweep_where_no_tier_pays_says_so_and_names_no_plateau(capsys):
    """Every tier loses against HiCache off (inline submission on remote 4 KB pages is not what replay
    prices, so a tiny L1 with a huge write-through L2 and nothing to reuse does it): no plateau."""
    from conformance.cli.sweep import summary_lines

    reqs = [TraceRequest(float(i), 1024, 1, tuple(range(2 * i, 2 * i + 2))) for i in range(30)]  # no reuse
    spec = CacheSpec.of(page_size=64, l1_tokens=4096, write_policy="write_through", profile="p800")
    r = sweep(spec, reqs, [8192, 16384], method="replay", workers=1)
    assert all(t["net_benefit_seconds"] < 0 for t in r["tiers"])
    assert r["none_pays"] and r["plateau_l2_tokens"] is None and not r["on_plateau"]
    where = summary_lines(r)[-2]
    assert where.startswith("no L2 tier pays") and "plateau at" not in where


def test_the_sweep_plots_net_benefit_without_an_axis_offset(tmp_path, monkeypatch):
    """0.3 ms of difference near 1.2 s is drawn as such, not as a cliff under a "+1.2" offset, and the
    axis shows where net benefit changes sign."""
    pytest.importorskip("matplotlib")
    from conformance.cli import plots

    seen = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: (fig.canvas.draw(), seen.append(fig)))
    tiers = [dict(l2_tokens=t, hit_rate=0.3 + t / 1e4, net_benefit_seconds=1.2 + t * 1e-6) for t in TIERS]
    plots.sweep_plot(tmp_path / "s.png", dict(tiers=tiers, l1_alone_hit_rate=0.2, plateau_l2_tokens=300,
                                              on_plateau=True, none_pays=False))
    net_axis = seen[0].axes[1]
    assert net_axis.get_ylabel().startswith("net benefit, s")
    assert net_axis.yaxis.get_major_formatter().get_offset() == ""
    low, high = net_axis.get_ylim()
    assert low <= 0 <= high  # zero drawn: a gain or a loss reads from the axis itself

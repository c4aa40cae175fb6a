"""H200 and P900 are answerable: every figure of a replay is priced (first principles and assumed
ranges, never "not modeled"), every input they rest on is sourced or assumed with a range, and a
range wider than the effect makes the answer "undecided"."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from conformance.cli.main import main
from hardware_profiles import load_profile
from hicache_ref.sim import cost
from hicache_ref.sim.derive import with_values
from hicache_ref.sim.trace_synth import synthesize_trace, write_trace
from hicache_ref.sim.uncertainty import answer, interval


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """Sessions that reuse long prefixes, more of them than the L1 below holds, so L2 is hit."""
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    requests = synthesize_trace(requests=120, min_tokens=16_000, max_tokens=32_000, reuse=0.8, sessions=16, seed=3)
    write_trace(path, getattr(requests, "requests", requests))
    return path


def _replay(profile: str, trace: Path, *extra: str) -> tuple[dict, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["replay", "--profile", profile, "--trace", str(trace), "--l1-tokens", "256K",
                     "--concurrency", "10", "--quiet", *extra]) == 0
    return (json.loads(out.getvalue()), "") if "--json" in extra else ({}, out.getvalue())


@pytest.mark.parametrize("name", ["h200", "p900"])
@pytest.mark.slow
def test_a_replay_on_the_profile_is_priced(name, trace):
    fig, _ = _replay(name, trace, "--json")
    assert fig["l2_hit_tokens"] > 0
    for key in ("net_benefit_seconds", "modeled_ttft_change_pct", "modeled_prefill_seconds_saved",
                "modeled_prefill_compute_seconds"):
        assert isinstance(fig[key], float), (key, fig.get("net_benefit_reason"))
    # and its interval over the profile's ensemble, drawn from the ranges of its assumed values
    lo, hi = fig["ttft_change_pct_interval"]
    assert lo < fig["modeled_ttft_change_pct"] < hi and fig["answer"] in ("gain", "loss", "undecided")
    _, text = _replay(name, trace)
    assert "n/m" not in text and "not modeled" not in text and "net benefit against HiCache off (L1 alone)" in text


@pytest.mark.parametrize("name", ["h200", "p900"])
def test_every_input_is_sourced_and_every_assumed_number_has_a_range(name):
    p = load_profile(name)
    for key, source in p.sources.items():
        if source.lower().startswith("assumed"):
            if key in ("compute.prefill_tp",):
                continue
            assert key in p.ranges, f"{name}: {key} is assumed without a range"
    data = yaml.safe_load(Path(str(p.path)).read_text())
    for section in ("link", "compute", "host_costs", "l3_link"):
        for key, raw in data.get(section, {}).items():
            assert raw == "unknown" or isinstance(raw, dict) or key == "prefill_model", f"{section}.{key} unsourced"


def test_h200s_link_range_sits_below_its_public_ceiling():
    p = load_profile("h200")
    ceiling = p.device.host_link_gbps
    assert ceiling == pytest.approx(32 * 16 * 128 / 130 / 8, abs=0.05)  # PCIe Gen5 x16, one direction
    for key in ("link.h2d_gbps", "link.d2h_gbps"):
        lo, hi = p.ranges[key]
        assert lo == pytest.approx(0.5 * ceiling, abs=0.05) and hi == pytest.approx(0.9 * ceiling, abs=0.05)


def _one_at_a_time(profile, fig: dict, off: dict) -> list[float]:
    """The TTFT change with each ranged value at each end of its range (the others central)."""
    out = [cost.replay_figures(profile, fig, off)["modeled_ttft_change_pct"]]
    for key, ends in sorted(profile.ranges.items()):
        out += [cost.replay_figures(with_values(profile, **{key: v}), fig, off)["modeled_ttft_change_pct"] for v in ends]
    return out


def _over_range(profile, key: str, fig: dict, off: dict, points: int = 21) -> list[float]:
    """The TTFT change with `key` at evenly spaced points of its range (the others central)."""
    lo, hi = profile.ranges[key]
    return [cost.replay_figures(with_values(profile, **{key: lo + (hi - lo) * i / (points - 1)}), fig, off)
            ["modeled_ttft_change_pct"] for i in range(points)]


@pytest.mark.slow
def test_a_range_wider_than_the_effect_gives_undecided(trace, tmp_path):
    fig, _ = _replay("h200", trace, "--json")
    off, _ = _replay("h200", trace, "--json", "--l2-tokens", "0")  # HiCache off: L1 alone
    h200 = load_profile("h200")
    assert answer(interval(_one_at_a_time(h200, fig, off))) == "gain"  # on the profile's own ranges the gain holds
    key = "compute.l2_path_fixed_s"
    assert answer(interval(_over_range(h200, key, fig, off))) == "gain"
    # the same profile with the L2 path's range widened past the saving: a load may cost more than it saves
    data = yaml.safe_load(Path(str(h200.path)).read_text())
    data["compute"]["l2_path_fixed_s"]["range"] = [0.005, 1.0]
    wide_path = tmp_path / "h200-wide.yaml"
    wide_path.write_text(yaml.safe_dump(data, sort_keys=False))
    wide = load_profile(wide_path)
    assert cost.replay_figures(wide, fig, off)["modeled_ttft_change_pct"] == fig["modeled_ttft_change_pct"]  # same centre
    spread = interval(_over_range(wide, key, fig, off))
    assert spread[0] < 0 < spread[1] and answer(spread) == "undecided", spread
    # the same through the command and the profile's own ensemble (hicache_ref.sim.uncertainty)
    assert _replay("h200", trace, "--json")[0]["answer"] == "gain"
    out, _ = _replay(str(wide_path), trace, "--json")
    assert out["answer"] == "undecided" and out["ttft_change_pct_interval"][0] < 0 < out["ttft_change_pct_interval"][1]


@pytest.mark.slow
def test_the_seed_scenario_on_a_profile_without_readings_prices_the_seeds_workload(monkeypatch, capsys, trace):
    from hicache_ref.sim import seed_report
    from hicache_ref.sim.trace import read_trace

    monkeypatch.setattr(seed_report, "seed_requests", lambda: read_trace(trace))  # a small stand-in trace
    assert main(["ablate", "--scenario", "seed", "--profile", "h200", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "n/m" not in text and "the seed's workload" in text and "priced with profile h200: TTFT " in text
    assert main(["ablate", "--scenario", "seed", "--profile", "p900", "--quiet", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["readings"] == [] and isinstance(doc["answer"]["ttft_change_pct"], float)
    assert doc["scenario"]["priced_with"] == "p900" and doc["configuration"]["tp"] == 8


def test_p900s_assumed_figures_are_the_p800s_current_ones():
    """p900 takes the P800's seed-derived figures as its central values: they move together."""
    p800, p900 = load_profile("p800"), load_profile("p900")
    for section, keys in (("compute", ("prefill_fixed_s", "prefill_per_token_s", "prefill_per_token_pair_s",
                                       "l2_path_fixed_s")),
                          ("link", ("per_segment_us", "per_launch_us", "kernel_per_item_us")),
                          ("host_costs", ("submit_contention", "d2h_interference", "translation_slowdown_per_mentry",
                                          "registered_slowdown_per_gb", "numa_remote_bw_factor"))):
        for key in keys:
            assert getattr(getattr(p900, section), key) == pytest.approx(getattr(getattr(p800, section), key)), key

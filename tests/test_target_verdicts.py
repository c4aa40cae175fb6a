"""Every target kind gets a verdict on emu; what cannot be measured says not_measured with the reason."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.targets.evaluate import MEASURERS, TargetContext, evaluate
from conformance.targets.verdict import ROW_KEYS, Outcome, judge
from hal.backend import get_backend
from hardware_profiles import METRICS, load_profile
from hardware_profiles.model import Target


def _every_metric_profile():
    """p800 with one target per metric (the kinds only the emu profile uses added, and d2h)."""
    p800, emu = load_profile("p800"), load_profile("emu")
    targets = {t.metric: t for t in (*emu.targets, *p800.targets)}
    targets["d2h_gbps"] = Target("d2h_gbps", "d2h_gbps", ">=", 7.4, 0.37, "GB/s", "test: the assumed p800 figure")
    return dataclasses.replace(p800, targets=tuple(targets[m] for m in METRICS))


def test_every_metric_has_a_measurer():
    assert set(MEASURERS) == set(METRICS)


@pytest.fixture(scope="module")
def emu_rows():
    profile = _every_metric_profile()
    with get_backend("emu", profile) as backend:
        ctx = TargetContext(backend, profile)
        return {t.metric: evaluate(t, ctx) for t in profile.targets}


@pytest.mark.parametrize("metric", list(METRICS))
def test_every_target_kind_is_evaluated_on_emu(emu_rows, metric):
    row = emu_rows[metric]
    assert set(ROW_KEYS) <= set(row)
    assert row["verdict"] in ("pass", "fail") and isinstance(row["value"], (int, float)), row
    assert row["basis"] in ("measured", "modeled") and row["reason"]
    if row["basis"] == "modeled":
        assert row["inputs"], f"{metric}: a modeled figure names the profile keys it rests on"


def test_measured_targets_are_measured_on_the_backend(emu_rows):
    assert emu_rows["d2h_submit_block_s"]["basis"] == "measured"
    assert emu_rows["d2h_submit_block_s"]["value"] < 0.5  # write() queues; the copy runs on the D2H thread
    assert emu_rows["ghost_entry_bytes"]["basis"] == "measured" and 40 < emu_rows["ghost_entry_bytes"]["value"] < 400
    assert emu_rows["host_pool_page_bytes"]["details"]["thp_coverage"] is not None
    assert emu_rows["transfer_ratio_vs_memcpy"]["basis"] == "measured"
    # emu has a modeled clock: its bandwidth is the link model's, with the wall figure beside it
    h2d = emu_rows["h2d_gbps"]
    assert h2d["basis"] == "modeled" and h2d["value"] == pytest.approx(7.40, rel=0.01)
    assert h2d["details"]["ratio_vs_memcpy"] > 0 and "link.h2d_gbps" in h2d["inputs"]


def test_without_a_backend_measured_targets_are_not_measured_never_pass():
    profile = _every_metric_profile()
    ctx = TargetContext(None, profile, "backend 'xpu' unavailable: no device")
    rows = {t.metric: evaluate(t, ctx) for t in profile.targets}
    for metric in ("h2d_gbps", "d2h_gbps", "transfer_ratio_vs_memcpy", "host_pool_page_bytes",
                   "d2h_submit_block_s", "per_card_host_gib_local"):
        assert rows[metric]["verdict"] == "not_measured" and rows[metric]["value"] is None
        assert "unavailable: no device" in rows[metric]["reason"]
    for metric in ("plan_segments_layer_first_seed", "ghost_entry_bytes"):  # need no backend
        assert rows[metric]["verdict"] == "pass" and rows[metric]["basis"] == "measured"


class SteadyProbe(TargetContext):
    """A run whose bandwidth probe gives the same figures on every retake (a loaded host retakes a miss)."""

    def forget(self, *keys):
        pass


def test_the_transfer_ratio_is_the_slower_directions():
    """One direction at memcpy speed cannot hide the other one at a third of it."""
    profile = load_profile("emu")
    target = profile.target("transfer_ratio_vs_memcpy")  # >= 0.7
    with get_backend("emu", profile) as backend:
        ctx = SteadyProbe(backend, profile)
        # the probe's figures as a run left them (TargetContext.memo is the per-run store they live in)
        ctx.memo("bandwidth_h2d", lambda: {"ratio": 0.98})
        ctx.memo("bandwidth_d2h", lambda: {"ratio": 0.31})
        row = evaluate(target, ctx)
    assert row["value"] == 0.31 and row["verdict"] == "fail", row
    assert row["details"]["h2d_ratio"] == 0.98 and row["details"]["d2h_ratio"] == 0.31


def test_judge_fails_a_missed_target_and_refuses_a_silent_gap():
    t = Target("ghost_entry_bytes", "ghost_entry_bytes", "<=", 120, 12, "B", "seed")
    assert judge(t, Outcome(200.0, "measured", "x"))["verdict"] == "fail"
    assert judge(t, Outcome(float("nan"), "measured", "x"))["verdict"] == "not_measured"
    with pytest.raises(ValueError, match="^reason:"):
        Outcome(None, "measured")
    with pytest.raises(ValueError, match="^basis:"):
        Outcome(1.0, "guessed", "x")

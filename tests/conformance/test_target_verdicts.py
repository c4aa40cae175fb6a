"""Every target kind gets a verdict on emu; what cannot be measured says not_measured with the reason."""

from __future__ import annotations

import ctypes
import dataclasses

import pytest

from conformance.calibrate.probe import Sample, paired_ratio
from conformance.targets import link_measurers as link
from conformance.targets.evaluate import MEASURERS, TargetContext, evaluate
from conformance.targets.host_measurers import MEMORY_SHORT
from conformance.targets.judgment import ROW_KEYS, Outcome, describe, judge, not_measured
from conformance.targets.link_measurers import PROBE_BYTES
from hal.backend import get_backend
from hal.transfer.seed import seed_plan
from hardware_profiles import METRICS, load_profile
from hardware_profiles.metric_targets import Target


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
@pytest.mark.slow
def test_every_target_kind_is_evaluated_on_emu(emu_rows, metric):
    row = emu_rows[metric]
    assert set(ROW_KEYS) <= set(row)
    if row["verdict"] == "not_measured" and row["details"].get("collapse") in MEMORY_SHORT:
        pytest.skip(f"{metric}: this machine's memory was short when the pool was made: {row['reason']}")
    assert row["verdict"] in ("pass", "fail") and isinstance(row["value"], (int, float)), row
    assert row["basis"] in ("measured", "modeled") and row["reason"]
    if row["basis"] == "modeled":
        assert row["inputs"], f"{metric}: a modeled figure names the profile keys it rests on"


@pytest.mark.slow
def test_measured_targets_are_measured_on_the_backend(emu_rows):
    assert emu_rows["d2h_submit_block_s"]["basis"] == "measured"
    assert emu_rows["d2h_submit_block_s"]["value"] < 0.5  # write() queues; the copy runs on the D2H thread
    assert emu_rows["ghost_entry_bytes"]["basis"] == "measured" and 40 < emu_rows["ghost_entry_bytes"]["value"] < 400
    assert emu_rows["host_pool_page_bytes"]["details"]["thp_coverage"] is not None
    assert emu_rows["transfer_ratio_vs_memcpy"]["basis"] == "measured"
    # emu has a modeled clock: its bandwidth is the link model's, with the wall figure beside it
    h2d = emu_rows["h2d_gbps"]
    # the raw link, slowed only by the small buffer this run registers: between the seed's 7.40 GB/s
    # (read with a 75 GB pool registered) and the profile's unslowed figure
    raw = load_profile("p800").link.h2d_gbps
    assert h2d["basis"] == "modeled" and 7.40 <= h2d["value"] <= raw * (1 + 1e-9)
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


def test_judge_writes_the_whole_row_and_refuses_a_value_that_is_no_number():
    t = Target("ghost_entry_bytes", "ghost_entry_bytes", "<=", 120, 12, "B", "seed")
    got = Outcome(130, "modeled", "from the profile", {"ghost.entry_bytes": "p800.yaml"}, {"n": 3})
    assert judge(t, got) == {
        "name": "ghost_entry_bytes", "kind": "target", "metric": "ghost_entry_bytes", "value": 130, "target": 120,
        "tolerance": 12, "comparator": "<=", "unit": "B", "verdict": "pass", "basis": "modeled",
        "reason": "from the profile", "source": "seed", "inputs": {"ghost.entry_bytes": "p800.yaml"},
        "details": {"n": 3}}
    for bad in ("130", float("inf")):  # a string or an infinity is no measurement: not_measured, saying what came
        row = judge(t, Outcome(bad, "modeled", "x", {"k": "src"}, {"n": 3}))
        assert (row["value"], row["verdict"], row["reason"]) == (None, "not_measured", f"measurement gave {bad!r}")
        assert (row["basis"], row["inputs"], row["details"]) == ("modeled", {"k": "src"}, {"n": 3})
    assert not_measured("measured", "no card", bytes=4) == Outcome(None, "measured", "no card", details={"bytes": 4})
    with pytest.raises(ValueError, match=r"^basis: expected one of measured, modeled, got 'guessed'$"):
        Outcome(1.0, "guessed", "x")


def test_describe_shows_value_target_tolerance_and_why_it_did_not_pass():
    t = Target("ghost_entry_bytes", "ghost_entry_bytes", "<=", 120, 12, "B", "seed")
    assert describe(judge(t, Outcome(100.123456789, "measured", "ok"))) == (
        "ghost_entry_bytes: 100.123 B, target <= 120 (tolerance 12): pass (measured)")
    assert describe(judge(t, Outcome(200.0, "modeled", "a guess"))) == (
        "ghost_entry_bytes: 200 B, target <= 120 (tolerance 12): fail (modeled): a guess")
    untolerated = Target("ghost_entry_bytes", "ghost_entry_bytes", "<=", 120, 0, "B", "seed")
    assert describe(judge(untolerated, not_measured("measured", "no card"))) == (
        "ghost_entry_bytes: - B, target <= 120: not_measured (measured): no card")


class Named:
    name = "fakedev"


def _sample(gbps: float, modeled_s=None, spread=0.0) -> Sample:
    best = PROBE_BYTES / gbps / 1e9
    return Sample(PROBE_BYTES, 1, 1, (best, best * (1 + spread), best * (1 + spread / 2)), modeled_s)


def _probed(h2d: dict, d2h: dict | None = None) -> SteadyProbe:
    ctx = SteadyProbe(Named(), load_profile("emu"))
    ctx.memo("bandwidth_h2d", lambda: h2d)
    ctx.memo("bandwidth_d2h", lambda: d2h or h2d)
    return ctx


def test_probe_figures_a_measured_bandwidth_is_the_best_round_with_its_details():
    t, m = _sample(10.0, spread=0.5), _sample(20.0)
    out = link.gbps("h2d")(_probed({"transfer": t, "memcpy": m, "ratio": 0.5}), None)
    assert out.basis == "measured" and out.value == pytest.approx(10.0) and not out.inputs
    assert out.reason == "best of 3 128 MiB h2d transfers on fakedev (spread 40%)"  # (max-min)/median
    assert out.details == pytest.approx({"bytes": PROBE_BYTES, "segments": 1, "rounds": 3, "wall_gbps_best": 10.0,
                                         "wall_gbps_median": 8.0, "spread": 0.4, "memcpy_gbps_best": 20.0,
                                         "ratio_vs_memcpy": 0.5})


def test_probe_figures_a_modeled_clock_gives_the_modeled_bandwidth_naming_the_link_keys():
    t, m = _sample(10.0, modeled_s=PROBE_BYTES / 7.4e9), _sample(20.0)
    ctx = _probed({}, {"transfer": t, "memcpy": m, "ratio": 0.5})
    out = link.gbps("d2h")(ctx, None)
    assert out.basis == "modeled" and out.value == pytest.approx(7.4)
    assert out.reason == ("modeled clock of fakedev (profile link model) for a 128 MiB d2h it executed; "
                          "measured wall 10.00 GB/s = 0.50x memcpy in the same run")
    assert set(out.inputs) == {"link.d2h_gbps", "link.per_segment_us", "link.per_launch_us"}
    assert out.details["wall_gbps_best"] == pytest.approx(10.0) and out.details["ratio_vs_memcpy"] == 0.5


@pytest.mark.parametrize("loaded, ratio, attempts", [(True, 0.31, 3), (False, 0.31, 1), (True, 0.9, 1)])
def test_probe_figures_a_missed_ratio_is_retaken_only_on_a_loaded_host(monkeypatch, loaded, ratio, attempts):
    monkeypatch.setattr(link, "_loaded", lambda: loaded)
    target = load_profile("emu").target("transfer_ratio_vs_memcpy")  # >= 0.7
    out = link.ratio_vs_memcpy(_probed({"ratio": 0.98}, {"ratio": ratio}), target)
    assert out.value == ratio and out.details["attempts"] == [{"h2d_ratio": 0.98, "d2h_ratio": ratio}] * attempts
    retaken = f"; retaken {attempts - 1}x on a host loaded past its cores" if attempts > 1 else ""
    assert out.reason == ("slower of H2D and D2H on fakedev, 128 MiB in one segment, vs the same copy by this "
                          "host's copy engine called directly, alternating with it (median of 9 per-round "
                          f"ratios){retaken}")


class RetakenProbe(TargetContext):
    """A run whose bandwidth probe gives the next of its figures each time a forgotten one is taken again."""

    def __init__(self, ratios: dict[str, list[float]]):
        super().__init__(Named(), load_profile("emu"))
        self.ratios = {d: iter(r) for d, r in ratios.items()}

    def memo(self, key, fn):
        return super().memo(key, lambda: {"ratio": next(self.ratios[key.removeprefix("bandwidth_")])})


def test_probe_figures_a_retake_measures_both_directions_again(monkeypatch):
    monkeypatch.setattr(link, "_loaded", lambda: True)
    target = load_profile("emu").target("transfer_ratio_vs_memcpy")  # >= 0.7
    out = link.ratio_vs_memcpy(RetakenProbe({"h2d": [0.5, 0.95], "d2h": [0.9, 0.8]}), target)
    assert out.value == 0.8 and out.details["attempts"] == [{"h2d_ratio": 0.5, "d2h_ratio": 0.9},
                                                            {"h2d_ratio": 0.95, "d2h_ratio": 0.8}]
    assert out.reason.endswith("(median of 9 per-round ratios); retaken 1x on a host loaded past its cores")


def test_probe_figures_a_host_is_loaded_past_its_cores(monkeypatch):
    monkeypatch.setattr(link.os, "cpu_count", lambda: 2)
    for load, loaded in ((2.0, False), (2.5, True)):
        monkeypatch.setattr(link.os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert link._loaded() is loaded
    monkeypatch.setattr(link.os, "cpu_count", lambda: None)  # unknown: one core
    monkeypatch.setattr(link.os, "getloadavg", lambda: (1.5, 0.0, 0.0))
    assert link._loaded() is True


def test_probe_figures_bandwidth_is_in_gigabytes_of_10_to_the_9():
    t = m = Sample(PROBE_BYTES, 1, 1, (0.125, 0.25, 0.25), None)  # 2^27 bytes in 1/8 s: 2^30 B/s
    out = link.gbps("h2d")(_probed({"transfer": t, "memcpy": m, "ratio": 1.0}), None)
    assert out.value == out.details["wall_gbps_best"] == out.details["memcpy_gbps_best"] == 1.073741824


def test_probe_figures_without_a_backend_each_direction_is_not_measured_saying_why():
    ctx = TargetContext(None, load_profile("emu"), "backend 'xpu' unavailable: no device")
    target = load_profile("emu").target("transfer_ratio_vs_memcpy")
    for measure in (link.gbps("h2d"), link.gbps("d2h"), lambda c, _: link.ratio_vs_memcpy(c, target)):
        assert measure(ctx, None) == not_measured("measured", "backend 'xpu' unavailable: no device")


def test_probe_figures_the_plan_targets_are_the_seed_plans(monkeypatch):
    planned = []
    monkeypatch.setattr(link, "seed_plan", lambda layout: planned.append(layout) or seed_plan(layout))
    for layout in ("layer_first", "page_first_direct"):
        plan = seed_plan(layout)
        out = link.plan_segments(layout)(None, None)
        assert (out.value, out.basis) == (plan.num_segments, "measured")
        assert out.reason == f"seed plan (hal.transfer.seed), host layout {layout}"
        assert out.details == {"bytes": plan.nbytes, "direction": str(plan.direction)}
    out = link.plan_seconds(None, None)
    assert out.basis == "measured" and out.reason == "median of 7 plans of the seed transfer, page_first_direct"
    assert 0 < out.details["min_s"] <= out.value <= out.details["max_s"] < 1.0
    # one plan per plan_segments target; then a warm-up and the 7 the median is of
    assert planned == ["layer_first", "page_first_direct"] + ["page_first_direct"] * 8


def test_probe_figures_one_probe_per_direction_per_run_on_the_backend(monkeypatch):
    monkeypatch.setattr(link, "PROBE_BYTES", 1 << 20)
    monkeypatch.setattr(link, "ROUNDS", 3)
    profile = load_profile("emu")
    with get_backend("emu", profile) as backend:
        ctx = TargetContext(backend, profile)
        got = {d: link._bandwidth(ctx, d) for d in ("h2d", "d2h")}
        for direction, g in got.items():
            t, m = g["transfer"], g["memcpy"]
            assert (t.nbytes, t.segments, len(t.wall_s), m.nbytes, len(m.wall_s)) == (1 << 20, 1, 3, 1 << 20, 3)
            assert t.modeled_s and g["ratio"] == paired_ratio(t, m)
            assert link._bandwidth(ctx, direction) is g  # the three bandwidth targets share one probe
        assert ctx.memo("probe_buffers", lambda: None).nbytes == 1 << 20  # one buffer pair for both


@pytest.mark.parametrize("collapse, coverage, verdict", [
    ("collapsed", 1.0, "pass"),
    ("unsupported", 0.4, "fail"),  # a kernel before 6.1: the fault's pages are the pool's
    ("failed: EPERM", 0.4, "fail"),
    ("failed: ENOMEM", 0.4, "not_measured"),  # no memory to compact into: this moment's, not the pool's
    ("failed: EAGAIN", 0.4, "not_measured"),
    ("failed: EBUSY", 0.4, "not_measured"),  # the cgroup's charge refused: its limit, not the pool
])
def test_a_pool_short_of_huge_pages_fails_unless_the_machine_had_no_memory_to_give(monkeypatch, collapse, coverage,
                                                                                   verdict):
    from hal.memory.host import HostBuffer

    real = HostBuffer.report

    def report(self):
        return {**real(self), "huge_page_coverage": coverage, "huge_page_collapse": collapse}

    monkeypatch.setattr(HostBuffer, "report", report)
    profile = load_profile("p800")
    target = next(t for t in profile.targets if t.metric == "host_pool_page_bytes")
    with get_backend("emu", profile) as backend:
        row = evaluate(target, TargetContext(backend, profile))
    assert row["verdict"] == verdict, row
    assert row["details"]["collapse"] == collapse
    if verdict == "not_measured":
        assert "MemAvailable" in row["reason"]
        # each errno its own cause and remedy: compaction helps only where memory was short
        assert ("compact_memory" in row["reason"]) is (collapse == "failed: ENOMEM"), row["reason"]
        assert ("cgroup memory limit" in row["reason"]) is (collapse == "failed: EBUSY"), row["reason"]


def test_a_pool_on_4kb_pages_in_a_process_with_thp_off_fails_naming_the_prctl(monkeypatch):
    """The failure's reason is the process's THP switch (PR_SET_THP_DISABLE), the fix the user
    needs; it read 'too few free 2 MB blocks (fragmentation)'."""
    from tests.hal.test_memory import PR_SET_THP_DISABLE

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        pytest.skip("prctl(PR_SET_THP_DISABLE) refused here")
    try:
        profile = load_profile("p800")
        target = next(t for t in profile.targets if t.metric == "host_pool_page_bytes")
        with get_backend("emu", profile) as backend:
            row = evaluate(target, TargetContext(backend, profile))
    finally:
        libc.prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0)
    assert row["verdict"] == "fail" and row["details"]["collapse"] == "disabled", row
    assert "PR_SET_THP_DISABLE" in row["reason"] and "fragmentation" not in row["reason"], row["reason"]


CGROUP_COLLAPSE = """
import os, sys
import hal.memory.host as host
from conformance.targets.evaluate import TargetContext, evaluate
from hal.backend import get_backend
from hardware_profiles import load_profile

host.madvise_huge = lambda *a: None  # the fault gives 4 KB pages, as on a fragmented host
profile = load_profile("p800")
target = next(t for t in profile.targets if t.metric == "host_pool_page_bytes")
limit = os.path.join(sys.argv[1], sys.argv[2])
usage = limit.replace("limit_in_bytes", "usage_in_bytes").replace("memory.max", "memory.current")
given = open(limit).read().strip()
collapse = host.collapse_huge


def collapse_at_the_limit(address, length):
    # Only the collapse runs at the limit: the pool's 4 KB pages are charged, and 1 MiB of room is
    # left, less than the 2 MB page a collapse charges beside them; anything else allocating there
    # could meet the cgroup's OOM killer instead.
    open(limit, "w").write(str(int(open(usage).read()) + (1 << 20)))
    try:
        return collapse(address, length)
    finally:
        open(limit, "w").write(given)


host.collapse_huge = collapse_at_the_limit
with get_backend("emu", profile) as backend:
    row = evaluate(target, TargetContext(backend, profile))
print(row["verdict"], row["details"]["collapse"], row["reason"], sep="\\n")
"""


@pytest.mark.slow  # a child process in a child memory cgroup (root only)
def test_a_collapse_the_cgroups_limit_refuses_names_the_limit_not_free_memory():
    """In a container whose memory limit leaves no room for the 2 MB pages, MADV_COLLAPSE fails
    EBUSY: not measured, naming the cgroup's limit and room (it said the machine had too little
    free memory, beside a MemAvailable of gigabytes, and to compact memory)."""
    import re
    import subprocess
    import sys

    from tests.cgroups import _own_memory_cgroup, memory_limited

    with memory_limited(4 << 30) as prefix:
        child = re.search(r"> (\S+)/cgroup\.procs", prefix[2]).group(1)  # the cgroup the prefix joins
        limit_file = _own_memory_cgroup()[1]
        proc = subprocess.run([*prefix, sys.executable, "-c", CGROUP_COLLAPSE, child, limit_file],
                              capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict, collapse, reason = proc.stdout.strip().splitlines()[-3:]
    if collapse == "collapsed":
        pytest.skip("the kernel found room for the collapse under this limit (reclaimed page cache)")
    assert (verdict, collapse) == ("not_measured", "failed: EBUSY"), proc.stdout
    assert "cgroup memory limit" in reason and "compact_memory" not in reason, reason

"""hicache ablate: the ladder's rows, their pricing, not_measured where the profile has no figure, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import hardware_profiles
from conformance.cli.main import main
from hicache_ref.sim.ablate import ROW_KEYS, STEPS, ablate, sweep_tiers
from hicache_ref.sim.trace_synth import synthesize, write_trace
from hicache_ref.spec import CacheSpec

P800 = Path(hardware_profiles.__file__).parent / "p800.yaml"
REQUESTS = synthesize(80, 300, 3000, 0.7, sessions=6, seed=11)


def profile_yaml(tmp_path, name="custom", **changes) -> str:
    """p800.yaml with `section__key=value` replaced (e.g. penalties__numa_local_pct="unknown")."""
    doc = yaml.safe_load(P800.read_text())
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        doc[section][key] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def run_ladder(profile: str, tp: int = 2, concurrency=None, **kw) -> dict:
    spec = CacheSpec.of(page_size=64, l1_tokens=4096, l2_tokens=16384, profile=profile, tp=tp,
                        concurrency=concurrency)
    return ablate(spec, REQUESTS, workers=1, **kw)


@pytest.fixture(scope="module")
def p800_rows():
    return run_ladder("p800")


def by_step(result: dict) -> dict:
    return {s["step"]: s for s in result["steps"]}


def test_one_row_per_step_in_ladder_order_with_the_json_keys(p800_rows):
    assert [s["step"] for s in p800_rows["steps"]] == list(STEPS)
    for s in p800_rows["steps"]:
        assert set(ROW_KEYS) <= set(s)
    assert p800_rows["configuration"]["tp"] == 2 and p800_rows["configuration"]["profile"] == "p800"


def test_layer_first_cuts_segments_and_moves_the_same_bytes(p800_rows):
    rows = by_step(p800_rows)
    base, lf = rows["baseline"], rows["layer_first"]
    assert base["d2h_bytes"] > 0 and base["h2d_bytes"] > 0  # the case exercises both directions
    assert (lf["hit_rate"], lf["d2h_bytes"], lf["h2d_bytes"]) == (base["hit_rate"], base["d2h_bytes"], base["h2d_bytes"])
    assert lf["d2h_segments"] <= base["d2h_segments"] and lf["h2d_segments"] <= base["h2d_segments"]
    # page_first_direct: one segment per (page, layer); 78 layers, 89,856 bytes a token, 64-token pages
    for d in ("d2h", "h2d"):
        assert base[f"{d}_segments"] == base[f"{d}_bytes"] // (89_856 * 64) * 78
    assert lf["modeled_transfer_seconds"] < base["modeled_transfer_seconds"]


def test_unpriced_steps_say_why_and_keep_the_replay_columns(p800_rows):
    rows = by_step(p800_rows)
    for step, word in (("daemon_threads", "inline submission"), ("thp", "4 KB pages")):
        r = rows[step]
        assert r["net_benefit_seconds"] is None and r["ttft_change_seconds"] is None
        assert word in r["not_measured"]["net_benefit_seconds"]
        assert r["d2h_segments"] == rows["layer_first"]["d2h_segments"]  # the same replay: filled, not guessed
    r = rows["per_request_hits"]
    # under PD every request is inserted twice: per-insert counting backs up after one request
    assert r["d2h_bytes"] < rows["numa"]["d2h_bytes"] and not r["not_measured"]


def test_numa_step_on_shared_uplink_prices_ido_and_the_penalty_by_hand(p800_rows):
    rows = by_step(p800_rows)
    lf, numa = rows["layer_first"], rows["numa"]
    baseline_s = p800_rows["configuration"]["baseline_prefill_seconds"]
    assert baseline_s == pytest.approx(sum(0.735 + 28.239e-6 * r.input_length for r in REQUESTS))
    # p800: 2 cards per uplink, IDO unknown -> D2H at 0.5 x 7.4 GB/s before; full bandwidth after
    d2h = lf["d2h_bytes"]
    assert lf["modeled_transfer_seconds"] - numa["modeled_transfer_seconds"] == pytest.approx(
        d2h / 3.7e9 - d2h / 7.4e9)
    # remote +11.5% -> local -2.1% of the baseline prefill seconds
    gain = numa["net_benefit_seconds"] - lf["net_benefit_seconds"]
    assert gain == pytest.approx(0.136 * baseline_s + d2h / 3.7e9 - d2h / 7.4e9)
    assert "penalties.ido_shared_d2h_factor" in lf["assumed_inputs"]
    assert "penalties.ido_shared_d2h_factor" not in numa["assumed_inputs"]


def test_numa_step_without_shared_uplink_is_the_penalty_alone(tmp_path):
    rows = by_step(run_ladder(profile_yaml(tmp_path, topology__devices_per_switch=1)))
    lf, numa = rows["layer_first"], rows["numa"]
    assert numa["modeled_transfer_seconds"] == lf["modeled_transfer_seconds"]
    assert "IDO" not in numa["change"]
    n = len(REQUESTS)
    assert numa["ttft_change_seconds"] - lf["ttft_change_seconds"] == pytest.approx(
        (numa["net_benefit_seconds"] - lf["net_benefit_seconds"]) / -n)


def test_tp_shared_writes_no_more_host_bytes_than_private(p800_rows):
    rows = by_step(p800_rows)
    private = rows["numa"] if rows["per_request_hits"]["hit_rate"] is None else rows["per_request_hits"]
    shared = rows["tp_shared"]
    assert shared["d2h_bytes_all_ranks"] <= private["d2h_bytes_all_ranks"]
    assert shared["host_pool_bytes_all_ranks"] == private["host_pool_bytes_all_ranks"]  # same memory, one copy
    assert shared["hit_rate"] >= private["hit_rate"]  # 2 x the L2 for one copy
    assert shared["l2_tokens"] == 2 * private["l2_tokens"]


def test_registered_penalty_held_outside_the_measured_range_is_noted(p800_rows):
    rows = by_step(p800_rows)  # 16,384 tokens x 89,856 B = 1.5 GB registered: below the seed's 15-80 GB
    assert "held at its 15 GB value: 1 GB registered" in rows["layer_first"]["notes"][0]
    assert rows["daemon_threads"]["notes"] == []  # not priced: nothing held


def test_plateau_step_takes_the_sweeps_capacity(p800_rows):
    c = p800_rows["configuration"]
    assert c["sweep_l2_tokens"] == sweep_tiers(2 * 16384, 2, 64) == [4096 * i for i in range(1, 9)]
    assert by_step(p800_rows)["plateau_capacity"]["l2_tokens"] == c["plateau_l2_tokens"]


def test_same_input_same_json_bit_for_bit(p800_rows):
    assert json.dumps(run_ladder("p800")) == json.dumps(p800_rows)


def test_a_figure_the_profile_marks_unknown_is_not_measured(tmp_path):
    rows = by_step(run_ladder(profile_yaml(tmp_path, penalties__numa_local_pct="unknown")))
    assert rows["layer_first"]["net_benefit_seconds"] is not None  # remote placement still priced
    for step in ("numa", "tp_shared", "plateau_capacity"):
        assert rows[step]["net_benefit_seconds"] is None
        assert "penalties.numa_local_pct" in rows[step]["not_measured"]["net_benefit_seconds"]
        assert rows[step]["hit_rate"] is not None  # the replay ran: its columns are filled
    rows = by_step(run_ladder(profile_yaml(tmp_path, "nocompute", compute__prefill_per_token_s="unknown")))
    assert all(r["net_benefit_seconds"] is None for r in rows.values())
    assert "compute model" in rows["baseline"]["not_measured"]["net_benefit_seconds"]


@pytest.mark.parametrize(("kw", "word"), [
    (dict(concurrency=0), "concurrency"), (dict(tp=0), "tp"), (dict(plateau_gain=2.0), "plateau_gain")])
def test_library_refuses_bad_arguments(kw, word):
    with pytest.raises(ValueError, match=word):
        run_ladder("p800", **kw)


def test_cli_writes_table_json_and_png(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, REQUESTS)
    out = tmp_path / "out"
    args = ["ablate", "--trace", str(trace), "--profile", "p800", "--l1-tokens", "4096", "--l2-tokens", "16384",
            "--tp", "2", "--out", str(out), "--quiet"]
    assert main(args) == 0
    captured = capsys.readouterr()
    table = captured.out
    assert captured.err == ""  # progress only on a terminal
    assert "layer_first" in table and "n/m" in table
    written = json.loads((out / "ablate.json").read_text())
    assert [s["step"] for s in written["steps"]] == list(STEPS)
    assert (out / "ablate.png").read_bytes()[:4] == b"\x89PNG"
    assert main(args + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out) == written


@pytest.mark.parametrize(("args", "where"), [
    (["--l2-tokens", "1000"], "--l2-tokens"),  # below 8 sweep tiers x 2 ranks x 64
    (["--l1-tokens", "10"], "--l1-tokens"),
    (["--profile", "/nonexistent/p.yaml"], "--profile"),
    (["--trace", "/nonexistent.jsonl"], "--trace"),
    (["--concurrency", "0"], "--concurrency"),
])
def test_cli_refusals_are_one_line(tmp_path, capsys, args, where):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, REQUESTS[:5])
    base = {"--trace": str(trace), "--profile": "p800", "--l1-tokens": "4096", "--l2-tokens": "16384", "--tp": "2"}
    for k, v in zip(args[::2], args[1::2], strict=True):
        base[k] = v
    assert main(["ablate", *[x for kv in base.items() for x in kv], "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: {where}")
    assert not (tmp_path / "o").exists()


def test_cli_refuses_capacities_the_machine_cannot_hold(tmp_path, capsys, monkeypatch):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, REQUESTS[:5])
    monkeypatch.setenv("HICACHE_MEMORY_BUDGET", "1MiB")
    assert main(["ablate", "--trace", str(trace), "--profile", "p800", "--l1-tokens", "4096",
                 "--l2-tokens", "100M", "--tp", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hicache: --l2-tokens") and "MiB" in err[0]


def test_a_rung_without_l2_gets_no_numa_term():
    """HiCache off (L2 0, e.g. a plateau at L1 alone) places no host memory: no NUMA credit or penalty."""
    from hardware_profiles.loader import load_profile
    from hicache_ref.sim.ablate_price import HostSwitches, price

    prof = load_profile("p800")
    assert prof.penalties.numa_local_pct  # the profile does have a NUMA figure (it must not apply here)
    fig = dict(modeled_transfer_seconds=0.0, d2h_bytes=0, modeled_prefill_seconds_saved=0.0, l2_tokens=0,
               token_bytes=89856, requests=300)
    p = price(prof, fig, HostSwitches(daemon_threads=True, thp=True, numa_local=True), baseline_s=341.0)
    assert p.net_benefit_s == 0.0 and p.ttft_change_s == 0.0
    with_host = price(prof, dict(fig, l2_tokens=64 * 1000), HostSwitches(numa_local=True), baseline_s=341.0)
    assert with_host.net_benefit_s != 0.0  # the same rung with a host pool is priced with its penalties

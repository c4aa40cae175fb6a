"""hicache ablate: the ladder's rows in order, each rung priced by the mechanisms against HiCache off,
unpriced rungs naming the profile key, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import hardware_profiles
from conformance.cli.main import main
from hardware_profiles import load_profile
from hicache_ref.sim import mechanisms as mech
from hicache_ref.sim.ablate import EXTRA_KEYS, ROW_KEYS, STEPS, ablate, sweep_tiers
from hicache_ref.sim.trace_synth import Workload, synthesize, write_trace
from hicache_ref.spec import CacheSpec

P800 = Path(hardware_profiles.__file__).parent / "p800.yaml"
REQUESTS = synthesize(80, 300, 3000, 0.7, sessions=6, seed=11)  # small: the CLI and the refusals
# Shaped like the seed's workload (24K-64K tokens, reuse 0.82, a global prefix), 300 requests and the
# tiers scaled down with it: a few seconds for the whole ladder.
SEED_LIKE = Workload(requests=300, min_tokens=24_000, max_tokens=64_000, reuse=0.82, sessions=60, rate=2.0,
                     seed=0, global_prefix_share=0.535).synthesize().requests
CONCURRENCY, TP = 10, 8
LADDER = ["baseline", "layer_first", "daemon_threads", "thp", "numa", "tp_shared", "l3_pooled", "per_request_hits",
          "plateau_capacity"]


def profile_yaml(tmp_path, name="custom", **changes) -> str:
    """p800.yaml with `section__key=value` replaced (e.g. host_costs__numa_remote_bw_factor="unknown")."""
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


def seed_like_ladder(profile="p800", workers=None) -> dict:
    spec = CacheSpec.of(page_size=64, l1_tokens=100_000, l2_tokens=200_000, profile=profile, tp=TP,
                        concurrency=CONCURRENCY, pd_disagg=True)
    return ablate(spec, SEED_LIKE, workers=workers)


@pytest.fixture(scope="module")
def seed_rows():
    return seed_like_ladder()


def by_step(result: dict) -> dict:
    return {s["step"]: s for s in result["steps"]}


@pytest.mark.slow
def test_one_row_per_step_in_ladder_order_with_the_json_keys(seed_rows):
    assert list(STEPS) == LADDER
    assert [s["step"] for s in seed_rows["steps"]] == LADDER
    c = seed_rows["configuration"]
    assert (c["tp"], c["profile"], c["concurrency"], c["requests"]) == (TP, "p800", CONCURRENCY, 300)
    for s in seed_rows["steps"]:
        assert set(ROW_KEYS) | set(EXTRA_KEYS) <= set(s)
        # p800 prices every rung: nothing is left not measured
        assert s["not_measured"] == {} and None not in (s["net_benefit_seconds"], s["ttft_change_seconds"],
                                                         s["ttft_change_pct"], s["modeled_transfer_seconds"])


@pytest.mark.slow
def test_first_build_is_a_loss_and_the_tp_shared_pool_a_gain(seed_rows):
    rows = by_step(seed_rows)
    base, shared = rows["baseline"], rows["tp_shared"]
    assert base["net_benefit_seconds"] < 0 and base["ttft_change_seconds"] > 0 and base["ttft_change_pct"] > 0
    assert shared["net_benefit_seconds"] > 0 and shared["ttft_change_seconds"] < 0 and shared["ttft_change_pct"] < 0
    assert shared["hit_rate"] > seed_rows["configuration"]["hit_rate_l1_only"]


@pytest.mark.slow
def test_ttft_change_is_the_busy_seconds_saved_waited_by_every_client(seed_rows):
    c = seed_rows["configuration"]
    off = c["modeled_ttft_l1_only_seconds"]
    for s in seed_rows["steps"]:
        assert s["ttft_change_seconds"] == pytest.approx(-CONCURRENCY * s["net_benefit_seconds"] / c["requests"])
        assert s["ttft_change_pct"] == pytest.approx(s["ttft_change_seconds"] / off * 100)
        assert s["modeled_ttft_seconds"] == pytest.approx(CONCURRENCY * s["service"]["total"] / c["requests"])
        assert s["modeled_transfer_seconds"] == pytest.approx(s["service"]["total"] - s["service"]["compute"])


@pytest.mark.slow
def test_layer_first_cuts_segments_and_the_inline_hold_and_moves_the_same_bytes(seed_rows):
    rows = by_step(seed_rows)
    base, lf = rows["baseline"], rows["layer_first"]
    assert base["d2h_bytes"] > 0 and base["h2d_bytes"] > 0  # the case exercises both directions
    assert (lf["hit_rate"], lf["d2h_bytes"], lf["h2d_bytes"]) == (base["hit_rate"], base["d2h_bytes"], base["h2d_bytes"])
    # page_first_direct: one segment per (page, layer); 78 layers, 89,856 bytes a token, 64-token pages
    for d in ("d2h", "h2d"):
        assert base[f"{d}_segments"] == base[f"{d}_bytes"] // (89_856 * 64) * 78 > 5 * lf[f"{d}_segments"]
    assert base["service"]["hold"] > 100 * lf["service"]["hold"]  # the per-segment submission is gone
    assert base["service"]["compute"] == lf["service"]["compute"]
    assert lf["net_benefit_seconds"] > base["net_benefit_seconds"]


@pytest.mark.slow
def test_daemon_threads_keep_the_contention_share_and_stop_hiding_device_time(seed_rows):
    rows = by_step(seed_rows)
    lf, dt = rows["layer_first"]["service"], rows["daemon_threads"]["service"]
    hc = load_profile("p800").host_costs
    assert rows["daemon_threads"]["d2h_segments"] == rows["layer_first"]["d2h_segments"]  # the same replay
    assert dt["compute"] == lf["compute"] and dt["load"] == lf["load"]
    assert dt["hold"] == pytest.approx(hc.submit_contention * lf["hold"])
    # inline, the copy runs while the scheduler waits, so the submission's share of device time was hidden
    assert dt["interference"] - lf["interference"] == pytest.approx(hc.d2h_interference * lf["hold"])
    assert rows["daemon_threads"]["host_state"]["submission"] == "daemon"


def _load_gap(a: dict, b: dict, profile) -> float:
    """What row a's H2D loads cost beyond row b's, both rows moving the same bytes, from their host states."""
    return a["h2d_bytes"] / 1e9 * sum(s / mech.dma_gbps(profile, "h2d", mech.HostState(**r["host_state"]))
                                      for s, r in ((1, a), (-1, b)))


@pytest.mark.slow
def test_thp_and_local_numa_price_the_same_loads_faster_by_their_bandwidth(seed_rows):
    rows = by_step(seed_rows)
    p = load_profile("p800")
    for before, after in (("daemon_threads", "thp"), ("thp", "numa")):
        a, b = rows[before], rows[after]
        assert a["h2d_bytes"] == b["h2d_bytes"] and a["service"]["compute"] == b["service"]["compute"]
        assert a["service"]["load"] - b["service"]["load"] == pytest.approx(_load_gap(a, b, p))
        assert b["service"]["interference"] < a["service"]["interference"]
        assert b["net_benefit_seconds"] > a["net_benefit_seconds"]
    hs = {k: rows[k]["host_state"] for k in ("daemon_threads", "thp", "numa")}
    assert (hs["daemon_threads"]["host_page_bytes"], hs["thp"]["host_page_bytes"]) == (4096, 2 << 20)
    assert (hs["thp"]["numa"], hs["thp"]["ido"], hs["numa"]["numa"], hs["numa"]["ido"]) == ("remote", False,
                                                                                            "local", True)
    assert "IDO" in rows["numa"]["change"]  # p800: 2 cards per uplink


@pytest.mark.slow
def test_tp_shared_writes_one_copy_from_one_writer(seed_rows):
    rows = by_step(seed_rows)
    private, shared = rows["numa"], rows["tp_shared"]
    assert shared["d2h_bytes_all_ranks"] <= private["d2h_bytes_all_ranks"]
    assert shared["host_pool_bytes_all_ranks"] == private["host_pool_bytes_all_ranks"]  # same memory, one copy
    assert shared["hit_rate"] >= private["hit_rate"]  # TP x the L2 for one copy
    assert shared["l2_tokens"] == TP * private["l2_tokens"]
    assert shared["host_state"]["writers_per_uplink"] == 1 and private["host_state"]["writers_per_uplink"] == 2
    assert shared["host_state"]["registered_bytes"] == TP * private["host_state"]["registered_bytes"]
    assert shared["host_state"]["numa"] == "interleave"


@pytest.mark.slow
def test_per_request_counting_backs_up_less(seed_rows):
    rows = by_step(seed_rows)
    # under PD every request is inserted twice: per-insert counting backs up after one request
    assert rows["per_request_hits"]["d2h_bytes"] < rows["tp_shared"]["d2h_bytes"]
    assert rows["per_request_hits"]["state"]["ghost"] and rows["per_request_hits"]["state"]["tp_shared"]


@pytest.mark.slow
def test_plateau_step_takes_the_sweeps_capacity_on_top_of_the_better_last_rung(seed_rows):
    c, rows = seed_rows["configuration"], by_step(seed_rows)
    assert c["sweep_l2_tokens"] == sweep_tiers(TP * 200_000, TP, 64)
    plateau = rows["plateau_capacity"]
    # the plateau, or one page per rank where L1 alone is on it (an L3 under the last rungs can make L2 flat)
    assert plateau["l2_tokens"] == max(c["plateau_l2_tokens"], TP * 64)
    better = min(("l3_pooled", "per_request_hits"), key=lambda k: rows[k]["modeled_ttft_seconds"])
    assert plateau["change"].endswith(f"on top of {better}")
    assert plateau["state"] == rows[better]["state"]


@pytest.mark.slow
def test_small_ladder_plateau_tiers():
    c = run_ladder("p800")["configuration"]
    assert c["sweep_l2_tokens"] == sweep_tiers(2 * 16384, 2, 64) == [4096 * i for i in range(1, 9)]


@pytest.mark.slow
def test_same_input_same_json_bit_for_bit(seed_rows):
    assert json.dumps(seed_like_ladder()) == json.dumps(seed_rows)


@pytest.mark.slow
def test_replays_in_worker_processes_give_the_ladder_made_here_bit_for_bit(seed_rows):
    assert json.dumps(seed_like_ladder(workers=1)) == json.dumps(seed_like_ladder(workers=2)) == json.dumps(seed_rows)


@pytest.mark.slow
def test_a_parameter_the_profile_marks_unknown_leaves_the_rungs_that_need_it_not_measured(tmp_path):
    rows = by_step(run_ladder(profile_yaml(tmp_path, host_costs__numa_remote_bw_factor="unknown")))
    for step in ("numa", "tp_shared", "per_request_hits", "plateau_capacity"):  # local, then interleaved
        assert rows[step]["net_benefit_seconds"] is not None and rows[step]["not_measured"] == {}, step
    for step in ("baseline", "layer_first", "daemon_threads", "thp"):  # remote
        assert rows[step]["net_benefit_seconds"] is None and rows[step]["ttft_change_seconds"] is None
        assert rows[step]["not_measured"]["net_benefit_seconds"] == \
            "profile custom has no host_costs.numa_remote_bw_factor"
        assert rows[step]["hit_rate"] is not None  # the replay ran: its columns are filled
    rows = by_step(run_ladder(profile_yaml(tmp_path, "nocompute", compute__prefill_per_token_s="unknown")))
    assert all(r["net_benefit_seconds"] is None for r in rows.values())
    assert "compute model" in rows["baseline"]["not_measured"]["net_benefit_seconds"]


@pytest.mark.slow
def test_the_ido_factor_is_needed_only_where_two_cards_write_to_different_nodes_through_one_uplink(tmp_path):
    # strict PCIe ordering holds up writes under one-to-one binding (card i on node i), which no rung
    # uses: the first build's remote pools and the NUMA-local ones are priced without the factor
    rows = by_step(run_ladder(profile_yaml(tmp_path, host_costs__ido_shared_d2h_factor="unknown")))
    assert all(r["not_measured"] == {} for r in rows.values())
    alone = profile_yaml(tmp_path, "alone", host_costs__ido_shared_d2h_factor="unknown")
    doc = yaml.safe_load(Path(alone).read_text())
    doc["topology"]["devices_per_switch"] = 1
    Path(alone).write_text(yaml.safe_dump(doc))
    rows = by_step(run_ladder(alone))  # one card per uplink: no shared writes to order
    assert all(r["not_measured"] == {} for r in rows.values())
    assert "IDO" not in rows["numa"]["change"]


@pytest.mark.parametrize(("kw", "word"), [
    (dict(concurrency=0), "concurrency"), (dict(tp=0), "tp"), (dict(plateau_gain=2.0), "plateau_gain")])
def test_library_refuses_bad_arguments(kw, word):
    with pytest.raises(ValueError, match=word):
        run_ladder("p800", **kw)


@pytest.mark.slow
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
    assert all(any(line.startswith(step) for line in table.splitlines()) for step in LADDER)
    written = json.loads((out / "ablate.json").read_text())
    assert [s["step"] for s in written["steps"]] == LADDER
    assert all(s["not_measured"] == {} for s in written["steps"])
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


@pytest.mark.parametrize(("args", "where"), [
    (["--layers", "61"], "--layers"), (["--page-size", "32"], "--page-size"), (["--dtype", "fp8"], "--dtype"),
    (["--trace", "x.jsonl"], "--trace"), (["--l1-tokens", "1M"], "--l1-tokens"), (["--concurrency", "4"], "--concurrency"),
    (["--profile", "emu"], "--scenario"),  # no readings file: no scenario to build
])
def test_scenario_seed_refuses_what_the_scenario_sets(tmp_path, capsys, args, where):
    assert main(["ablate", "--scenario", "seed", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: {where}: ")
    assert not (tmp_path / "o").exists()

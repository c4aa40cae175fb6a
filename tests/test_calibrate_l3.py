"""`hicache calibrate --storage SPEC`: the L3 link measured through a real store and written as the
profile's l3_link (measured sources; the shared uplink kept from the base)."""

from __future__ import annotations

from conformance.calibrate import l3_link
from conformance.cli.main import main as cli_main
from hardware_profiles import load_profile
from hicache_ref.storage.memory import MemoryStorage


def test_measure_fits_rate_and_latencies_from_put_get_timings():
    with MemoryStorage(max_bytes=64 << 20) as store:
        cal = l3_link.measure(store, sizes=(16 << 10, 256 << 10), batches=(1, 4), repeat=3)
    assert [p["objects"] for p in cal["points"]["read"]] == [1, 4, 1, 4]
    link = cal["l3_link"]
    assert link["read_gbps"] is None or link["read_gbps"] > 0
    assert link["per_batch_us"] >= 0 and link["per_object_us"] >= 0


def test_calibrate_storage_writes_the_l3_link_into_a_profile(tmp_path, capsys):
    out = tmp_path / "p.yaml"
    assert cli_main(["calibrate", "--storage", "memory:max_bytes=128M", "--repeat", "3", "--out", str(out),
                     "--quiet"]) == 0
    assert "L3 link of memory:" in capsys.readouterr().out
    p = load_profile(out)
    assert p.l3_link.per_batch_us is not None and p.l3_link.per_object_us is not None
    assert p.sources["l3_link.per_object_us"].startswith("measured: `hicache calibrate --storage memory:")
    assert "l3_link.per_object_us" not in p.assumptions()
    assert p.l3_link.uplink_gbps == load_profile("p800").l3_link.uplink_gbps  # not measured: kept, still assumed
    assert "l3_link.uplink_gbps" in p.assumptions()


def test_calibrate_refuses_the_model_store(capsys):
    assert cli_main(["calibrate", "--storage", "model:", "--quiet"]) == 2
    assert "hicache: --storage: model:: moves no bytes" in capsys.readouterr().err

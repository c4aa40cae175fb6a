"""`hicache calibrate --storage SPEC`: the L3 link measured through a real store and written as the
profile's l3_link (measured sources), with the uplink it shares with D2H measured beside it."""

from __future__ import annotations

import pytest

from conformance.calibrate import l3_link, uplink
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


@pytest.mark.slow
def test_calibrate_storage_writes_the_l3_link_into_a_profile(tmp_path, capsys):
    out = tmp_path / "p.yaml"
    assert cli_main(["calibrate", "--storage", "memory:max_bytes=128M", "--repeat", "3", "--out", str(out),
                     "--quiet"]) == 0
    assert "L3 link of memory:" in capsys.readouterr().out
    p = load_profile(out)
    assert p.l3_link.per_batch_us is not None and p.l3_link.per_object_us is not None
    assert p.sources["l3_link.per_object_us"].startswith("measured: `hicache calibrate --storage memory:")
    assert "l3_link.per_object_us" not in p.assumptions()
    assert "l3_link.uplink_gbps" not in p.assumptions()  # measured, no longer the base's assumption
    assert p.sources["l3_link.uplink_gbps"].startswith("measured: `hicache calibrate --storage memory:")
    assert p.l3_link.uplink_gbps > 0 and p.l3_link.uplink_gbps != load_profile("p800").l3_link.uplink_gbps


def test_the_uplink_is_both_sides_bytes_over_the_seconds_both_took_at_once():
    from hal.backend import get_backend

    with get_backend("emu", load_profile("emu")) as backend, MemoryStorage(max_bytes=64 << 20) as store:
        up = uplink.measure(backend, store, nbytes=8 << 20, objects=4, repeat=3)
        assert store.stored_bytes == 0  # its objects discarded: a user's store is left as it was
    assert up["d2h_bytes"] == 8 << 20 and up["l3_bytes"] == 8 << 20
    assert up["uplink_gbps"] * up["both_seconds"] * 1e9 == pytest.approx(16 << 20)
    assert up["contention"] == pytest.approx(up["both_seconds"] / max(up["d2h_seconds"], up["l3_seconds"]))
    assert up["contended"] == (up["contention"] > uplink.CONTENDED)


def test_a_failed_put_while_both_run_is_raised_naming_the_store():
    from hal.backend import get_backend

    class Refusing(MemoryStorage):
        def _write(self, items):
            return [False] * len(items)

    with get_backend("emu", load_profile("emu")) as backend, Refusing(max_bytes=64 << 20) as store:
        with pytest.raises(RuntimeError, match="a put of 4 objects failed"):
            uplink.measure(backend, store, nbytes=1 << 20, objects=4, repeat=3)


def test_calibrate_storage_refuses_a_backend_that_moves_no_bytes(capsys):
    assert cli_main(["calibrate", "--storage", "memory:", "--backend", "count", "--quiet"]) == 2
    assert "hicache: --backend: count moves no bytes" in capsys.readouterr().err


def test_calibrate_refuses_the_model_store(capsys):
    assert cli_main(["calibrate", "--storage", "model:", "--quiet"]) == 2
    assert "hicache: --storage: model:: moves no bytes" in capsys.readouterr().err

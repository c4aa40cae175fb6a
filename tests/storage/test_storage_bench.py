"""`hicache bench l3`: runs the harness and its peer on each backend, verifies the pages it read back,
reports throughput and ratios in JSON, and refuses bad options naming them (no timing asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hicache_ref.storage import mooncake_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--pages", "4", "--batch", "2", "--layers", "2", "--kv-dim", "64", "--page-size", "16", "--repeat", "1"]


def _bench(*args):
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "conformance.cli.main", "bench", "l3", *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)


def _check_rows(backend: dict, peer: bool) -> None:
    for layout in ("page_first_direct", "layer_first"):
        row = backend["layouts"][layout]
        assert row["verified"] is True
        assert row["bytes"] == 4 * 2 * 16 * 64 * 2  # pages x layers x tokens x kv_dim x bf16
        assert row["set_gbps"] > 0 and row["get_gbps"] > 0 and row["digest_gbps"] > 0
        # the breakdown of a round: the harness's steps and the Python between them
        for part in ("set_seal", "set_write", "set_python", "get_read", "get_verify", "get_python"):
            assert row[f"{part}_seconds"] >= 0
        assert row["set_seal_seconds"] > 0 and row["get_verify_seconds"] > 0  # every page digested and checked
        if peer:
            assert row["set_ratio"] > 0 and row["get_ratio"] > 0
        else:
            assert row["set_ratio"] is None and row["get_ratio"] is None


@pytest.mark.slow  # runs the command or pytest in a child process
def test_file_and_memory(tmp_path):
    r = _bench("--storage", f"file:{tmp_path / 'kv'}", "--storage", "memory:", "--json", *SMALL)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert doc["goal_ratio"] == 0.9 and doc["config"]["page_bytes"] == 2 * 16 * 64 * 2
    by_name = {b["name"]: b for b in doc["backends"].values()}
    _check_rows(by_name["file"], peer=True)
    _check_rows(by_name["memory"], peer=False)  # no peer for an in-process store: ratio not measured
    assert by_name["file"]["peer"].startswith("Plain files")
    assert [n for n in os.listdir(tmp_path / "kv") if not n.startswith(".")] == []  # its objects were removed


@pytest.mark.slow  # runs the command or pytest in a child process
def test_mooncake_auto():
    why = mooncake_cluster.unavailable_reason()
    if why:
        pytest.skip(f"mooncake: {why}")
    r = _bench("--storage", "mooncake:auto,segment=32MiB,buffer=4MiB", "--json", *SMALL)
    assert r.returncode == 0, r.stderr[-2000:]
    (backend,) = json.loads(r.stdout)["backends"].values()
    assert backend["name"] == "mooncake" and backend["peer"].startswith("The same Mooncake client")
    _check_rows(backend, peer=True)


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("args,needle", [
    (["--digest", "md5"], "hicache: --digest:"),
    (["--host-layout", "page_head"], "hicache: --host-layout:"),
    (["--storage", "nosuch:x"], "hicache: --storage:"),
    (["--pages", "0"], "--pages"),
    (["--storage", "mooncake:auto,segment=1KiB"], "hicache: --storage: mooncake:auto,segment=1KiB: segment=1024"),
])
def test_bad_options_name_the_option(args, needle):
    r = _bench(*args, *SMALL[:2])
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) <= 3


@pytest.mark.slow  # runs the command or pytest in a child process
def test_default_file_store_leaves_no_directory_behind(tmp_path):
    r = subprocess.run([sys.executable, "-m", "conformance.cli.main", "bench", "l3", "--json", *SMALL],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": ROOT, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    names = [b["name"] for b in json.loads(r.stdout)["backends"].values()]
    assert "file" in names
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("hicache-bench-l3-")] == []


def test_a_one_client_mooncake_gets_the_room_a_round_needs_and_a_smaller_one_is_refused():
    from conformance.bench.l3 import mooncake_room, sized_spec

    segment, buffer, least_segment, least_buffer = mooncake_room(1000, 32, 8)
    assert (segment, buffer) == (3 * 32 * 1000 + (64 << 20), 8 * 1000 + (8 << 20))  # with headroom
    assert (least_segment, least_buffer) == (16 << 20, 8 * 1000)  # the client's least segment; one batch
    assert mooncake_room(1 << 20, 32, 8)[2] == 2 * 32 * (1 << 20)  # the round's objects and the peer's
    assert sized_spec("mooncake:auto", 1000, 32, 8) == f"mooncake:auto,segment={segment},buffer={buffer}"
    assert sized_spec(f"mooncake:auto,buffer={least_buffer}", 1000, 32, 8) == \
        f"mooncake:auto,buffer={least_buffer},segment={segment}"
    assert sized_spec(f"mooncake:auto,segment={least_segment}", 1000, 32, 8).startswith(
        f"mooncake:auto,segment={least_segment},buffer=")
    with pytest.raises(ValueError, match=f"segment={least_segment - 1} cannot hold a round of 32 objects of 1000 "
                                         f"bytes and the peer's as many: give segment={segment} "
                                         f"\\(at least {least_segment}\\), or fewer --pages"):
        sized_spec(f"mooncake:auto,segment={least_segment - 1}", 1000, 32, 8)
    with pytest.raises(ValueError, match="buffer=1024 cannot hold a batch of 8 objects of 1000 bytes: .* or fewer --batch"):
        sized_spec("mooncake:auto,buffer=1KiB", 1000, 32, 8)
    for spec in ("mooncake:http://127.0.0.1:1/metadata,127.0.0.1:2", "file:/tmp/x"):  # a user's cluster: as given
        assert sized_spec(spec, 1000, 32, 8) == spec


def test_a_segment_this_machine_cannot_hold_is_refused_before_the_client_maps_it(monkeypatch):
    from conformance.bench.l3 import sized_spec

    monkeypatch.setenv("HICACHE_MEMORY_BUDGET", "1GiB")
    with pytest.raises(ValueError, match=r"^mooncake:auto,buffer=1TiB: needs ~1,024\.1 GiB \(the Mooncake client's segment and buffer\); "
                                         r"this machine has 1\.0 GiB to give"):
        sized_spec("mooncake:auto,buffer=1TiB", 1000, 32, 8)
    assert sized_spec("mooncake:auto,segment=512MiB", 1000, 32, 8).startswith("mooncake:auto,segment=512MiB,buffer=")

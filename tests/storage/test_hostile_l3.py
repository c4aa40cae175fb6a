"""The file L3 store owns only what it wrote (issue 41): a user's folder is refused, not swept by
age; a link planted as an object is never followed, read or touched; another user's file is never
evicted; a failed eviction keeps the store within its bound and says which file and why."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
import torch

from conformance.suites import transfer_reference as reference
from hal.transfer.layouts import KVGeometry
from hicache_ref.core.pools import HostPool
from hicache_ref.storage.file import MARKER, FileStorage

GEOM = KVGeometry("mla", 1, 1, 256, torch.float16, 4)  # 2,048 bytes a page


def pool(seed: int = 0) -> HostPool:
    p = HostPool(GEOM, 64, "page_first", materialize=True)
    rng = np.random.default_rng(seed)
    for buf in p.buffers:
        reference.fill_random(buf, rng)
    return p


def test_a_users_folder_is_refused_and_every_file_in_it_stays(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "old.kv").write_bytes(b"x" * 10_000)
    os.utime(tmp_path / "old.kv", (1, 1))  # the oldest file: an age sweep would take it first
    with pytest.raises(ValueError, match=r"notes\.txt.*no \.hicache-file-store marker"):
        FileStorage(str(tmp_path), max_bytes=4096)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "old.kv"]


def test_a_folder_of_objects_only_is_adopted_and_marked(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"y" * 100)  # as upstream HiCacheFile leaves its folder
    with FileStorage(str(tmp_path), max_bytes=1 << 20) as s:
        assert s.stored_bytes == 100
    assert (tmp_path / MARKER).is_file()


def test_a_link_planted_as_an_object_is_never_read_touched_or_counted(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret" * 1000)
    os.utime(outside, (1000, 1000))
    store_dir = tmp_path / "store"
    with FileStorage(str(store_dir), max_bytes=1 << 20) as s:
        p = pool()
        assert s.set(["k0"], p, [0]) == [True]
        os.symlink(outside, store_dir / "k1.kv")
        s._rescan()
        assert s.stored_bytes == os.path.getsize(store_dir / "k0.kv")  # the link is not an object
        assert s.exists(["k1"]) == 0
        assert s.get(["k1"], p, [1]) == [False]
    assert os.stat(outside).st_mtime == 1000 and outside.read_bytes() == b"secret" * 1000


def test_another_users_object_is_neither_counted_nor_evicted(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    with FileStorage(str(tmp_path), max_bytes=3 * 2200) as s:
        p = pool()
        assert s.set(["theirs"], p, [0]) == [True]
        os.chown(tmp_path / "theirs.kv", 65534, 65534)
        os.utime(tmp_path / "theirs.kv", (1, 1))
        s._rescan()
        assert s.stored_bytes == 0
        assert all(s.set([f"k{i}"], p, [i]) == [True] for i in range(1, 8))
    assert (tmp_path / "theirs.kv").exists()


def test_a_failed_eviction_keeps_the_bound_and_names_the_file(tmp_path, monkeypatch):
    with FileStorage(str(tmp_path), max_bytes=3 * 2200) as s:
        p = pool()
        assert s.set(["k0", "k1", "k2"], p, [0, 1, 2]) == [True] * 3
        real_unlink = os.unlink

        def unlink(path, *a, **kw):
            if str(path).endswith("k0.kv"):
                raise PermissionError(13, "Permission denied")
            return real_unlink(path, *a, **kw)

        monkeypatch.setattr(os, "unlink", unlink)
        for i in range(3, 8):
            s.set([f"k{i}"], p, [i])
        on_disk = sum(e.stat().st_size for e in os.scandir(tmp_path) if e.name.endswith(".kv"))
        assert on_disk <= s.max_bytes and s.stored_bytes <= s.max_bytes
        assert "k0.kv: cannot be evicted (Permission denied)" in s.last_error


def test_a_failed_write_is_named(tmp_path, monkeypatch):
    with FileStorage(str(tmp_path), max_bytes=1 << 20) as s:
        def writev(fd, views):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(os, "writev", writev)
        assert s.set(["k0"], pool(), [0]) == [False]
        assert s.stats.errors == 1 and "k0.kv: cannot be written (Permission denied)" in s.last_error


def test_a_store_folder_that_is_a_link_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match="symbolic link"):
        FileStorage(str(tmp_path / "link"), max_bytes=1 << 20)
    assert list((tmp_path / "real").iterdir()) == []


def test_reads_touch_the_mtime_of_the_stores_own_objects_only(tmp_path):
    with FileStorage(str(tmp_path), max_bytes=1 << 20) as s:
        p = pool()
        s.set(["k0"], p, [0])
        os.utime(tmp_path / "k0.kv", (5, 5))
        assert s.get(["k0"], p, [1]) == [True]
        assert os.stat(tmp_path / "k0.kv").st_mtime > time.time() - 60  # recency for the LRU


def test_calibrate_storage_on_a_small_store_is_bad_input_and_leaves_no_object(tmp_path, capsys):
    from conformance.cli.main import main

    where = tmp_path / "l3"
    assert main(["calibrate", "--storage", f"file:{where},max_bytes=8MiB", "--repeat", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hicache: --storage: file: max_bytes") and "internal" not in err[0]
    assert [n for n in os.listdir(where) if n != MARKER] == []


def test_calibrate_measure_removes_its_objects_when_a_get_misses(tmp_path, monkeypatch):
    from conformance.calibrate import l3_link

    with FileStorage(str(tmp_path), max_bytes=1 << 30) as s:
        monkeypatch.setattr(s, "_read", lambda items: [-1] * len(items))
        with pytest.raises(ValueError, match="a get of 1 objects missed"):
            l3_link.measure(s, sizes=(4096,), batches=(1,), repeat=1)
    assert [n for n in os.listdir(tmp_path) if n != MARKER] == []


@pytest.mark.slow
def test_a_replays_l3_line_names_the_stores_first_error(tmp_path, monkeypatch, capsys):
    from conformance.cli.main import main

    def writev(fd, views):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "writev", writev)
    where = tmp_path / "l3"
    assert main(["replay", "--limit", "30", "--l1-tokens", "8k", "--l2-tokens", "16k", "--materialize",
                 "--l3", f"file:{where},max_bytes=64MiB", "--json"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert fig["l3_store_errors"] >= 1 and f"{where}/" in fig["l3_store_last_error"]
    assert "cannot be written (Permission denied)" in fig["l3_store_last_error"]
    from hicache_ref.sim.run.serial_replay import _l3_lines

    assert "first store error: " in _l3_lines(fig)[0]

"""The file L3 store is always bounded: without max_bytes its bound is half of its filesystem's room
at open (statvfs free space + the objects already there), an explicit max_bytes the filesystem
cannot hold is refused before anything is created, and the LRU evicts under the default bound.

The worked cases run on a tmpfs of our own (nobody else writes to it, so its free space is exact):
tmpfs counts whole 4096-byte pages, so an object of 8,240 bytes uses 3 pages = 12,288 bytes."""

from __future__ import annotations

import contextlib
import io
import os

import numpy as np
import pytest
import torch

from conformance.cli.main import main as cli_main
from conformance.suites import transfer_reference as reference
from conformance.suites.storage.page_pools import page_bits, poisoned_pool
from hal.transfer.layouts import KVGeometry
from hicache_ref.core.pools import HostPool
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.spec import CacheSpec
from hicache_ref.storage.file import MARKER, FileStorage
from hicache_ref.storage.registry import open_storage
from tests.mounts import mounted_tmpfs


def store_listing(directory) -> list[str]:
    """The directory's entries but the store's marker file."""
    return [n for n in os.listdir(directory) if n != MARKER]


# one layer x one head x 1024 dims fp16, pages of 4 tokens: 4 * 1024 * 2 = 8,192 bytes a page,
# 8,240 bytes an object with its 48-byte trailer (3 tmpfs pages)
BIG = KVGeometry("mla", 1, 1, 1024, torch.float16, 4)
OBJ = 8192 + 48
TMPFS = 256 * 1024  # size=256k: 262,144 bytes free when empty


@pytest.fixture
def tmpfs(tmp_path):
    """A real 256 KiB tmpfs mounted for this test (root only; skipped with the reason elsewhere)."""
    with mounted_tmpfs(tmp_path / "fs", "size=256k,mode=0700") as path:
        yield path


def _pool(seed: int) -> HostPool:
    pool = HostPool(BIG, 64, "page_first", materialize=True)  # 16 pages
    rng = np.random.default_rng(seed)
    for buf in pool.buffers:
        reference.fill_random(buf, rng)
    return pool


def test_default_bound_is_half_the_tmpfs_free_space(tmpfs):
    st = os.statvfs(tmpfs)
    assert st.f_bavail * st.f_frsize == TMPFS  # what the bound is computed from
    with FileStorage(str(tmpfs)) as s:
        assert s.max_bytes == TMPFS // 2 == 131_072 and s.max_bytes_default
        assert s.set(["a", "b", "c"], _pool(1), [0, 1, 2]) == [True, True, True]
    # reopened: 3 objects use 3 * 12,288 bytes of the tmpfs (the marker one 4,096 block) but count
    # their 3 * 8,240 bytes, so the room is 262,144 - 36,864 - 4,096 + 24,720 = 245,904 and the bound
    # 122,952 (not half the free 221,184)
    st = os.statvfs(tmpfs)
    assert st.f_bavail * st.f_frsize == TMPFS - 3 * 12_288 - 4096
    with FileStorage(str(tmpfs)) as s:
        assert s.stored_bytes == 3 * OBJ and s.max_bytes == 122_952


def test_default_bound_on_a_real_directory_follows_its_statvfs(tmp_path):
    # the root filesystem is shared: its free space may move while the store opens, so bracket it
    def free():
        st = os.statvfs(tmp_path)
        return st.f_bavail * st.f_frsize

    before = free()
    s = open_storage(f"file:{tmp_path / 'kv'}")
    after = free()
    assert s.max_bytes_default and min(before, after) // 2 <= s.max_bytes <= max(before, after) // 2
    assert FileStorage.filesystem_free_bytes(str(tmp_path / "not" / "there")) > 0  # nearest existing parent
    s.close()


def test_given_max_bytes_is_the_bound(tmpfs):
    with FileStorage(str(tmpfs), max_bytes=TMPFS) as s:  # exactly the room: accepted
        assert s.max_bytes == TMPFS and not s.max_bytes_default


def test_max_bytes_the_filesystem_cannot_hold_is_refused_and_nothing_created(tmpfs):
    target = tmpfs / "store"
    spec = f"file:{target},max_bytes=300K"  # 300,000 > 262,144
    with pytest.raises(ValueError) as e:
        open_storage(spec)
    assert str(e.value) == (f"storage spec {spec!r}: max_bytes: 300000 bytes is more than the filesystem of "
                            f"{target} can hold (262144 bytes free + 0 bytes of objects already there)")
    assert not target.exists() and store_listing(tmpfs) == []
    # the CLI says the same on one line naming the option, exit 2
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli_main(["replay", "--page-size", "256", "--attention", "mla", "--layers", "1", "--kv-dim", "4",
                       "--materialize", "--l2-tokens", "280K", "--limit", "1", "--l3", spec])
    lines = err.getvalue().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("hicache: --l3: ") and "max_bytes: 300000" in lines[0]
    assert not target.exists()


def test_lru_evicts_under_the_default_bound(tmpfs):
    # bound 131,072: 15 objects (123,600 bytes) fit, a 16th (131,840) evicts the least recently used
    pool = _pool(2)
    with FileStorage(str(tmpfs)) as s:
        keys = [f"k{i}" for i in range(15)]
        assert s.set(keys, pool, list(range(15))) == [True] * 15
        assert sorted(store_listing(tmpfs)) == sorted(k + ".kv" for k in keys)
        dst = poisoned_pool(BIG, "page_first")
        assert s.get(["k0"], dst, [0]) == [True]  # k0 is now the most recent
        assert s.set(["k15"], pool, [15]) == [True]
        assert sorted(store_listing(tmpfs)) == sorted(k + ".kv" for k in keys[:1] + keys[2:] + ["k15"])
        assert s.stored_bytes == 15 * OBJ <= s.max_bytes
        assert s.get(["k15"], dst, [1]) == [True] and torch.equal(page_bits(dst, 1), page_bits(pool, 15))


def test_replay_reports_the_bound(tmpfs, synthetic):
    spec = CacheSpec.of(page_size=256, attention="mla", layers=1, kv_dim=4, dtype="bf16", materialize=True,
                     l1_tokens=140_000, l2_tokens=280_000, l3=f"file:{tmpfs}")
    assert replay(spec, synthetic, 3)["l3_max_bytes"] == TMPFS // 2  # the store was empty at open


def _obj_files(directory, names, size=240):
    for name in names:
        with open(os.path.join(directory, name + ".kv"), "wb") as f:
            f.write(b"\0" * size)


def _writer(store, pool):
    """write_up_to(n): store's own objects a0, a1, ... up to n of them, four pages a set."""
    written = [0]

    def write_up_to(n):
        while written[0] < n:
            store.set([f"a{written[0] + j}" for j in range(4)], pool, [0, 1, 2, 3])
            written[0] += 4
    return write_up_to


def test_other_clients_objects_are_counted_once_a_sixteenth_of_the_bound_is_written(tmp_path):
    # A rescan stats every object; it comes once this client has written 1/16 of the bound since
    # the last one, however many objects there are: here 256 objects, where a count-based cadence
    # (every 64 writes below 1,024 objects) rescanned a store far below its bound four times as often.
    from conformance.suites.storage.page_pools import MLA, random_pool

    obj = 192 + 48  # the small MLA page with its trailer
    a = FileStorage(str(tmp_path), max_bytes=16 * 256 * obj)  # scanned at open: empty
    assert a.rescan_bytes == 256 * obj
    write_up_to = _writer(a, random_pool(MLA, "page_first", 3))
    _obj_files(tmp_path, ["other"])  # another client's object
    write_up_to(252)
    assert a.stored_bytes == 252 * obj  # not seen yet
    write_up_to(256)
    assert a.stored_bytes == (256 + 1) * obj  # 256 objects written since the open: rescanned
    _obj_files(tmp_path, [f"x{i}" for i in range(100)])
    write_up_to(508)
    assert a.stored_bytes == (508 + 1) * obj
    write_up_to(512)
    assert a.stored_bytes == (512 + 1 + 100) * obj


def test_a_rescan_over_the_bound_evicts_other_clients_older_objects(tmp_path):
    from conformance.suites.storage.page_pools import MLA, random_pool

    obj = 192 + 48
    a = FileStorage(str(tmp_path), max_bytes=16 * 16 * obj)  # 256 objects; a rescan every 16 written
    write_up_to = _writer(a, random_pool(MLA, "page_first", 3))
    write_up_to(16)
    theirs = [f"y{i}" for i in range(300)]  # other clients fill the directory past the bound
    _obj_files(tmp_path, theirs)
    for name in theirs:  # ...with objects used before any of ours
        os.utime(tmp_path / (name + ".kv"), ns=(10**9, 10**9))
    write_up_to(28)
    assert a.stored_bytes == 28 * obj  # not seen yet
    write_up_to(32)
    left = set(store_listing(tmp_path))
    assert a.stored_bytes == a.max_bytes == 256 * obj and len(left) == 256
    assert {f"a{i}.kv" for i in range(32)} <= left  # the least recently used went: theirs

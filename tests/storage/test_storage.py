"""L3 storage contract through the file and memory backends: bit-identical round trips across host
layouts, exists' leading run, integrity, the file backend's LRU bound, atomic writes and bad specs."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import struct
import threading

import pytest
import torch
import xxhash

from conformance.suites import transfer_reference as reference
from conformance.suites.storage.page_pools import MHA, MLA, PAGE_BYTES, page_bits, poisoned_pool, random_pool
from hicache_ref.core.hashing import page_hashes
from hicache_ref.storage import pages
from hicache_ref.storage.client_stats import StorageStats
from hicache_ref.storage.file import MARKER, FileStorage, file_name
from hicache_ref.storage.keys import StorageIdentity
from hicache_ref.storage.memory import MemoryStorage
from hicache_ref.storage.registry import open_storage, register, storage_class


def store_listing(directory) -> list[str]:
    """The directory's entries but the store's marker file."""
    return [n for n in os.listdir(directory) if n != MARKER]

GEOMS = {"mha": MHA, "mla": MLA}
LAYOUTS = [(a, s, d) for a in ("mha", "mla") for s in reference.layouts_for(a) for d in reference.layouts_for(a)]


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    s = open_storage(f"file:{tmp_path / 'l3'}" if request.param == "file" else "memory:max_bytes=1M")
    yield s
    s.close()


def test_page_bytes_worked_by_hand():
    assert pages.page_bytes(MHA) == 2 * 3 * 4 * (2 * 4 * 2) == PAGE_BYTES["mha"] == 384
    assert pages.page_bytes(MLA) == 1 * 3 * 4 * (8 * 2) == PAGE_BYTES["mla"] == 192


@pytest.mark.parametrize("attention,src_layout,dst_layout", LAYOUTS)
def test_round_trip_is_bit_identical_across_layouts(tmp_path, attention, src_layout, dst_layout):
    geom = GEOMS[attention]
    src = random_pool(geom, src_layout, seed=1)
    dst = poisoned_pool(geom, dst_layout)
    with FileStorage(str(tmp_path)) as s:
        assert s.set(["a", "b"], src, [1, 3]) == [True, True]
        assert s.get(["b", "a"], dst, [0, 2]) == [True, True]
    assert torch.equal(page_bits(dst, 0), page_bits(src, 3))
    assert torch.equal(page_bits(dst, 2), page_bits(src, 1))
    # pages not read keep the poison: nothing outside the asked pages was written
    assert bool((page_bits(dst, 1).view(torch.uint8) == reference.POISON_BYTE).all())
    assert bool((page_bits(dst, 3).view(torch.uint8) == reference.POISON_BYTE).all())


@pytest.mark.parametrize("digest", ["xxh3", "sha256"])
@pytest.mark.parametrize("attention", ["mha", "mla"])
@pytest.mark.parametrize("layout_index", [0, 1, 2])
def test_object_holds_the_page_in_canonical_order_then_the_trailer(tmp_path, attention, layout_index, digest):
    geom = GEOMS[attention]
    pool = random_pool(geom, reference.layouts_for(attention)[layout_index], seed=2)
    with open_storage(f"file:{tmp_path},digest={digest}") as s:
        s.set(["k"], pool, [2])
    blob = (tmp_path / "k.kv").read_bytes()
    payload = page_bits(pool, 2).contiguous().view(torch.uint8).numpy().tobytes()  # (part, layer, token, ...)
    assert len(blob) == PAGE_BYTES[attention] + 48
    assert blob[:-48] == payload
    magic, ident, length, want = struct.unpack("<4s4sQ32s", blob[-48:])
    assert (magic, length) == (b"HCKV", PAGE_BYTES[attention])
    if digest == "sha256":
        assert ident == b"s256" and want == hashlib.sha256(b"k\0" + payload).digest()
    else:
        assert ident == b"xx3\0" and want == xxhash.xxh3_128(b"k\0" + payload).digest() + bytes(16)


def test_clients_with_different_digests_read_each_other(tmp_path):
    src, dst = random_pool(MLA, "page_first", 20), poisoned_pool(MLA, "page_first")
    open_storage(f"file:{tmp_path},digest=sha256").set(["a"], src, [0])
    reader = open_storage(f"file:{tmp_path}")
    assert reader.digest == "xxh3" and reader.get(["a"], dst, [3]) == [True]
    assert torch.equal(page_bits(dst, 3), page_bits(src, 0))


def test_exists_is_the_leading_run(store):
    pool = random_pool(MLA, "layer_first", seed=3)
    assert store.set(["a", "b", "d"], pool, [0, 1, 2]) == [True, True, True]
    assert store.exists(["a", "b", "c", "d"]) == 2  # d is present but after the hole
    assert store.exists(["c", "a"]) == 0
    assert store.exists(["a", "b", "d"]) == 3
    assert store.exists([]) == 0


def test_missing_object_is_a_miss(store):
    pool = poisoned_pool(MLA, "page_first")
    assert store.get(["nothing"], pool, [0]) == [False]
    assert store.stats.misses == 1 and store.stats.objects_read == 0 and store.stats.corrupt == 0


def test_stats_count_objects_and_payload_bytes(store):
    src, dst = random_pool(MHA, "page_head", 4), poisoned_pool(MHA, "page_head")
    store.set(["a", "b"], src, [0, 1])
    store.get(["a", "b", "c"], dst, [0, 1, 2])
    st = store.stats.as_dict()
    assert st == {"objects_read": 2, "bytes_read": 768, "objects_written": 2, "bytes_written": 768,
                  "misses": 1, "corrupt": 0, "errors": 0, "unverified": 0, "full": 0}


def _corrupt(path, how):
    blob = bytearray(path.read_bytes())
    if how == "flip":
        blob[5] ^= 0x01
    elif how == "flip_trailer":
        blob[-1] ^= 0x80
    elif how == "truncate":
        blob = blob[:-1]
    elif how == "extend":
        blob += b"\0"
    elif how == "empty":
        blob = b""
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize("how", ["flip", "flip_trailer", "truncate", "extend", "empty"])
@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct"])
def test_corrupt_or_truncated_object_is_never_returned(tmp_path, how, layout):
    src = random_pool(MHA, "page_first", seed=5)
    dst = poisoned_pool(MHA, layout)
    with FileStorage(str(tmp_path)) as s:
        s.set(["good", "bad"], src, [0, 1])
        _corrupt(tmp_path / "bad.kv", how)
        assert s.get(["good", "bad"], dst, [0, 1]) == [True, False]
        assert s.stats.corrupt == 1 and s.stats.objects_read == 1 and s.stats.misses == 0
        # the corrupt object was discarded: a later lookup misses and a new set repairs it
        assert s.exists(["bad"]) == 0
        assert s.set(["bad"], src, [1]) == [True] and s.get(["bad"], dst, [1]) == [True]
    assert torch.equal(page_bits(dst, 0), page_bits(src, 0))
    assert torch.equal(page_bits(dst, 1), page_bits(src, 1))


@pytest.mark.parametrize("layout", ["page_first", "page_head"])
def test_corrupt_page_leaves_a_staged_slot_untouched(tmp_path, layout):
    src, dst = random_pool(MHA, "layer_first", 5), poisoned_pool(MHA, layout)
    with FileStorage(str(tmp_path)) as s:
        s.set(["bad"], src, [1])
        _corrupt(tmp_path / "bad.kv", "flip")
        assert s.get(["bad"], dst, [1]) == [False]
    # page_first and page_head are staged (a run per token and layer): only verified pages are
    # scattered, so the slot keeps its poison
    assert bool((page_bits(dst, 1).view(torch.uint8) == reference.POISON_BYTE).all())


@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct"])
def test_corrupt_page_read_in_place_touches_only_its_slot(tmp_path, layout):
    # runs of the pool are read in place: the failed page's slot holds what was read (reported
    # False, so never used as KV); the pages around it are untouched and the good ones exact
    src, dst = random_pool(MHA, "page_first", 5), poisoned_pool(MHA, layout)
    with FileStorage(str(tmp_path)) as s:
        s.set(["a", "bad", "c"], src, [0, 1, 2])
        _corrupt(tmp_path / "bad.kv", "flip")
        assert s.get(["a", "bad", "c"], dst, [0, 2, 3]) == [True, False, True]
        assert s.stats.corrupt == 1 and s.stats.objects_read == 2
    assert torch.equal(page_bits(dst, 0), page_bits(src, 0)) and torch.equal(page_bits(dst, 3), page_bits(src, 2))
    assert bool((page_bits(dst, 1).view(torch.uint8) == reference.POISON_BYTE).all())


def test_object_under_another_key_is_corrupt(tmp_path):
    src, dst = random_pool(MLA, "page_first", 6), poisoned_pool(MLA, "page_first")
    with FileStorage(str(tmp_path)) as s:
        s.set(["a"], src, [0])
        shutil.copyfile(tmp_path / "a.kv", tmp_path / "b.kv")  # right bytes, wrong name (a copy: a second link is not the store's)
        assert s.get(["b"], dst, [0]) == [False]
        assert s.stats.corrupt == 1


def test_lru_bound_evicts_least_recently_used(tmp_path):
    obj = PAGE_BYTES["mla"] + 48  # 240 bytes on disk per object
    pool = random_pool(MLA, "page_first_direct", 7)
    s = FileStorage(str(tmp_path), max_bytes=3 * obj)
    s.set(["k0", "k1", "k2"], pool, [0, 1, 2])
    assert s.get(["k0"], poisoned_pool(MLA, "page_first_direct"), [0]) == [True]  # k0 now most recent
    s.set(["k3"], pool, [3])  # 4 objects > 3: the least recently used, k1, goes
    assert sorted(store_listing(tmp_path)) == ["k0.kv", "k2.kv", "k3.kv"]
    assert s.stored_bytes == 3 * obj
    s.set(["k4"], pool, [0])
    assert sorted(store_listing(tmp_path)) == ["k0.kv", "k3.kv", "k4.kv"]
    # a new client of the same directory sees the same bound
    t = FileStorage(str(tmp_path), max_bytes=3 * obj)
    assert t.stored_bytes == 3 * obj and t.exists(["k0", "k3", "k4"]) == 3


def test_object_larger_than_the_bound_is_refused_not_stored(tmp_path):
    s = FileStorage(str(tmp_path), max_bytes=100)
    assert s.set(["big"], random_pool(MLA, "layer_first", 8), [0]) == [False]
    assert store_listing(tmp_path) == [] and s.stats.objects_written == 0


def test_files_are_private(tmp_path):
    d = tmp_path / "new"
    with FileStorage(str(d)) as s:
        s.set(["k", "x/y:z"], random_pool(MLA, "page_first", 9), [0, 1])
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    names = sorted(store_listing(d))
    assert names == sorted(["k.kv", file_name("x/y:z")]) and file_name("x/y:z").startswith("h-")
    for n in names:
        assert stat.S_IMODE(os.stat(d / n).st_mode) == 0o600


def test_atomic_overwrite_never_shows_a_partial_object(tmp_path):
    geom = MHA
    a, b = random_pool(geom, "page_first_direct", 10), random_pool(geom, "page_first_direct", 11)
    want = {page_bits(a, 0).numpy().tobytes(), page_bits(b, 0).numpy().tobytes()}
    writer, reader = FileStorage(str(tmp_path)), FileStorage(str(tmp_path))
    writer.set(["k"], a, [0])
    stop = threading.Event()

    def write():
        i = 0
        while not stop.is_set():
            writer.set(["k"], (a, b)[i % 2], [0])
            i += 1

    th = threading.Thread(target=write)
    th.start()
    seen = set()
    try:
        for _ in range(300):
            dst = poisoned_pool(geom, "layer_first")
            assert reader.get(["k"], dst, [1]) == [True]
            seen.add(page_bits(dst, 1).numpy().tobytes())
    finally:
        stop.set()
        th.join()
    assert seen <= want and reader.stats.corrupt == 0
    assert [n for n in store_listing(tmp_path) if n.startswith(".tmp-")] == []


def test_an_object_replaced_between_open_and_read_is_still_read_whole(tmp_path, monkeypatch):
    """A writer's rename after a reader's open leaves the open file with no name (nlink 0): the
    reader still has one whole object, the one it opened, and takes it."""
    geom = MHA
    a, b = random_pool(geom, "page_first_direct", 10), random_pool(geom, "page_first_direct", 11)
    writer, reader = FileStorage(str(tmp_path)), FileStorage(str(tmp_path))
    writer.set(["k"], a, [0])
    real_fstat, replaced = os.fstat, []

    def fstat_after_a_replace(fd):
        if not replaced:
            replaced.append(True)
            writer.set(["k"], b, [0])
        return real_fstat(fd)

    monkeypatch.setattr("hicache_ref.storage.file.os.fstat", fstat_after_a_replace)
    dst = poisoned_pool(geom, "layer_first")
    assert reader.get(["k"], dst, [1]) == [True] and replaced
    assert page_bits(dst, 1).numpy().tobytes() == page_bits(a, 0).numpy().tobytes()


def test_memory_backend_is_bounded_lru():
    obj = PAGE_BYTES["mla"] + 48
    s = MemoryStorage(max_bytes=2 * obj)
    pool = random_pool(MLA, "layer_first", 12)
    s.set(["a", "b"], pool, [0, 1])
    s.exists(["a"])
    assert s.get(["a"], poisoned_pool(MLA, "layer_first"), [0]) == [True]
    s.set(["c"], pool, [2])
    assert s.exists(["b"]) == 0 and s.exists(["a", "c"]) == 2 and s.stored_bytes == 2 * obj


def test_keys_from_the_hash_chain_name_the_geometry():
    ident = StorageIdentity(MLA)
    tokens = list(range(8))
    first = hashlib.sha256(struct.pack("<4I", 0, 1, 2, 3)).digest()
    second = hashlib.sha256(first + struct.pack("<4I", 4, 5, 6, 7)).digest()
    assert ident.keys(page_hashes(tokens, 4)) == [f"mla3x1x8-fp16-p4_{first.hex()}", f"mla3x1x8-fp16-p4_{second.hex()}"]
    assert StorageIdentity(MHA).key(first) == f"mha3x2x4-bf16-p4_{first.hex()}"
    assert StorageIdentity(MLA, model="m", shard="tp1").tag == \
        f"mla3x1x8-fp16-p4-m{hashlib.sha256(b'm').hexdigest()[:8]}-tp1"
    with pytest.raises(ValueError, match="^page_hash:"):
        ident.key(b"short")
    with pytest.raises(ValueError, match="^shard:"):
        StorageIdentity(MLA, shard="a/b")


@pytest.mark.parametrize("spec,needle", [
    ("", "storage spec"),
    ("file", "expected NAME:ARGS"),
    ("nosuch:x", "unknown backend 'nosuch'"),
    ("file:", "DIR"),
    ("file:/tmp/x,max_bytes=lots", "max_bytes"),
    ("file:/tmp/x,max_bytes=0", "max_bytes"),
    ("file:/tmp/x,color=red", "'color=red'"),
    ("file:/tmp/x,max_bytes=1K,max_bytes=2K", "given twice"),
    ("memory:max_bytes=-1", "max_bytes"),
    ("memory:digest=md5", "digest: 'md5' is not one of xxh3, sha256"),
    ("file:/etc/hostname", "not a directory"),
])
def test_bad_spec_is_one_line_naming_the_part(spec, needle):
    with pytest.raises(ValueError) as e:
        open_storage(spec)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


def test_bad_calls_are_refused_before_anything_is_written(tmp_path):
    s = FileStorage(str(tmp_path))
    pool = random_pool(MLA, "page_first", 13)
    with pytest.raises(ValueError, match=r"^host_pages\[1\]"):
        s.set(["a", "b"], pool, [0, 4])  # 4 pages: 0..3
    with pytest.raises(ValueError, match="^host_pages: 1 pages for 2 keys"):
        s.set(["a", "b"], pool, [0])
    with pytest.raises(ValueError, match="^host_pages: a page appears twice"):
        s.get(["a", "b"], pool, [1, 1])
    with pytest.raises(ValueError, match=r"^keys\[0\]"):
        s.set([""], pool, [0])
    with pytest.raises(ValueError, match="^keys:"):
        s.exists("abc")
    with pytest.raises(ValueError, match="^host_pool:"):
        s.set(["a"], object(), [0])
    assert store_listing(tmp_path) == [] and s.stats == StorageStats()
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.exists(["a"])


def test_backend_failure_is_counted_not_raised(tmp_path):
    s = FileStorage(str(tmp_path / "d"))
    pool = random_pool(MLA, "page_first", 14)
    os.chmod(tmp_path / "d", 0o500)  # root ignores this, so break the directory for real
    os.rename(tmp_path / "d", tmp_path / "gone")
    assert s.set(["a"], pool, [0]) == [False]
    assert s.stats.errors == 1 and s.stats.objects_written == 0
    assert s.get(["a"], pool, [0]) == [False] and s.stats.misses == 1


def test_exists_clamps_a_backends_count_to_the_keys_asked():
    class Miscounting(MemoryStorage):  # an out-of-tree backend that gets its count wrong
        name = "miscounting"
        answer = 0

        def _exists(self, keys):
            return self.answer

    s = Miscounting()
    s.answer = 7
    assert s.exists(["a", "b", "c"]) == 3  # never more than asked: the caller would load pages nobody has
    s.answer = -2
    assert s.exists(["a", "b"]) == 0


def test_a_trailer_naming_another_payload_length_is_corrupt():
    from hicache_ref.storage import integrity

    payload = [torch.arange(64, dtype=torch.uint8), torch.arange(64, 128, dtype=torch.uint8)]
    tail = integrity.trailer(integrity.DEFAULT_DIGEST, "k", payload)
    assert integrity.verified("k", payload, tail, 128 + integrity.TRAILER_BYTES, 128)
    magic, ident, length, want = integrity.TRAILER.unpack(tail)
    for wrong in (length - 1, length + 1, 0):  # the digest still matches: only the length field lies
        lying = integrity.TRAILER.pack(magic, ident, wrong, want)
        assert not integrity.verified("k", payload, lying, 128 + integrity.TRAILER_BYTES, 128)
    assert not integrity.verified("k", payload, tail[:-1], 128 + integrity.TRAILER_BYTES, 128)


def test_out_of_tree_backend_registers_by_name():
    class Null(MemoryStorage):
        name = "nulltest"

    register("nulltest", Null)
    assert storage_class("nulltest") is Null
    assert isinstance(open_storage("nulltest:max_bytes=1K"), Null)


def test_each_built_in_store_is_the_class_its_file_names():
    for name in ("file", "memory", "model", "mooncake"):
        assert storage_class(name).name == name

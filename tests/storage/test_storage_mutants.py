"""The storage client's batch machinery (hicache_ref.storage.base, harness_io) through a memory backend that
records what it is handed: batches cut in chunks (the digest of one overlapping the I/O of the
next), backend failures, misses and corrupt objects counted per object, upstream's objects,
staging drawn from (and given back to) the client's pool, and the worker stopped on close."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from conformance.suites import transfer_reference as reference
from conformance.suites.storage.page_pools import MHA, MLA, PAGE_BYTES, page_bits
from hicache_ref.core.pools import HostPool
from hicache_ref.l3.write_snapshot import StagedPages
from hicache_ref.storage import integrity, objects
from hicache_ref.storage.memory import MemoryStorage
from hicache_ref.storage.objects import ObjectFormat
from hicache_ref.storage.staging_buffers import StagingPool

PAGES = 12  # pages per test pool: enough for three chunks and every outcome in one batch


def pool(geom, layout, seed=None):
    """A host pool of PAGES pages: random bytes, or the poison where `seed` is None."""
    p = HostPool(geom, PAGES * geom.page_size, layout, materialize=True)
    for buf in p.buffers:
        reference.fill_random(buf, np.random.default_rng(seed)) if seed is not None else reference.poison(buf)
    return p


def same_page(a, i, b, j) -> bool:
    return torch.equal(page_bits(a, i), page_bits(b, j))


class Recording(MemoryStorage):
    """A memory store that keeps the keys of every backend call and checks the hook contract
    (objects are 2-D uint8 arrays); staging buffers it is handed new are counted (where a real
    backend registers them with its transfer engine)."""

    name = "recording"

    def __init__(self, set_chunk: int, get_chunk: int, **kw):
        super().__init__(**kw)
        self.set_chunk_bytes, self.get_chunk_bytes = set_chunk, get_chunk
        self.writes, self.reads, self.new_staging = [], [], []
        self.staging = StagingPool(on_new=self.new_staging.append)

    def _write(self, items):
        for key, segs in items:
            assert all(s.dtype == np.uint8 and s.ndim == 2 for s in segs), key
        self.writes.append([key for key, _ in items])
        return super()._write(items)

    def _read(self, items):
        self.reads.append([key for key, _ in items])
        return super()._read(items)


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
def test_a_batch_goes_to_the_backend_in_chunks_of_its_set_and_get_sizes(layout):
    pb = PAGE_BYTES["mha"]
    src, dst = pool(MHA, layout, seed=1), pool(MHA, layout)
    keys = [f"k{i}" for i in range(7)]
    s = Recording(set_chunk=2 * pb, get_chunk=3 * pb)
    assert s.set(keys, src, range(7)) == [True] * 7
    assert s.writes == [keys[0:2], keys[2:4], keys[4:6], keys[6:7]]
    order = [6, 0, 5, 1, 4, 2, 3]  # read into other slots: a chunk mixed up shows in the bytes
    assert s.get(keys, dst, order) == [True] * 7
    assert s.reads == [keys[0:3], keys[3:6], keys[6:7]]
    assert all(same_page(dst, order[i], src, i) for i in range(7))
    assert s.stats.objects_written == 7 and s.stats.objects_read == 7 and s.stats.bytes_read == 7 * pb
    s.close()


def test_a_chunk_size_of_zero_sends_the_batch_whole():
    src = pool(MLA, "page_first", seed=2)
    s = Recording(set_chunk=0, get_chunk=0)
    s.set(["a", "b", "c"], src, [0, 1, 2])
    s.get(["a", "b", "c"], pool(MLA, "page_first"), [0, 1, 2])
    assert s.writes == [["a", "b", "c"]] and s.reads == [["a", "b", "c"]]


def test_pages_that_are_runs_of_the_pool_move_without_staging_others_reuse_it():
    """layer_first pages are runs of the pool: set and get move them with no staging copy. A
    page_first page is gathered into staging, drawn from the client's pool (a backend registers
    its buffers as they are made) and reused by the next call."""
    pb = PAGE_BYTES["mha"]
    direct = Recording(set_chunk=pb, get_chunk=pb)
    src = pool(MHA, "layer_first", seed=3)
    assert direct.set(["a", "b"], src, [0, 1]) == [True, True]
    assert direct.get(["a", "b"], pool(MHA, "layer_first"), [0, 1]) == [True, True]
    assert direct.new_staging == []
    staged = Recording(set_chunk=pb, get_chunk=pb)
    src = pool(MHA, "page_first", seed=3)
    assert staged.set(["a", "b"], src, [0, 1]) == [True, True]
    made = len(staged.new_staging)
    assert made > 0
    assert staged.set(["c", "d"], src, [2, 3]) == [True, True] and len(staged.new_staging) == made


def test_every_outcome_of_one_get_is_counted_once_in_its_place():
    class Flaky(Recording):  # objects "x*" fail in the backend (None); "c*" are stored corrupt
        def _read_into(self, key, targets):
            return None if key.startswith("x") else super()._read_into(key, targets)

    src, dst = pool(MLA, "page_first", seed=4), pool(MLA, "page_first")
    s = Flaky(set_chunk=0, get_chunk=0)
    s.set(["a", "b", "d", "x1", "x2"], src, [0, 1, 2, 3, 4])
    for key in ("c1", "c2"):
        s._write_one(key, [np.zeros((1, PAGE_BYTES["mla"] + integrity.TRAILER_BYTES), dtype=np.uint8)])
    keys = ["a", "x1", "m1", "c1", "b", "x2", "m2", "c2", "d"]
    assert s.get(keys, dst, range(9)) == [True, False, False, False, True, False, False, False, True]
    st = s.stats
    assert (st.objects_read, st.errors, st.misses, st.corrupt) == (3, 2, 2, 2)
    assert st.bytes_read == 3 * PAGE_BYTES["mla"]
    assert same_page(dst, 0, src, 0) and same_page(dst, 4, src, 1) and same_page(dst, 8, src, 2)
    assert s.exists(["c1"]) == 0 and s.exists(["c2"]) == 0  # the corrupt objects were discarded


class Broken(MemoryStorage):
    """A backend whose batch hooks raise, as a lost connection does."""

    name = "broken"

    def _exists(self, keys):
        raise ConnectionError("store gone")

    def _write(self, items):
        raise ConnectionError("store gone")

    def _read(self, items):
        raise ConnectionError("store gone")

    def _discard(self, key):
        raise ConnectionError("store gone")


def test_a_failing_backend_is_an_error_per_object_never_the_callers_crash():
    s = Broken()
    src = pool(MLA, "page_first", seed=5)
    assert s.exists(["a", "b"]) == 0 and s.stats.errors == 1
    assert s.set(["a", "b", "c"], src, [0, 1, 2]) == [False, False, False]
    assert s.stats.errors == 4 and s.stats.objects_written == 0
    assert s.get(["a", "b"], pool(MLA, "page_first"), [0, 1]) == [False, False]
    assert s.stats.errors == 6 and s.stats.misses == 0 and s.stats.objects_read == 0


def test_a_corrupt_object_that_cannot_be_discarded_is_also_an_error():
    s = type("Undiscardable", (MemoryStorage,), {"_discard": Broken._discard})()
    s._write_one("c", [np.zeros((1, 10), dtype=np.uint8)])
    assert s.get(["c"], pool(MLA, "page_first"), [0]) == [False]
    assert (s.stats.corrupt, s.stats.errors) == (1, 1)


class Interrupted(BaseException):
    """Not an Exception: escapes the base's error counting, as KeyboardInterrupt does."""


def test_an_interrupted_set_gives_the_chunk_sealed_ahead_back_to_staging():
    class Interrupting(Recording):
        def _write(self, items):
            raise Interrupted

    pb = PAGE_BYTES["mha"]
    s = Interrupting(set_chunk=pb, get_chunk=pb)
    with pytest.raises(Interrupted):
        s.set(["a", "b"], pool(MHA, "page_first", seed=6), [0, 1])  # page b was sealed on the worker
    s.close()  # waits for the worker: its staging is back by now
    assert len(s.new_staging) > 0 and len(s.staging.clear()) == len(s.new_staging)


def test_close_stops_the_digest_worker():
    pb = PAGE_BYTES["mla"]
    s = Recording(set_chunk=pb, get_chunk=pb)
    s.set(["a", "b"], pool(MLA, "page_first", seed=7), [0, 1])  # two chunks: the worker started

    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("hicache-recording-digest")]

    assert workers()
    s.close()
    assert workers() == []


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_upstream_objects_round_trip_through_exists_set_and_get(attention):
    geom = {"mha": MHA, "mla": MLA}[attention]
    src, dst = pool(geom, "page_first", seed=8), pool(geom, "page_first")
    s = MemoryStorage()
    with pytest.raises(ValueError, match="^fmt: expected an ObjectFormat, got str$"):
        s.use_format("sglang")
    fmt = ObjectFormat(scheme="sglang", order="page_first", attention=attention, tag="t")
    s.use_format(fmt)
    assert s.object_parts == (2 if attention == "mha" else 1)
    want = [("t_p0__k", (0,))] if attention == "mla" else [("t_p0_0_k", (0,)), ("t_p0_0_v", (1,))]
    assert s.upstream_objects(fmt, "p0", s.object_parts) == want
    assert s.set(["p0", "p1"], src, [0, 1]) == [True, True]
    assert s.exists(["p0", "p1", "p2"]) == 2 and s.exists(["p1"]) == 1
    assert s.get(["p1", "p0"], dst, [2, 3]) == [True, True]
    assert same_page(dst, 2, src, 1) and same_page(dst, 3, src, 0)
    assert s.stats.errors == 0 and s.stats.objects_written == 2 * s.object_parts
    assert s._contains(want[0][0].replace("p0", "p1"))  # stored under upstream's names


class Refusing(MemoryStorage):
    """A store whose writes come back stored, full (None) and failed, in turn."""

    name = "refusing"

    def _write(self, items):
        outcomes = [True, None, False]
        super()._write([item for i, item in enumerate(items) if outcomes[i % 3]])
        return [outcomes[i % 3] for i in range(len(items))]


@pytest.mark.parametrize("scheme", ["harness", "sglang"])
def test_a_full_store_is_counted_full_and_a_failure_an_error_in_either_format(scheme):
    """Upstream's objects as HiCacheFile names them: K and V of an MHA page in one object."""
    s = Refusing()
    s.upstream_objects = lambda fmt, key, parts: objects.file_names(fmt, key, parts)
    if scheme == "sglang":
        s.use_format(ObjectFormat(scheme="sglang", order="page_first", attention="mha", tag="t"))
    assert s.set(["a", "b", "c", "d"], pool(MHA, "page_first", seed=10), [0, 1, 2, 3]) == [True, False, False, True]
    st = s.stats
    assert (st.objects_written, st.full, st.errors) == (2, 1, 1)
    assert st.bytes_written == 2 * PAGE_BYTES["mha"]


def test_set_of_staged_pages_writes_the_trailers_sealed_while_copying(monkeypatch):
    """The L3 write thread's staged copy seals each page's trailer in the copy pass: set must use
    those and not digest the pages a second time."""
    src = pool(MLA, "layer_first", seed=9)
    keys = ["a", "b", "c"]
    staged = StagedPages(src, [4, 1, 7], keys=keys, digest="xxh3")
    if staged.trailer("a", 0, "xxh3") is None:
        pytest.skip("no fused copy-and-digest engine here (hal.transfer.digestcopy): nothing is sealed")

    def digest_again(*args):
        raise AssertionError("set digested a page whose trailer was sealed while copying")

    s = MemoryStorage()
    monkeypatch.setattr(integrity, "trailer", digest_again)
    assert s.set(keys, staged, [0, 1, 2]) == [True, True, True]
    monkeypatch.undo()
    dst = pool(MLA, "page_first")
    assert s.get(keys, dst, [0, 1, 2]) == [True, True, True] and s.stats.corrupt == 0
    assert same_page(dst, 0, src, 4) and same_page(dst, 1, src, 1) and same_page(dst, 2, src, 7)


@pytest.mark.parametrize("keys, message", [
    (7, "keys: expected a list of strings, got int"),
    (["a", "b c"], "keys[1]: expected a non-empty printable string without spaces"),
    (["a\n"], "keys[0]: expected a non-empty printable string without spaces"),
    (["k" * 513], "keys[0]: expected a non-empty printable string without spaces of at most 512"),
])
def test_a_bad_key_is_refused_naming_it(keys, message):
    s = MemoryStorage()
    with pytest.raises(ValueError) as e:
        s.exists(keys)
    assert str(e.value).startswith(message)
    assert s.exists(["k" * 512]) == 0  # the longest key allowed


@pytest.mark.parametrize("page, shown", [(4, "4"), (True, "True"), (1.5, "1.5"), (-1, "-1")])
def test_a_bad_page_number_is_refused_naming_it(page, shown):
    s, src = MemoryStorage(), HostPool(MLA, 4 * MLA.page_size, "page_first", materialize=True)  # pages 0..3
    with pytest.raises(ValueError) as e:
        s.set(["a", "b"], src, [0, page])
    assert str(e.value) == f"host_pages[1]: expected a page number in [0, 4), got {shown}"
    assert s.set(["a", "b"], src, torch.tensor([3, 0])) == [True, True]  # a tensor of pages is fine


def test_an_empty_batch_does_nothing():
    s, p = Recording(set_chunk=PAGE_BYTES["mla"], get_chunk=0), pool(MLA, "page_first", seed=11)
    assert s.set([], p, []) == [] and s.get([], p, []) == [] and s.exists([]) == 0
    assert s.writes == [] and s.reads == [] and s.stats == type(s.stats)()


def test_a_client_refuses_an_unknown_digest_naming_it():
    with pytest.raises(ValueError) as e:
        MemoryStorage(digest="md5")
    assert str(e.value) == "digest: 'md5' is not one of xxh3, sha256"


@pytest.mark.parametrize("digest", ["xxh3", "sha256"])
def test_the_trailer_digest_is_the_same_on_the_copy_engine_and_off_it(digest):
    """A page in runs the copy engine takes (contiguous) and one it refuses (1-D at a stride, digested
    in Python) seal the same trailer: the digest of key NUL payload, NUL-padded to 32 bytes."""
    import hashlib

    import xxhash

    payload = np.arange(128, dtype=np.uint8)
    want = {"xxh3": xxhash.xxh3_128, "sha256": hashlib.sha256}[digest](b"k\0" + payload[::2].tobytes()).digest()
    for segments in ([payload[::2].copy()], [payload[::2]]):
        _, _, length, got = integrity.TRAILER.unpack(integrity.trailer(digest, "k", segments))
        assert length == 64 and got == want.ljust(32, b"\0")


def test_copy_trailers_copies_each_payload_and_returns_the_trailer_a_separate_seal_gives():
    """The fused copy + seal of L3 staging: the bytes land in order, and each trailer is field for
    field the one `trailer` computes over the same segments (its magic, digest id, payload length
    and XXH3-128); a digest that cannot be fused copies nothing and returns None."""
    rng = np.random.default_rng(7)
    lens = [(4096, 96), (1, 300, 17)]  # two objects: segments of unequal, odd lengths
    srcs = [[rng.integers(0, 256, n, dtype=np.uint8) for n in obj] for obj in lens]
    dsts = [[np.zeros(n, dtype=np.uint8) for n in obj] for obj in lens]
    objects = [(f"k{i}", [s.ctypes.data for s in srcs[i]], [d.ctypes.data for d in dsts[i]], list(lens[i]))
               for i in range(len(lens))]
    assert integrity.copy_trailers("sha256", objects) is None
    assert all(not d.any() for ds in dsts for d in ds)  # nothing copied when not fused
    sealed = integrity.copy_trailers("xxh3", objects)
    for i, obj in enumerate(lens):
        assert all(np.array_equal(s, d) for s, d in zip(srcs[i], dsts[i], strict=True))
        want = integrity.trailer("xxh3", f"k{i}", srcs[i])
        assert sealed[i] == want and len(sealed[i]) == integrity.TRAILER_BYTES
        assert integrity.TRAILER.unpack(sealed[i])[2] == sum(obj)
    assert sealed[0] != integrity.trailer("xxh3", "k1", srcs[0])  # the key is in the digest


def test_verified_refuses_a_bad_magic_and_checks_a_copied_digest_only_for_xxh3():
    """`verified` with the digest computed in the copy's pass (Mooncake's in-place reads): the copied
    digest decides for an xxh3 trailer, the payload is digested again for any other; and a trailer
    whose magic is wrong is refused even when its digest id and length are right."""
    payload = np.arange(300, dtype=np.uint8)
    size = payload.nbytes + integrity.TRAILER_BYTES
    tail = integrity.trailer("xxh3", "k", [payload])
    good = integrity.copy_digest([("k", [payload.ctypes.data], [np.empty_like(payload).ctypes.data], [300])])[0]
    assert integrity.verified("k", [payload], tail, size, 300)
    assert integrity.verified("k", [np.zeros_like(payload)], tail, size, 300, copied=good)  # the copy's digest decides
    assert not integrity.verified("k", [payload], tail, size, 300, copied=bytes(16))
    magic, ident, length, want = integrity.TRAILER.unpack(tail)
    assert not integrity.verified("k", [payload], integrity.TRAILER.pack(b"XXXX", ident, length, want), size, 300)
    sha = integrity.trailer("sha256", "k", [payload])
    assert integrity.verified("k", [payload], sha, size, 300, copied=bytes(16))  # not xxh3: digested again
    assert not integrity.verified("k", [np.zeros_like(payload)], sha, size, 300, copied=good)

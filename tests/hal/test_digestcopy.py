"""The copy engine's fused copy + XXH3-128 digest, and the L3 write staging that seals with it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xxhash

from conformance.suites.storage.page_pools import MHA, MLA, page_bits, poisoned_pool, random_pool
from hal.transfer import digestcopy
from hicache_ref.l3.write_snapshot import StagedPages
from hicache_ref.storage import integrity, pages
from hicache_ref.storage.file import FileStorage, file_name

SIZES = [0, 1, 15, 16, 63, 64, 255, 256, 257, 4095, 65535, 65536, 65537, (1 << 20) + 3]


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_native_engine_is_built_here():
    assert digestcopy.engine() == "native"


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("src_off,dst_off", [(0, 0), (1, 0), (3, 5), (17, 16), (0, 7)])
def test_fused_copy_digest_equals_copy_then_digest(size, src_off, dst_off):
    rng = np.random.default_rng(size + src_off)
    src = rng.integers(0, 256, size + 64, dtype=np.uint8)[src_off : src_off + size]
    buf = np.zeros(size + 64, dtype=np.uint8)
    dst = buf[dst_off : dst_off + size]
    for chunk in (digestcopy.CHUNK_BYTES, 4096, 100):
        buf[:] = 0
        [fused] = digestcopy.copy_digest([(b"key\0", [_addr(src)], [_addr(dst)], [size])], chunk=chunk)
        assert np.array_equal(dst, src) and not buf[:dst_off].any() and not buf[dst_off + size :].any()
        separate = xxhash.xxh3_128(b"key\0" + dst.tobytes()).digest()  # copy first, then digest
        assert fused == separate
        assert digestcopy._python(b"key\0", [_addr(src)], None, [size]) == fused  # the fallback agrees


def test_many_objects_and_segments_in_one_call():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 300_000, dtype=np.uint8)
    out = np.zeros_like(data)
    cuts = [(0, 1000), (5000, 70_000), (80_000, 80_001), (100_000, 299_999)]
    objects = [(f"k{i}".encode(), [_addr(data[a:])], [_addr(out[a:])], [b - a]) for i, (a, b) in enumerate(cuts)]
    objects.append((b"", [_addr(data), _addr(data[7:])], None, [3, 9]))  # digested in place, two segments
    got = digestcopy.copy_digest(objects)
    for (a, b), d, i in zip(cuts, got, range(len(cuts)), strict=False):
        assert d == xxhash.xxh3_128(f"k{i}".encode() + data[a:b].tobytes()).digest()
        assert np.array_equal(out[a:b], data[a:b])
    assert got[-1] == xxhash.xxh3_128(data[:3].tobytes() + data[7:16].tobytes()).digest()


@pytest.mark.parametrize("threads", [1, 2, 3, 7, 64])
def test_objects_spread_over_threads_give_each_object_its_own_digest(threads):
    """Split by bytes across threads (uneven objects, empty ones at both ends and between):
    every object's copy and digest as on one thread, in the caller's order."""
    rng = np.random.default_rng(11)
    data = rng.integers(0, 256, 3 << 20, dtype=np.uint8)
    out = np.zeros_like(data)
    cuts = [(0, 0), (0, 1 << 20), (1 << 20, (1 << 20) + 5), (2 << 20, 2 << 20), ((1 << 20) + 5, 3 << 20), (7, 7)]
    objects = [(f"k{i}".encode(), [_addr(data[a:])] if b > a else [], [_addr(out[a:])] if b > a else [],
                [b - a] if b > a else []) for i, (a, b) in enumerate(cuts)]
    got = digestcopy.copy_digest(objects, threads=threads)
    assert got == [xxhash.xxh3_128(f"k{i}".encode() + data[a:b].tobytes()).digest() for i, (a, b) in enumerate(cuts)]
    assert np.array_equal(out, data)


def test_trailers_in_one_call_equal_each_pages_own():
    pool = random_pool(MLA, "layer_first", seed=4)
    items = [(f"k{p}", pages.page_runs(pool, p)) for p in range(pool.num_tokens // pool.geom.page_size)]
    assert integrity.trailers("xxh3", items) == [integrity.trailer("xxh3", k, runs) for k, runs in items]
    assert integrity.trailers("sha256", items[:2]) == [integrity.trailer("sha256", k, runs) for k, runs in items[:2]]
    assert integrity.trailers("xxh3", []) == []


def test_paired_cuts_segments_at_both_sides_boundaries():
    src = np.arange(100, dtype=np.uint8)
    dst = np.zeros(100, dtype=np.uint8)
    s, d, n = digestcopy.paired([_addr(src), _addr(src[30:])], [30, 70],
                                [_addr(dst), _addr(dst[10:]), _addr(dst[60:])], [10, 50, 40])
    assert n.tolist() == [10, 20, 30, 40] and int(n.sum()) == 100
    digestcopy.copy_digest([(b"", s, d, n)])
    assert np.array_equal(src, dst)
    with pytest.raises(ValueError, match="segments"):
        digestcopy.paired([_addr(src)], [10], [_addr(dst)], [11])


def test_trailer_is_the_xxh3_of_key_nul_payload():
    """The stored digest is XXH3-128 of key, NUL, payload, whichever path computed it."""
    pool = random_pool(MLA, "layer_first", seed=2)
    runs = pages.page_runs(pool, 1)
    payload = b"".join(r.tobytes() for a in runs for r in a)
    want = integrity.TRAILER.pack(b"HCKV", b"xx3\0", len(payload),
                                  xxhash.xxh3_128(b"k1\0" + payload).digest().ljust(32, b"\0"))
    assert integrity.trailer("xxh3", "k1", runs) == want


@pytest.mark.parametrize("geom", [MHA, MLA], ids=["mha", "mla"])
@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct", "page_first", "page_head"])
def test_staging_in_one_submission_moves_the_bytes_page_by_page_does(geom, layout):
    if layout == "page_head" and geom is MLA:
        pytest.skip("page_head is an MHA layout")
    src = random_pool(geom, layout, seed=9)
    host_pages = [3, 0, 2]
    keys = ["a", "b", "c"]
    staged = StagedPages(src, host_pages, keys, "xxh3")
    for i, page in enumerate(host_pages):
        want = torch.cat(pages.page_segments(src, page))  # the page-by-page copy it replaces
        got = torch.cat(pages.page_segments(staged, i))
        assert torch.equal(got, want)
        sealed = staged.trailer(keys[i], i, "xxh3")
        assert sealed is None or sealed == integrity.trailer("xxh3", keys[i], [want])
        assert staged.trailer(keys[i], i, "sha256") is None and staged.trailer("other", i, "xxh3") is None


@pytest.mark.parametrize("digest", ["xxh3", "sha256"])
@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct"])
def test_fused_seal_detects_a_corrupted_page_exactly_as_before(tmp_path, digest, layout):
    """Objects sealed in the staging copy: one flipped byte -> get False, counted corrupt, discarded."""
    src = random_pool(MHA, layout, seed=5)
    staged = StagedPages(src, [0, 1], ["good", "bad"], digest)
    assert (staged.trailer("good", 0, digest) is not None) == (digest == "xxh3")
    dst = poisoned_pool(MHA, layout)
    with FileStorage(str(tmp_path), digest=digest) as s:
        assert s.set(["good", "bad"], staged, [0, 1]) == [True, True]
        path = tmp_path / file_name("bad")
        blob = bytearray(path.read_bytes())
        blob[5] ^= 0x01
        path.write_bytes(bytes(blob))
        assert s.get(["good", "bad"], dst, [0, 1]) == [True, False]
        assert s.stats.corrupt == 1 and s.stats.objects_read == 1 and s.stats.misses == 0
        assert s.exists(["bad"]) == 0  # discarded, as any corrupt object
        assert s.set(["bad"], staged, [1]) == [True] and s.get(["bad"], dst, [1]) == [True]
    assert torch.equal(page_bits(dst, 0), page_bits(src, 0))
    assert torch.equal(page_bits(dst, 1), page_bits(src, 1))


def _numpy_synthetic_kv(tokens, positions, part, layer, item_size):
    """The numpy form of hicache_ref.core.synthetic_kv: an independent statement of what the native writer writes."""
    mix = tokens.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ positions.astype(np.uint64) * np.uint64(
        0xC2B2AE3D27D4EB4F)
    mix ^= np.uint64((layer * 2 + part + 1) * 0x165667B19E3779F9 & 0xFFFFFFFFFFFFFFFF)
    col = np.arange(item_size, dtype=np.uint64) * np.uint64(0xD6E8FEB86659FD93)
    x = mix[:, None] ^ col[None, :]
    x ^= x >> np.uint64(29)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    return (x >> np.uint64(56)).astype(np.uint8)


@pytest.mark.parametrize("item", [1, 7, 128, 1152])
def test_native_synthetic_kv_writes_the_numpy_bytes(item):
    from hal.transfer import pattern
    from hicache_ref.core.synthetic_kv import synthetic_kv

    rng = np.random.default_rng(item)
    tokens, positions = rng.integers(0, 2**31, 300), rng.integers(0, 2**20, 300)
    out = np.zeros((300, item), dtype=np.uint8)
    assert pattern.fill(out, tokens, positions, 12345)
    for part, layer in ((0, 0), (1, 0), (0, 77)):
        assert np.array_equal(synthetic_kv(tokens, positions, part, layer, item),
                              _numpy_synthetic_kv(tokens, positions, part, layer, item))

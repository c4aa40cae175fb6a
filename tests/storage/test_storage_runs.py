"""Pages moved as runs of the host pool and the digest overlapped with I/O: which layouts are runs (worked
by hand on the small geometries), the objects they make are the canonical bytes, batches split in
chunks keep their order and their verdicts, staging in flight stays bounded, the worker thread goes
with the client."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from conformance.suites import reference
from conformance.suites.storage.cases import MHA, MLA, PAGE_BYTES, page_bits, poisoned_pool, random_pool
from hicache_ref.storage import file as file_backend
from hicache_ref.storage import integrity, pages
from hicache_ref.storage.file import FileStorage


def _flat(pool, part: int = 0) -> np.ndarray:
    return pool.buffers[part].view(torch.uint8).reshape(-1).numpy()


def _offset(view: np.ndarray, pool, part: int = 0) -> int:
    return view.__array_interface__["data"][0] - _flat(pool, part).__array_interface__["data"][0]


def test_layer_first_page_is_one_run_per_layer_in_place():
    # MLA 3 layers x 16 tokens x 16 bytes: layer l of the pool starts at l * 256; page p (4 tokens)
    # is, per layer, the 64 bytes at l * 256 + p * 64
    pool = random_pool(MLA, "layer_first", 1)
    (runs,) = pages.page_runs(pool, 2)
    assert runs.shape == (3, 64) and runs.strides == (256, 1)
    assert _offset(runs, pool) == 2 * 64
    assert np.shares_memory(runs, _flat(pool))
    assert bytes(runs.reshape(-1)) == b"".join(bytes(_flat(pool)[layer * 256 + 128 : layer * 256 + 192]) for layer in range(3))


def test_page_first_direct_page_is_one_run_and_page_first_is_gathered():
    direct = random_pool(MLA, "page_first_direct", 2)
    (run,) = pages.page_runs(direct, 3)
    assert run.shape == (1, 192) and _offset(run, direct) == 3 * 192
    # page_first puts a page's (token, layer) items 16 bytes apart in token-major order: 12 runs of
    # 16 bytes whose canonical (layer-major) order is no single stride, so it is gathered
    gathered = random_pool(MLA, "page_first", 3)
    (copy,) = pages.page_runs(gathered, 1)
    assert copy.shape == (1, 192) and not np.shares_memory(copy, _flat(gathered))
    assert pages.page_run_targets(gathered, 1) is None
    assert torch.equal(torch.from_numpy(copy.reshape(-1)), torch.cat(pages.page_segments(gathered, 1)))


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_runs_concatenate_to_the_canonical_page_in_every_layout(attention):
    geom = {"mha": MHA, "mla": MLA}[attention]
    for layout in reference.layouts_for(attention):
        pool = random_pool(geom, layout, 4)
        for page in range(4):
            got = b"".join(bytes(r) for r in (row for arr in pages.page_runs(pool, page) for row in arr))
            assert got == b"".join(bytes(s.numpy()) for s in pages.page_segments(pool, page)), layout
            assert len(got) == PAGE_BYTES[attention]


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_a_batch_of_pages_in_an_upstream_order_is_the_bytes_page_by_page(attention):
    # upstream's objects: one part's page in a host layout's axis order; the batch form (one gather
    # or views) must give every page exactly what the per-page form gives, in the order asked
    geom = {"mha": MHA, "mla": MLA}[attention]
    for layout in reference.layouts_for(attention):
        pool = random_pool(geom, layout, 5)
        for order in pages.OBJECT_ORDERS:
            take = lambda n: torch.empty(n, dtype=torch.uint8)  # noqa: E731
            for part in range(geom.parts):
                batch = pages.gather_ordered_pages(pool, part, [3, 0, 2], order, take)
                want = [pages.gather_ordered(pool, part, p, order, take) for p in (3, 0, 2)]
                assert [a.tobytes() for a in batch] == [w.tobytes() for w in want], (layout, order, part)
                assert all(a.shape == (1, pages.part_bytes(geom)) for a in batch)
                views = pages.ordered_view(pool, part, 3, order) is not None
                assert np.shares_memory(batch[0], _flat(pool, part)) == views, (layout, order)


def test_digest_over_strided_runs_equals_the_digest_of_their_bytes():
    pool = random_pool(MHA, "layer_first", 5)
    runs = pages.page_runs(pool, 1)  # K and V: 3 runs of 64 bytes each, 256 bytes apart
    assert [r.shape for r in runs] == [(3, 64), (3, 64)] and not runs[0].flags.c_contiguous
    flat = np.frombuffer(b"".join(bytes(r.reshape(-1)) for r in runs), dtype=np.uint8)
    assert integrity.trailer("xxh3", "k", runs) == integrity.trailer("xxh3", "k", [flat])
    assert integrity.trailer("sha256", "k", runs) == integrity.trailer("sha256", "k", [flat])


def test_more_runs_than_max_runs_are_gathered_and_still_round_trip(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "MAX_RUNS", 2)  # layer_first's 3 runs a page are now too many
    pages._run_plan.cache_clear()
    try:
        src, dst = random_pool(MLA, "layer_first", 6), poisoned_pool(MLA, "layer_first")
        assert pages.page_run_targets(src, 0) is None
        with FileStorage(str(tmp_path)) as s:
            assert s.set(["a"], src, [1]) == [True] and s.get(["a"], dst, [2]) == [True]
        assert torch.equal(page_bits(dst, 2), page_bits(src, 1))
    finally:
        monkeypatch.undo()
        pages._run_plan.cache_clear()


def test_short_iov_max_still_writes_and_reads_whole_objects(tmp_path, monkeypatch):
    monkeypatch.setattr(file_backend, "IOV_MAX", 2)  # MHA layer_first: 3 + 3 runs + trailer = 7 buffers
    src, dst = random_pool(MHA, "layer_first", 7), poisoned_pool(MHA, "layer_first")
    with FileStorage(str(tmp_path)) as s:
        assert s.set(["a", "b"], src, [0, 3]) == [True, True]
        assert (tmp_path / "a.kv").stat().st_size == PAGE_BYTES["mha"] + 48
        assert s.get(["b", "a"], dst, [1, 2]) == [True, True]
    assert torch.equal(page_bits(dst, 1), page_bits(src, 3)) and torch.equal(page_bits(dst, 2), page_bits(src, 0))


def _one_page_chunks(store) -> None:
    store.set_chunk_bytes = store.get_chunk_bytes = 1  # every page its own chunk: the most overlap steps


@pytest.mark.parametrize("dst_layout", ["layer_first", "page_first"])  # read in place / through staging
def test_chunked_batch_keeps_order_and_verdicts(tmp_path, dst_layout):
    src, dst = random_pool(MLA, "page_first_direct", 8), poisoned_pool(MLA, dst_layout)
    with FileStorage(str(tmp_path)) as s:
        _one_page_chunks(s)
        assert s.set(["a", "b", "c"], src, [0, 1, 2]) == [True] * 3
        blob = bytearray((tmp_path / "b.kv").read_bytes())
        blob[7] ^= 0x10
        (tmp_path / "b.kv").write_bytes(bytes(blob))
        assert s.get(["c", "b", "missing", "a"], dst, [0, 1, 2, 3]) == [True, False, False, True]
        st = s.stats
        assert (st.objects_read, st.corrupt, st.misses, st.errors) == (2, 1, 1, 0)
        if dst_layout == "page_first":
            # staging is given back chunk by chunk: at most two pages' worth were ever out at once
            assert s.staging._kept in (PAGE_BYTES["mla"], 2 * PAGE_BYTES["mla"])
    assert torch.equal(page_bits(dst, 0), page_bits(src, 2)) and torch.equal(page_bits(dst, 3), page_bits(src, 0))
    assert bool((page_bits(dst, 2).view(torch.uint8) == reference.POISON_BYTE).all())


class _FailingSecondRead(FileStorage):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.reads = 0

    def _read(self, items):
        self.reads += 1
        if self.reads == 2:
            raise OSError("disk gone")
        return super()._read(items)


def test_a_chunk_whose_read_fails_is_errors_the_others_are_read(tmp_path):
    src, dst = random_pool(MLA, "layer_first", 9), poisoned_pool(MLA, "layer_first")
    with _FailingSecondRead(str(tmp_path)) as s:
        _one_page_chunks(s)
        assert s.set(["a", "b", "c"], src, [0, 1, 2]) == [True] * 3
        assert s.get(["a", "b", "c"], dst, [0, 1, 2]) == [True, False, True]
        assert s.stats.errors == 1 and s.stats.objects_read == 2
    assert torch.equal(page_bits(dst, 2), page_bits(src, 2))


def test_the_digest_worker_starts_on_use_and_goes_with_close(tmp_path):
    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("hicache-file-digest")]

    before = len(workers())
    s = FileStorage(str(tmp_path))
    _one_page_chunks(s)
    assert len(workers()) == before  # nothing started for a client that moved nothing
    src = random_pool(MLA, "layer_first", 10)
    assert s.set(["a", "b"], src, [0, 1]) == [True, True]
    assert len(workers()) == before + 1
    s.close()
    assert len(workers()) == before

"""The file store seals a page's trailer on the worker while it writes the page (`late_trailer`):
the object on disk is the one the seal-first path writes, the trailer is written only once sealed
(a slow seal is waited for, never written as it stood), and a failed seal leaves no file behind."""

from __future__ import annotations

import os
import threading
import time

import pytest
from test_storage_mutants import pool, same_page

from conformance.suites.storage.cases import MHA, MLA, PAGE_BYTES
from hicache_ref.storage.file import FileStorage

LAYOUTS = ["page_first", "page_first_direct", "layer_first"]  # staged, one run, runs


def _files(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("geom", [MLA, MHA], ids=["mla", "mha"])
def test_objects_are_the_bytes_the_seal_first_path_writes(tmp_path, layout, geom):
    src = pool(geom, layout, seed=3)
    written = {}
    for late in (False, True):
        with FileStorage(str(tmp_path / str(late)), max_bytes=64 << 20) as store:
            store.late_trailer = late
            store.set_chunk_bytes = PAGE_BYTES["mha" if geom is MHA else "mla"] * 2  # several seal jobs
            assert store.set([f"k{i}" for i in range(7)], src, list(range(7))) == [True] * 7
            written[late] = _files(tmp_path / str(late))
    assert written[True] == written[False] and len(written[True]) == 7


def test_a_slow_seal_is_waited_for_before_the_trailer_is_written(tmp_path):
    src, dst = pool(MLA, "layer_first", seed=4), pool(MLA, "layer_first")
    with FileStorage(str(tmp_path), max_bytes=64 << 20) as store:
        seal = store._seal

        def slow(batch, tails, host_pool):
            assert threading.current_thread() is not threading.main_thread()  # beside the write
            time.sleep(0.05)
            seal(batch, tails, host_pool)

        store._seal = slow
        keys = [f"k{i}" for i in range(5)]
        assert store.set(keys, src, list(range(5))) == [True] * 5
        assert store.get(keys, dst, list(range(5))) == [True] * 5
        assert all(same_page(src, i, dst, i) for i in range(5)) and store.stats.corrupt == 0


def test_a_failed_seal_fails_its_chunk_only_and_leaves_no_temporary_file(tmp_path):
    src, dst = pool(MLA, "page_first_direct", seed=5), pool(MLA, "page_first_direct")
    with FileStorage(str(tmp_path), max_bytes=64 << 20) as store:
        store.set_chunk_bytes = PAGE_BYTES["mla"] * 2  # chunks [a b] [c d] [e]
        seal = store._seal

        def failing(batch, tails, host_pool):
            if batch[0][0] == "c":
                raise MemoryError("digest")
            seal(batch, tails, host_pool)

        store._seal = failing
        keys = ["a", "b", "c", "d", "e"]
        assert store.set(keys, src, range(5)) == [True, True, False, False, True]
        assert (store.stats.errors, store.stats.objects_written) == (2, 3)
        assert sorted(os.listdir(store.directory)) == ["a.kv", "b.kv", "e.kv"]
        assert store.get(["a", "b", "e"], dst, [0, 1, 4]) == [True] * 3
        assert all(same_page(src, i, dst, i) for i in (0, 1, 4))


def test_staged_pages_take_the_chunked_path_with_bounded_staging(tmp_path):
    """page_first pages are gathered into staging: the late path would hold a whole batch's."""
    src = pool(MLA, "page_first", seed=7)
    with FileStorage(str(tmp_path), max_bytes=64 << 20) as store:
        called = []
        store._set_trailer_last = lambda *a: called.append(a)
        assert store.set([f"k{i}" for i in range(4)], src, range(4)) == [True] * 4 and called == []
        store.set(["x"], pool(MLA, "layer_first", seed=7), [0])
        assert len(called) == 1


def test_an_interrupt_while_waiting_for_the_seal_leaves_no_temporary_file(tmp_path):
    class Interrupted(BaseException):
        pass

    src = pool(MLA, "page_first_direct", seed=6)
    with FileStorage(str(tmp_path), max_bytes=64 << 20) as store:
        def interrupted(batch, tails, host_pool):
            raise Interrupted

        store._seal = interrupted
        with pytest.raises(Interrupted):
            store.set(["a"], src, [0])
        assert os.listdir(store.directory) == []

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


def test_a_failed_seal_is_an_error_and_leaves_no_temporary_file(tmp_path):
    src = pool(MLA, "page_first_direct", seed=5)
    with FileStorage(str(tmp_path), max_bytes=64 << 20) as store:
        def failing(batch, tails, host_pool):
            raise MemoryError("digest")

        store._seal = failing
        assert store.set(["a", "b"], src, [0, 1]) == [False, False]
        assert store.stats.errors == 2 and store.stats.objects_written == 0
        assert os.listdir(store.directory) == []


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

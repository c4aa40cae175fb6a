"""The file store seals a page's trailer on the worker while it writes the page (`late_trailer`):
the object on disk is the one the seal-first path writes, the trailer is written only once sealed
(a slow seal is waited for, never written as it stood), one chunk is sealed ahead at most, a failed
seal fails its own chunk and leaves no file behind, and the worker never waits on itself."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from conformance.suites.storage.page_pools import MHA, MLA, PAGE_BYTES
from hicache_ref.storage.file import MARKER, FileStorage
from tests.storage.test_storage_mutants import pool, same_page


def store_listing(directory) -> list[str]:
    """The directory's entries but the store's marker file."""
    return [n for n in os.listdir(directory) if n != MARKER]

RUN_LAYOUTS = ["page_first_direct", "layer_first"]  # a page is one run, or a run per layer
TWO_PAGES = PAGE_BYTES["mla"] * 2  # a chunk of two MLA pages: several seal jobs a set


def _files(directory):
    return {name: (directory / name).read_bytes() for name in sorted(store_listing(directory))}


def _store(path, **kw) -> FileStorage:
    store = FileStorage(str(path), max_bytes=64 << 20, **kw)
    store.set_chunk_bytes = TWO_PAGES
    return store


@pytest.mark.parametrize("layout", RUN_LAYOUTS)
@pytest.mark.parametrize("geom", [MLA, MHA], ids=["mla", "mha"])
def test_objects_are_the_bytes_the_seal_first_path_writes(tmp_path, layout, geom):
    src = pool(geom, layout, seed=3)
    written = {}
    for late in (False, True):
        with _store(tmp_path / str(late)) as store:
            store.late_trailer = late
            assert store._trailer_last(src) is late
            assert store.set([f"k{i}" for i in range(7)], src, list(range(7))) == [True] * 7
            written[late] = _files(tmp_path / str(late))
    assert written[True] == written[False] and len(written[True]) == 7


def test_staged_pages_take_the_chunked_path_with_bounded_staging(tmp_path):
    """page_first pages are gathered into staging: the trailer-last path would hold a whole batch's."""
    with _store(tmp_path) as store:
        assert not store._trailer_last(pool(MLA, "page_first"))
        assert store._trailer_last(pool(MLA, "layer_first"))


def test_a_slow_seal_is_waited_for_before_the_trailer_is_written(tmp_path):
    src, dst = pool(MLA, "layer_first", seed=4), pool(MLA, "layer_first")
    with _store(tmp_path) as store:
        seal = store._seal

        def slow(batch, tails, host_pool):
            assert threading.current_thread() is not threading.main_thread()  # beside the write
            time.sleep(0.02)
            seal(batch, tails, host_pool)

        store._seal = slow
        keys = [f"k{i}" for i in range(7)]
        assert store.set(keys, src, list(range(7))) == [True] * 7
        assert store.get(keys, dst, list(range(7))) == [True] * 7
        assert all(same_page(src, i, dst, i) for i in range(7)) and store.stats.corrupt == 0


def test_one_chunk_is_sealed_ahead_at_most(tmp_path):
    """A get's verify shares the worker: a set must not queue its whole batch's digest before it."""
    src = pool(MLA, "layer_first", seed=5)
    with _store(tmp_path) as store:
        live, most, submit, seal = [0], [0], store._digests.submit, store._seal

        def slow(batch, tails, host_pool):
            time.sleep(0.01)  # slower than writing the chunk: without a bound, every job would queue
            seal(batch, tails, host_pool)
            live[0] -= 1

        def counting(fn, *args):
            live[0] += 1
            most[0] = max(most[0], live[0])
            return submit(fn, *args)

        store._seal, store._digests.submit = slow, counting
        assert store.set([f"k{i}" for i in range(12)], src, list(range(12))) == [True] * 12  # 6 chunks
        assert most[0] == 2


def test_set_returns_only_once_the_worker_is_done_with_the_pages(tmp_path):
    src = pool(MLA, "page_first_direct", seed=6)
    with _store(tmp_path) as store:
        finished, seal = [], store._seal

        def slow(batch, tails, host_pool):
            time.sleep(0.05)
            seal(batch, tails, host_pool)
            finished.append(batch[0][0])

        store._seal = slow
        store._write = lambda items, trailer_ready=None: [False] * len(items)  # fails before any trailer
        assert store.set(["a", "b", "c"], src, [0, 1, 2]) == [False] * 3
        assert finished == ["a", "c"]  # both chunks' seals ran to the end before set returned


def test_a_failed_seal_fails_its_chunk_only_and_leaves_no_temporary_file(tmp_path):
    for layout in ("page_first_direct", "page_first"):  # the trailer-last path and the chunked one
        src, dst = pool(MLA, layout, seed=7), pool(MLA, layout)
        with _store(tmp_path / layout) as store:  # chunks [a b] [c d] [e]
            seal = store._seal

            def failing(batch, tails, host_pool, seal=seal):
                if batch[0][0] == "c":
                    raise MemoryError("digest")
                seal(batch, tails, host_pool)

            out, take, give = [0], store.staging.take, store.staging.give

            def taking(nbytes, lease, out=out, take=take):
                out[0] += 1
                return take(nbytes, lease)

            def giving(lease, out=out, give=give):
                out[0] -= len(lease)
                give(lease)

            store._seal, store.staging.take, store.staging.give = failing, taking, giving
            keys = ["a", "b", "c", "d", "e"]
            assert store.set(keys, src, range(5)) == [True, True, False, False, True], layout
            assert (store.stats.errors, store.stats.objects_written) == (2, 3)
            assert sorted(store_listing(store.directory)) == ["a.kv", "b.kv", "e.kv"]
            assert out[0] == 0  # every staging buffer taken (page_first gathers) went back
            assert store.get(["a", "b", "e"], dst, [0, 1, 4]) == [True] * 3
            assert all(same_page(src, i, dst, i) for i in (0, 1, 4))


def test_an_interrupt_while_waiting_for_the_seal_leaves_no_temporary_file(tmp_path):
    class Interrupted(BaseException):
        pass

    src = pool(MLA, "page_first_direct", seed=8)
    with _store(tmp_path) as store:
        def interrupted(batch, tails, host_pool):
            raise Interrupted

        store._seal = interrupted
        with pytest.raises(Interrupted):
            store.set(["a"], src, [0])
        assert store_listing(store.directory) == []


def test_a_set_on_the_worker_seals_there_instead_of_waiting_on_itself(tmp_path):
    src = pool(MLA, "layer_first", seed=9)
    with _store(tmp_path) as store:
        keys = [f"k{i}" for i in range(5)]
        assert store._digests.submit(store.set, keys, src, list(range(5))).result(timeout=30) == [True] * 5


def test_no_worker_outlives_close(tmp_path):
    store = _store(tmp_path)
    assert store.set(["a", "b", "c"], pool(MLA, "layer_first", seed=10), [0, 1, 2]) == [True] * 3
    store.close()
    assert store._digests.submit(lambda: 7).result() == 7 and store._digests.executor is None  # ran here, none started


def test_a_subclass_whose_write_takes_no_trailer_ready_takes_the_chunked_path(tmp_path):
    class Older(FileStorage):
        def _write(self, items):
            return super()._write(items)

    src = pool(MLA, "layer_first", seed=11)
    with Older(str(tmp_path), max_bytes=64 << 20) as store:
        assert not store._trailer_last(src)
        assert store.set(["a", "b"], src, [0, 1]) == [True, True] and store.stats.errors == 0


def test_a_subclass_whose_write_one_takes_no_last_ready_writes_each_object_once_sealed(tmp_path):
    class Older(FileStorage):
        def _write_one(self, key, segments, token=None):
            return super()._write_one(key, segments, token)

    src, dst = pool(MLA, "layer_first", seed=12), pool(MLA, "layer_first")
    with Older(str(tmp_path), max_bytes=64 << 20) as store:
        store.set_chunk_bytes = TWO_PAGES
        seal = store._seal

        def slow(batch, tails, host_pool):
            time.sleep(0.02)  # a trailer written before its seal would be caught as corrupt below
            seal(batch, tails, host_pool)

        store._seal = slow
        keys = [f"k{i}" for i in range(5)]
        assert store.set(keys, src, range(5)) == [True] * 5 and store.stats.errors == 0
        assert store.get(keys, dst, range(5)) == [True] * 5 and store.stats.corrupt == 0


def test_a_temporary_name_already_taken_is_left_to_its_owner(tmp_path):
    with _store(tmp_path) as store:
        (tmp_path / ".tmp-taken").write_bytes(b"another writer's")
        assert store._write_one("k", [np.zeros((1, 64), dtype=np.uint8)], "taken") is False
        assert (tmp_path / ".tmp-taken").read_bytes() == b"another writer's"

"""Concurrent clients: threads sharing one client and several clients in other processes write and
read at once; every page reads back whole and bit-identical, nothing reads as corrupt."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import torch

from conformance.suites.storage.page_pools import MHA, MLA, page_bits, poisoned_pool, random_pool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THREADS = 4
ROUNDS = 8


def test_threads_share_one_client(store, unique):
    pools = [random_pool(MLA, "page_first_direct", 40 + t) for t in range(THREADS)]
    failures = []

    def work(t):
        try:
            dst = poisoned_pool(MLA, "layer_first")
            for r in range(ROUNDS):
                key = unique(f"t{t}-r{r}")
                page = r % 4
                assert store.set([key], pools[t], [page]) == [True]
                assert store.get([key], dst, [page]) == [True]
                assert torch.equal(page_bits(dst, page), page_bits(pools[t], page))
                shared = unique(f"shared-r{r}")  # every thread writes the same page under one key
                store.set([shared], pools[0], [0])
                if store.get([shared], dst, [1]) == [True]:
                    assert torch.equal(page_bits(dst, 1), page_bits(pools[0], 0))
        except BaseException as e:  # noqa: BLE001 - reported below with the thread
            failures.append((t, repr(e)))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures
    assert store.stats.corrupt == 0 and store.stats.errors == 0


_CHILD = """
import sys
sys.path.insert(0, {root!r})
from conformance.suites.storage.page_pools import MHA, poisoned_pool, random_pool, page_bits
from hicache_ref.storage.registry import open_storage
s = open_storage({spec!r})
mine = random_pool(MHA, "page_first", {seed})
assert s.set([{key0!r}, {key1!r}], mine, [0, 1]) == [True, True]
print("written", flush=True)
sys.stdin.readline()  # stay alive while the parent reads: some stores keep objects in the writer
dst = poisoned_pool(MHA, "page_head")
ok = s.get([{parent_key!r}], dst, [3])
print("read", ok, page_bits(dst, 3).numpy().tobytes().hex(), s.stats.corrupt, flush=True)
sys.stdin.readline()
s.close()
"""


def test_clients_in_other_processes(store, storage_spec, unique):
    spec = storage_spec[0]
    if not store.shared:
        import pytest

        pytest.skip(f"{store.name}: objects are private to one process (shared = False)")
    mine = random_pool(MHA, "page_first_direct", 50)
    parent_key = unique("parent")
    assert store.set([parent_key], mine, [2]) == [True]
    children = []
    try:
        for i in range(2):
            code = _CHILD.format(root=ROOT, spec=spec, seed=60 + i, key0=unique(f"child{i}-p0"),
                                 key1=unique(f"child{i}-p1"), parent_key=parent_key)
            children.append(subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for child in children:
            line = child.stdout.readline()
            assert line.strip() == "written", child.stderr.read()[-2000:] if not line else line
        dst = poisoned_pool(MHA, "layer_first")
        for i, child in enumerate(children):
            theirs = random_pool(MHA, "page_first", 60 + i)  # the same seed makes the same bits
            assert store.get([unique(f"child{i}-p0"), unique(f"child{i}-p1")], dst, [0, 1]) == [True, True]
            assert torch.equal(page_bits(dst, 0), page_bits(theirs, 0))
            assert torch.equal(page_bits(dst, 1), page_bits(theirs, 1))
            child.stdin.write("\n")
            child.stdin.flush()
            word, ok, hexbits, corrupt = child.stdout.readline().split()
            assert (word, ok, corrupt) == ("read", "[True]", "0")
            assert bytes.fromhex(hexbits) == page_bits(mine, 2).numpy().tobytes()
            child.stdin.write("\n")
            child.stdin.flush()
        for child in children:
            assert child.wait(timeout=60) == 0, child.stderr.read()[-2000:]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

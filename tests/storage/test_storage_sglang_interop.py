"""A store upstream SGLang 0.5.23's own clients wrote serves the harness, and the reverse.

Upstream's MooncakeStore (on the loopback cluster) and HiCacheFile run in the sglang environment
(tests/sglang_side/upstream_peer.py: its host pool classes' own page addressing, its own storage
hash chain), the harness's client here with `--l3-keys sglang`, for MLA and MHA, with a model name,
a backend tag and a namespace seed. Skipped with the reason where SGLang or Mooncake is absent.
The interpreter with SGLang: $HICACHE_SGLANG_PYTHON, else this one if it imports sglang.
Each Mooncake case gets a cluster of its own: a segment another test's client left mounted would
otherwise be handed this test's writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hal.transfer.layouts import KVGeometry
from hicache_ref.core.hashing import page_hashes
from hicache_ref.core.pools import HostPool
from hicache_ref.storage.file import FileStorage
from hicache_ref.storage.keys import namespace_seed, upstream_keys
from hicache_ref.storage.objects import ObjectFormat
from tests.sglang_side import kvfill

PEER = Path(__file__).resolve().parents[1] / "sglang_side" / "upstream_peer.py"
PS, PAGES, LAYERS, DIM = 4, 5, 3, 8
TOKENS = list(range(7000, 7000 + 3 * PS))  # three pages
MODEL, TAG = "org/model-7b", "tenant1"

pytestmark = pytest.mark.needs_sglang


def _sglang_python() -> str | None:
    given = os.environ.get("HICACHE_SGLANG_PYTHON")
    candidates = [given] if given else [sys.executable]
    for exe in candidates:
        probe = subprocess.run([exe, "-c", "import sglang.srt.mem_cache.hicache_storage, mooncake.store"],
                               capture_output=True, text=True, timeout=300)
        if probe.returncode == 0:
            return exe
    return None


@pytest.fixture(scope="module")
def sglang_python():
    exe = _sglang_python()
    if exe is None:
        pytest.skip("sglang 0.5.23 with the Mooncake wheel is not importable (set HICACHE_SGLANG_PYTHON to "
                    "an interpreter that has them)")
    return exe


class Peer:
    """Upstream's client in the sglang interpreter: one job, kept alive until closed."""

    def __init__(self, exe: str, job: dict):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        # its transfer engine publishes this data address for its segment (else the host's first
        # interface), as the harness's client does: every peer stays on loopback
        env.setdefault("MC_TCP_BIND_ADDRESS", "127.0.0.1")
        env.setdefault("MC_LOG_LEVEL", "ERROR")
        self.proc = subprocess.Popen([exe, str(PEER), json.dumps(job)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                self.result = json.loads(line[len("RESULT "):])
                return
        self.close()
        raise AssertionError(f"upstream peer failed: {self.proc.stderr.read()[-3000:]}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)


def _geom(attention: str) -> KVGeometry:
    return KVGeometry(attention, LAYERS, 2 if attention == "mha" else 1, DIM, torch.bfloat16, PS)


def _pool(attention: str, layout: str, slots) -> HostPool:
    geom = _geom(attention)
    pool = HostPool(geom, PAGES * PS, layout, materialize=True)
    for p, buf in enumerate(pool.buffers):
        buf.copy_(kvfill.fill(p, layout, LAYERS, geom.heads, DIM, PS, slots, PAGES, geom.dtype).reshape(buf.shape))
    return pool


def _holds(pool: HostPool, slots) -> bool:
    return all(kvfill.check(buf, p, pool.layout, LAYERS, pool.geom.heads, DIM, PS, slots, PAGES)
               for p, buf in enumerate(pool.buffers))


def _job(backend, attention, layout, op, slots, where, seed):
    job = dict(backend=backend, attention=attention, layout=layout, op=op, slots=slots, layers=LAYERS,
               heads=2 if attention == "mha" else 1, dim=DIM, page_size=PS, pages=PAGES, tokens=TOKENS,
               dtype="bf16", model=MODEL, tp_rank=1 if attention == "mha" else 0, tp_size=2 if attention == "mha" else 1,
               **seed)
    if backend == "mooncake":
        job.update(master=where.master_addr, metadata=where.metadata_url, tag=TAG)
    else:
        job.update(dir=str(where))
    return job


def _harness_client(backend, attention, layout, where):
    if backend == "mooncake":
        from hicache_ref.storage.mooncake import MooncakeStorage

        store = MooncakeStorage(where.metadata_url, where.master_addr)
    else:
        store = FileStorage(str(where))
    tp = dict(tp_rank=1, tp_size=2) if attention == "mha" else {}
    store.use_format(ObjectFormat(scheme="sglang", order=layout, model=MODEL, trailer=False,
                                  tag=TAG if backend == "mooncake" else "", attention=attention, **tp))
    return store


# (backend, attention, upstream host layout = object byte order, the harness pool's layout, namespace)
CASES = [
    ("mooncake", "mla", "page_first", "layer_first", {}),
    ("mooncake", "mla", "layer_first", "page_first", {"extra_key": "lora-a"}),
    ("mooncake", "mha", "page_first", "page_first", {"cache_salt": "s1"}),
    ("mooncake", "mha", "page_head", "layer_first", {}),
    ("file", "mla", "page_first", "page_first_direct", {"extra_key": "lora-a", "cache_salt": ""}),
    ("file", "mha", "layer_first", "page_head", {}),
]


def _where(backend, request, tmp_path):
    if backend == "mooncake":
        return request.getfixturevalue("fresh_mooncake_cluster")
    where = tmp_path / "hicache-file"
    where.mkdir()  # HiCacheFile creates its directory on TP rank 0 only
    return where


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("backend,attention,order,layout,seed", CASES)
def test_upstream_writes_the_harness_reads(sglang_python, backend, attention, order, layout, seed, request, tmp_path):
    where = _where(backend, request, tmp_path)
    peer = Peer(sglang_python, _job(backend, attention, order, "set", [0, 1, 2], where, seed))
    try:
        assert peer.result["ok"] == [True] * 3 and peer.result["present"] == 3
        keys = upstream_keys(page_hashes(TOKENS, PS, prior=namespace_seed(seed.get("extra_key"),
                                                                          seed.get("cache_salt") or None)))
        assert keys == peer.result["keys"]  # upstream's own hash chain, seed included
        store = _harness_client(backend, attention, order, where)
        try:
            dst = _pool(attention, layout, [])
            assert store.exists(keys) == 3
            assert store.get(keys, dst, [4, 2, 0]) == [True] * 3
            assert _holds(dst, [4, 2, 0])
            assert store.stats.unverified == 3 and store.stats.corrupt == 0  # upstream writes no trailer
        finally:
            store.close()
    finally:
        peer.close()


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("backend,attention,order,layout,seed", CASES)
def test_the_harness_writes_upstream_reads(sglang_python, backend, attention, order, layout, seed, request, tmp_path):
    where = _where(backend, request, tmp_path)
    store = _harness_client(backend, attention, order, where)
    try:
        keys = upstream_keys(page_hashes(TOKENS, PS, prior=namespace_seed(seed.get("extra_key"),
                                                                          seed.get("cache_salt") or None)))
        src = _pool(attention, layout, [3, 0, 1])
        assert store.set(keys, src, [3, 0, 1]) == [True] * 3
        written = store.stats.objects_written
        assert store.set(keys, src, [3, 0, 1]) == [True] * 3 and store.stats.objects_written == written  # kept
        peer = Peer(sglang_python, _job(backend, attention, order, "get", [2, 4, 0], where, seed))
        try:
            assert peer.result["keys"] == keys
            assert peer.result["ok"] == [True] * 3 and peer.result["match"]
        finally:
            peer.close()
    finally:
        store.close()

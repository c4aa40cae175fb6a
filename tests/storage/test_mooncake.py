"""The mooncake storage backend on a real loopback Mooncake cluster: bit-identical round trips for
every host layout (staged and zero copy), exists, integrity against objects overwritten through the
raw client, other processes as clients, a master restart, loopback-only listeners and bad specs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from conformance.suites import reference
from conformance.suites.storage.cases import MHA, MLA, PAGE_BYTES, page_bits, poisoned_pool, random_pool
from hicache_ref.storage import mooncake_cluster as cluster_mod
from hicache_ref.storage.registry import open_storage
from tests.proc_state import alive

GEOMS = {"mha": MHA, "mla": MLA}
LAYOUTS = [(a, s, d) for a in ("mha", "mla") for s in reference.layouts_for(a) for d in reference.layouts_for(a)]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER_ADVERTISE = os.environ.get("MC_TCP_BIND_ADDRESS")


pytestmark = pytest.mark.slow  # a real loopback Mooncake cluster


@pytest.fixture(scope="module")
def client(mooncake_cluster):
    s = open_storage(mooncake_cluster.spec + ",segment=64MiB,buffer=8MiB")
    yield s
    s.close()


def _unique(name: str) -> str:
    return f"{name}-{os.getpid()}-{time.monotonic_ns()}"


@pytest.mark.parametrize("register", [False, True], ids=["staged", "registered"])
@pytest.mark.parametrize("attention,src_layout,dst_layout", LAYOUTS)
def test_round_trip_is_bit_identical_across_layouts(client, attention, src_layout, dst_layout, register):
    geom = GEOMS[attention]
    src, dst = random_pool(geom, src_layout, seed=1), poisoned_pool(geom, dst_layout)
    if register:
        client.register_host_pool(src)
        client.register_host_pool(dst)
    a, b = _unique("a"), _unique("b")
    assert client.set([a, b], src, [1, 3]) == [True, True]
    assert client.get([b, a], dst, [0, 2]) == [True, True]
    assert torch.equal(page_bits(dst, 0), page_bits(src, 3))
    assert torch.equal(page_bits(dst, 2), page_bits(src, 1))
    assert bool((page_bits(dst, 1).view(torch.uint8) == reference.POISON_BYTE).all())


@pytest.mark.parametrize("dst_layout", ["layer_first", "page_first"])  # runs in place / staged
def test_a_batch_split_in_two_calls_keeps_order_and_verdicts(client, monkeypatch, dst_layout):
    monkeypatch.setattr(client, "overlap_split", 4)  # 4 pages: set as [1] + [3], get as [3] + [1]
    assert client._spans("set", 4, 1) == [(0, 1), (1, 4)] and client._spans("get", 4, 1) == [(0, 3), (3, 4)]
    src, dst = random_pool(MHA, "page_first_direct", 5), poisoned_pool(MHA, dst_layout)
    client.register_host_pool(dst)
    keys = [_unique(f"split-{i}") for i in range(4)]
    assert client.set(keys[:3], src, [0, 1, 2]) == [True] * 3
    before = client.stats.misses
    assert client.get([keys[2], keys[3], keys[0], keys[1]], dst, [0, 1, 2, 3]) == [True, False, True, True]
    assert client.stats.misses == before + 1
    for page, want in ((0, 2), (2, 0), (3, 1)):
        assert torch.equal(page_bits(dst, page), page_bits(src, want))
    assert bool((page_bits(dst, 1).view(torch.uint8) == reference.POISON_BYTE).all())
    client.unregister_host_pool(dst)


def test_exists_is_the_leading_run_and_misses_count(client):
    pool = random_pool(MLA, "page_first", 3)
    a, b, c, d = (_unique(x) for x in "abcd")
    assert client.set([a, b, d], pool, [0, 1, 2]) == [True, True, True]
    assert client.exists([a, b, c, d]) == 2
    assert client.exists([c, a]) == 0
    before = client.stats.misses
    assert client.get([c], poisoned_pool(MLA, "page_first"), [0]) == [False]
    assert client.stats.misses == before + 1


def _overwrite(client, key, how):
    raw = client._store  # the same cluster through Mooncake's own client, bypassing the harness
    blob = bytearray(raw.get(key))
    if how == "flip":
        blob[7] ^= 0x10
    elif how == "truncate":
        blob = blob[:-1]
    elif how == "extend":
        blob += b"\0"
    assert raw.remove(key, True) == 0
    assert raw.put(key, bytes(blob)) == 0


@pytest.mark.parametrize("how", ["flip", "truncate", "extend"])
@pytest.mark.parametrize("register", [False, True], ids=["staged", "registered"])
@pytest.mark.parametrize("local_reads", [True, False], ids=["in-place", "client-get"])
def test_overwritten_object_is_corrupt_never_kv(client, monkeypatch, how, register, local_reads):
    monkeypatch.setattr(client, "local_reads", local_reads)
    src, dst = random_pool(MHA, "page_first_direct", 4), poisoned_pool(MHA, "page_first")
    if register:
        client.register_host_pool(src)
    key = _unique("k")
    client.set([key], src, [1])
    _overwrite(client, key, how)
    before, in_place = client.stats.corrupt, client.in_place_reads
    assert client.get([key], dst, [1]) == [False]
    assert client.stats.corrupt == before + 1
    assert client.in_place_reads == in_place + local_reads  # the one client's segment holds every object
    assert bool((page_bits(dst, 1).view(torch.uint8) == reference.POISON_BYTE).all())  # staged: untouched
    assert client.exists([key]) == 0  # removed, so a set stores it again
    assert client.set([key], src, [1]) == [True] and client.get([key], dst, [1]) == [True]
    assert torch.equal(page_bits(dst, 1), page_bits(src, 1))


_READER = """
import sys, torch
sys.path.insert(0, {root!r})
from conformance.suites.storage.cases import MHA, poisoned_pool, page_bits
from hicache_ref.storage.registry import open_storage
s = open_storage({spec!r})
dst = poisoned_pool(MHA, "page_head")
ok = s.get([{key!r}], dst, [2])
sys.stdout.write(repr(ok) + " " + str(s.in_place_reads) + " " + page_bits(dst, 2).numpy().tobytes().hex() + "\\n")
s.close()
"""


@pytest.mark.slow  # runs the command or pytest in a child process
def test_another_process_reads_what_this_one_wrote(client, mooncake_cluster):
    src = random_pool(MHA, "page_first", 5)
    key = _unique("x")
    assert client.set([key], src, [0]) == [True]
    code = _READER.format(root=ROOT, spec=mooncake_cluster.spec + ",segment=16MiB,buffer=4MiB", key=key)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    ok, in_place, hexbits = out.stdout.strip().splitlines()[-1].split()
    assert ok == "[True]" and bytes.fromhex(hexbits) == page_bits(src, 0).numpy().tobytes()
    assert in_place == "0"  # the object is in the writer's segment: read through the client


@pytest.mark.parametrize("digest", ["xxh3", "sha256"])  # sha256: copied in place, then checked as before
@pytest.mark.parametrize("layout", ["page_first_direct", "layer_first", "page_first"])  # one run, runs, staged
def test_a_replica_in_this_clients_segment_is_read_in_place(client, monkeypatch, digest, layout):
    monkeypatch.setattr(client, "digest", digest)
    src, dst = random_pool(MLA, "page_first", 7), poisoned_pool(MLA, layout)
    client.register_host_pool(dst)
    try:
        keys = [_unique(f"local-{i}") for i in range(3)]
        assert client.set(keys, src, [0, 1, 2]) == [True] * 3
        in_place, read = client.in_place_reads, client.stats.objects_read
        missing = _unique("missing")
        assert client.get([keys[2], missing, keys[0]], dst, [0, 1, 2]) == [True, False, True]
        assert client.in_place_reads == in_place + 2 and client.stats.objects_read == read + 2
        assert torch.equal(page_bits(dst, 0), page_bits(src, 2)) and torch.equal(page_bits(dst, 2), page_bits(src, 0))
        assert bool((page_bits(dst, 1).view(torch.uint8) == reference.POISON_BYTE).all())
        _overwrite(client, keys[1], "flip")  # damage found in the same pass that copies
        assert client.get([keys[1]], dst, [1]) == [False] and client.in_place_reads == in_place + 3
    finally:
        client.unregister_host_pool(dst)


def test_master_restart_is_survived(fresh_mooncake_cluster):
    cluster = fresh_mooncake_cluster
    s = open_storage(cluster.spec + ",segment=16MiB,buffer=4MiB")
    try:
        src, dst = random_pool(MLA, "page_first", 6), poisoned_pool(MLA, "page_first")
        assert s.set(["before"], src, [0]) == [True]
        cluster.restart_master()  # SIGKILL: the master's metadata is gone
        assert s.get(["before"], dst, [0]) == [False]  # a miss or an error, never stale KV
        deadline = time.monotonic() + 30
        while s.set(["after"], src, [1]) != [True]:
            assert time.monotonic() < deadline, "the client never reconnected to the restarted master"
            time.sleep(0.2)
        assert s.get(["after"], dst, [1]) == [True]
        assert torch.equal(page_bits(dst, 1), page_bits(src, 1))
        assert s.stats.corrupt == 0
    finally:
        s.close()


def test_cluster_listens_on_loopback_only(mooncake_cluster):
    pids = mooncake_cluster.pids()
    assert len(pids) >= 2
    found = {pid: cluster_mod.listeners(pid) for pid in pids}
    ports = {port for socks in found.values() for _, port in socks}
    assert {mooncake_cluster.metadata_port, mooncake_cluster.rpc_port, mooncake_cluster.metrics_port} <= ports
    assert all(addr == "127.0.0.1" for socks in found.values() for addr, _ in socks), found


def test_client_reports_the_listeners_it_opened_beyond_loopback(client):
    # The 0.3.13 client binds its transfer-engine listeners to every interface (README, L3): the
    # harness must not hide that. What it reports is what /proc says this process listens on.
    here = set(cluster_mod.listeners(os.getpid()))
    assert set(client.exposed_listeners) <= here
    assert all(addr not in ("127.0.0.1", "::1") for addr, _ in client.exposed_listeners)
    from importlib import metadata

    if metadata.version("mooncake-transfer-engine-non-cuda").startswith("0.3.13"):
        # the version the README describes: its RPC and TCP data listeners are both on 0.0.0.0/::
        assert len(client.exposed_listeners) >= 2, client.exposed_listeners


def test_client_tells_peers_to_reach_it_over_loopback(client, mooncake_cluster):
    # The listeners cannot be narrowed (above), but where peers connect can: the engine advertises
    # MC_TCP_BIND_ADDRESS, else the host's first LAN address; setup sets it to host=127.0.0.1.
    import json
    import urllib.parse
    import urllib.request

    if USER_ADVERTISE is not None:
        pytest.skip(f"MC_TCP_BIND_ADDRESS={USER_ADVERTISE} is set: the user's value wins")
    name = client._store.get_hostname()
    key = urllib.parse.quote("mooncake/rpc_meta/" + name, safe="")
    with urllib.request.urlopen(f"{mooncake_cluster.metadata_url}?key={key}", timeout=5) as r:
        entry = json.loads(r.read())
    assert client.advertised_address == entry["ip_or_host_name"] == "127.0.0.1", entry
    assert any(port == entry["rpc_port"] for _, port in client.exposed_listeners)  # that port, still on 0.0.0.0
    assert "MC_TCP_BIND_ADDRESS" not in os.environ  # set for setup only, then as it was


def test_listeners_reads_proc_net_tcp():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ("127.0.0.1", port) in cluster_mod.listeners(os.getpid())
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        assert ("0.0.0.0", s.getsockname()[1]) in cluster_mod.listeners(os.getpid())


_OWNER = """
import sys, time
sys.path.insert(0, {root!r})
from hicache_ref.storage.mooncake_cluster import MooncakeCluster
c = MooncakeCluster(log_dir={logs!r}).start()
print(*c.pids(), flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_killed_owner_leaves_no_cluster_behind(tmp_path):
    # SIGKILL runs no cleanup: the servers must go anyway (a Ctrl-C'd conform child is killed so).
    why = cluster_mod.unavailable_reason()
    if why:
        pytest.skip(f"mooncake: {why}")
    owner = subprocess.Popen([sys.executable, "-c", _OWNER.format(root=ROOT, logs=str(tmp_path / "logs"))], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in owner.stdout.readline().split()]
        assert len(pids) >= 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], "cluster servers outlived their owner"


def test_auto_spec_owns_its_cluster():
    why = cluster_mod.unavailable_reason()
    if why:
        pytest.skip(f"mooncake: {why}")
    s = open_storage("mooncake:auto,segment=16MiB,buffer=4MiB")
    cluster = s.cluster
    assert cluster.pids()
    assert s.set(["k"], random_pool(MLA, "layer_first", 7), [0]) == [True]
    s.close()
    assert cluster.pids() == []
    assert not os.path.exists(cluster.log_dir)  # its temporary log folder went with it


def test_auto_options_name_only_the_auto_spec():
    assert cluster_mod.auto_options("mooncake:auto") == []
    assert cluster_mod.auto_options("mooncake:auto, segment=16MiB,") == ["segment=16MiB"]
    assert cluster_mod.auto_options("mooncake:http://127.0.0.1:9/metadata,127.0.0.1:9") is None
    assert cluster_mod.auto_options("file:/tmp/auto") is None


def test_resolve_auto_gives_a_client_spec_of_a_fresh_cluster():
    # what the storage suite opens several clients of (it restarts the master under them)
    assert cluster_mod.resolve_auto("memory:") == ("memory:", None)
    why = cluster_mod.unavailable_reason()
    if why:
        pytest.skip(f"mooncake: {why}")
    spec, cluster = cluster_mod.resolve_auto("mooncake:auto,segment=16MiB,buffer=4MiB")
    try:
        assert spec == cluster.spec + ",segment=16MiB,buffer=4MiB" and cluster.pids()
        s = open_storage(spec)
        assert s.cluster is None  # a client of someone else's cluster does not stop it
        s.close()
        assert cluster.pids()
    finally:
        cluster.stop()
    assert cluster.pids() == [] and not os.path.exists(cluster.log_dir)


def test_a_cluster_that_fails_to_start_keeps_its_logs(monkeypatch):
    why = cluster_mod.unavailable_reason()
    if why:
        pytest.skip(f"mooncake: {why}")
    c = cluster_mod.MooncakeCluster(ready_timeout=0.01)  # no server comes up in 10 ms
    monkeypatch.setattr(cluster_mod, "_accepting", lambda port: False)
    with pytest.raises(RuntimeError, match="did not come up"):
        c.start()
    c.stop()
    try:
        assert os.path.isdir(c.log_dir) and os.listdir(c.log_dir)  # the evidence stays, named in the error
    finally:
        import shutil
        shutil.rmtree(c.log_dir, ignore_errors=True)


@pytest.mark.parametrize("spec,needle", [
    ("mooncake:", "expected mooncake:METADATA_URL,MASTER_ADDR"),
    ("mooncake:http://127.0.0.1:1/metadata", "expected mooncake:METADATA_URL,MASTER_ADDR"),
    ("mooncake:ftp://x/metadata,127.0.0.1:5", "METADATA_URL"),
    ("mooncake:http://127.0.0.1:9/metadata,nohost", "MASTER_ADDR"),
    ("mooncake:http://127.0.0.1:9/metadata,127.0.0.1:99999", "MASTER_ADDR"),
    ("mooncake:http://127.0.0.1:9/metadata,127.0.0.1:9,segment=big", "segment"),
    ("mooncake:auto,colour=1", "'colour=1'"),
])
def test_bad_spec_is_one_line_naming_the_part(spec, needle):
    with pytest.raises(ValueError) as e:
        open_storage(spec)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unreachable_cluster_is_one_line_naming_the_part(mooncake_cluster):
    dead = cluster_mod.free_port()
    with pytest.raises(RuntimeError) as e:
        open_storage(f"mooncake:{mooncake_cluster.metadata_url},127.0.0.1:{dead}")
    assert "MASTER_ADDR: nothing answers at 127.0.0.1" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow  # runs the command or pytest in a child process
def test_missing_wheel_is_one_line_naming_the_spec():
    code = ("import sys; sys.modules['mooncake'] = None; sys.modules['mooncake.store'] = None\n"
            f"sys.path.insert(0, {ROOT!r})\n"
            "from hicache_ref.storage.registry import open_storage\n"
            "try:\n    open_storage('mooncake:http://127.0.0.1:9/metadata,127.0.0.1:9')\n"
            "except RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith("storage spec 'mooncake:http://127.0.0.1:9/metadata,127.0.0.1:9': "
                               "the Mooncake wheel is not usable here")
    assert "libibverbs1 libnuma1" in lines[0]


def test_page_bytes_stored_per_object(client):
    key = _unique("size")
    client.set([key], random_pool(MLA, "page_first", 8), [0])
    assert client._store.get_size(key) == PAGE_BYTES["mla"] + 48

"""Nothing listens beyond loopback (issue 41): the TP group's rendezvous store (spmd, bench spmd),
read from /proc/net/tcp and tcp6 of the very process, and Mooncake's host refused unless loopback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import os, sys
from hicache_ref.tp.launch import free_port
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1")
from hicache_ref.tp.group import Group
g = Group(timeout=20)
inodes = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:["):
        inodes.add(target[8:-1])
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN, one of ours
            print("LISTEN", table, f[1])
g.close()
"""

LOOPBACK = {"0100007F"}  # 127.0.0.1 in /proc/net/tcp's byte order


pytestmark = pytest.mark.slow  # real rank processes and a Mooncake cluster


def test_the_groups_rendezvous_store_listens_on_loopback_only():
    proc = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    listening = [line.split() for line in proc.stdout.splitlines() if line.startswith("LISTEN")]
    assert listening, proc.stdout  # the store does listen
    wide = [(table, addr) for _, table, addr in listening if addr.split(":")[0] not in LOOPBACK]
    assert not wide, f"listening beyond 127.0.0.1: {wide}"


@pytest.mark.parametrize("host", ["999.1.1.1", "0.0.0.0", "10.1.2.3", "example.com"])
def test_mooncake_auto_refuses_a_host_that_is_not_loopback(host):
    from hicache_ref.storage.registry import open_storage

    with pytest.raises(ValueError, match="host"):
        open_storage(f"mooncake:auto,host={host}")


def test_glog_noise_of_a_mooncake_setup_is_dropped_and_the_rest_kept(capfd):
    from hicache_ref.storage.mooncake import _without_glog_noise

    with _without_glog_noise():
        os.write(2, b"WARNING: Logging before InitGoogleLogging() is written to STDERR\n")
        os.write(2, b"E1205 transfer_metadata_plugin.cpp:292] GET x http=404 body: metadata not found\n")
        os.write(2, b"E1205 a real failure\n")
    assert capfd.readouterr().err == "E1205 a real failure\n"


@pytest.mark.slow
def test_a_mooncake_auto_client_prints_no_glog_noise():
    from hicache_ref.storage.mooncake_cluster import unavailable_reason

    if (why := unavailable_reason()) is not None:
        pytest.skip(why)
    proc = subprocess.run([sys.executable, "-c", "from hicache_ref.storage.registry import open_storage\n"
                           "open_storage('mooncake:auto').close()"], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "InitGoogleLogging" not in proc.stderr and "metadata not found" not in proc.stderr, proc.stderr

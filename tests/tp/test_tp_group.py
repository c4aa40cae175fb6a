"""The TP group's own collectives between real processes, on whatever torch this is (2.5.1 to 2.13):
the object collectives carry any picklable object, a group can be made and destroyed again and
again without hanging, and the loopback store picks the TCPStore server that torch can run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hicache_ref.tp.launch import free_port
from hicache_ref.tp.store import libuv_takes_listen_fd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RANK = r"""
import json, os, sys
from hicache_ref.tp.group import Group
rank, ports = int(sys.argv[1]), [int(p) for p in sys.argv[2].split(",")]
seen = []
for i, port in enumerate(ports):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    g = Group(timeout=20)
    mine = {"rank": rank, "i": i, "blob": "x" * (200_000 if rank == 1 else 3), "none": None}
    everyone = g.all_gather_object(mine)
    from_1 = g.broadcast_object(("from", rank, [i] * 1000) if rank == 1 else "ignored", src=1)
    g.agree(None, "nothing")
    g.close()  # right after the last collective: where torch 2.5.1's gloo could deadlock
    seen.append([[(o["rank"], o["i"], len(o["blob"]), o["none"]) for o in everyone],
                 [from_1[0], from_1[1], len(from_1[2])]])
print(json.dumps(seen))
"""


def test_groups_made_and_destroyed_in_a_row_carry_objects_and_never_hang():
    rounds = 12
    ports = ",".join(str(free_port()) for _ in range(rounds))
    env = {**os.environ, "PYTHONPATH": ROOT}
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), ports], env=env, cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-2000:]
    a, b = (json.loads(out.strip().splitlines()[-1]) for out, _ in outs)  # gloo may print above it
    assert a == b
    assert a == [[[[0, i, 3, None], [1, i, 200_000, None]], ["from", 1, 1000]] for i in range(rounds)]


@pytest.mark.parametrize("version, takes", [
    ("2.5.1+cu124", False), ("2.7.1", False), ("2.8.0", True), ("2.9.0+cu128", True), ("2.13.0+cpu", True),
    ("3.0.0a0+git1234", True), ("local", True),
])
def test_the_libuv_store_is_used_only_where_it_takes_a_bound_socket(version, takes):
    assert libuv_takes_listen_fd(version) is takes

"""`hicache bench replay --file-l3-requests N`: what a materialized replay with a file L3 spends on
its L3 against plain file I/O of the same objects in the same run.

The slice is replayed materialized at replay_overhead's geometry and capacity twice, without an L3
and with `file:` in a fresh temporary directory; the L3's cost is the difference of the two walls
less the difference of their stand-in KV fill and check (an L3 hit fills no KV, so the L3 run
fills less). The peer writes as many files as the store wrote objects, of the store's mean object
size, then reads as many as it read (open, write or readinto, close; no fsync, as the store).
Goal: the L3's cost at most 2x the peer's.
"""

from __future__ import annotations

import gc
import os
import time

from conformance.bench.replay_overhead import CAPACITY, GEOMETRY, timed_kv
from conformance.common import scratch
from hicache_ref.sim.run.serial_replay import replay

GOAL_RATIO = 2.0


def plain_io_seconds(directory: str, writes: int, reads: int, size: int) -> tuple[float, float]:
    """Seconds to write `writes` files of `size` bytes into `directory`, then read `reads` of them."""
    data = os.urandom(size)
    buf = bytearray(size)
    t0 = time.perf_counter()
    for i in range(writes):
        with open(os.path.join(directory, f"{i}.bin"), "wb") as f:
            f.write(data)
    t1 = time.perf_counter()
    for i in range(reads):
        with open(os.path.join(directory, f"{i % max(writes, 1)}.bin"), "rb") as f:
            f.readinto(buf)
    return t1 - t0, time.perf_counter() - t1


def measure(spec, requests) -> dict:
    base = spec.replace(**GEOMETRY, **CAPACITY, materialize=True)
    walls, kv, figs = [], [], []
    with scratch.directory("bench-l3-") as store:
        for s in (base, base.replace(l3=f"file:{store}")):
            gc.collect()
            spent = [0.0]
            with timed_kv(spent):
                figs.append(replay(s, requests))
            walls.append(figs[-1]["wall_seconds"])
            kv.append(spent[0])
    fig = figs[1]
    if figs[0]["kv_mismatch_tokens"] or fig["kv_mismatch_tokens"]:
        raise RuntimeError("bench replay: a materialized run read KV that does not match what was written")
    objects = fig["l3_pages_written"] + fig["l3_pages_read"]
    nbytes = fig["l3_bytes_written"] + fig["l3_bytes_read"]
    size = nbytes // objects if objects else 0
    with scratch.directory("bench-peer-") as peer_dir:
        w, r = plain_io_seconds(peer_dir, fig["l3_pages_written"], fig["l3_pages_read"], size)
    l3 = (walls[1] - kv[1]) - (walls[0] - kv[0])
    peer = w + r
    return {
        "geometry": GEOMETRY,
        "capacity": CAPACITY,
        "requests": fig["requests"],
        "l3_pages_written": fig["l3_pages_written"],
        "l3_pages_read": fig["l3_pages_read"],
        "l3_bytes": nbytes,
        "wall_seconds_without_l3": walls[0],
        "wall_seconds_with_l3": walls[1],
        "kv_fill_and_check_seconds": kv,
        "l3_seconds": l3,
        "peer_write_seconds": w,
        "peer_read_seconds": r,
        "l3_over_peer": l3 / peer if peer > 0 else None,
        "goal_ratio": GOAL_RATIO,
    }


def line(r: dict) -> str:
    ratio = r["l3_over_peer"]
    return (
        f"file L3 ({r['requests']:,} requests, {r['l3_pages_written']:,} objects written, {r['l3_pages_read']:,} "
        f"read, {r['l3_bytes'] / 2**20:.1f} MiB): replay with L3 {r['wall_seconds_with_l3']:.2f} s, without "
        f"{r['wall_seconds_without_l3']:.2f} s, L3 share less KV fill {r['l3_seconds']:.2f} s; plain file I/O of "
        f"the same objects {r['peer_write_seconds']:.2f} s write + {r['peer_read_seconds']:.2f} s read = "
        + (f"{ratio:.2f}x the peer" if ratio is not None else "n/a (no L3 I/O)")
        + f" (goal <= {GOAL_RATIO:g}x)"
    )

"""`hicache bench replay`'s per-page overhead: what a materialized replay spends per page it moves
beyond the memcpy of the page's bytes.

The same slice is replayed twice on a small materialized geometry (where the bytes are real and the
run is short): materialized, and priced (no bytes, the same decisions). The difference, less the
stand-in KV fill and bit-for-bit check (timed around KVWriter in the materialized run) and less a
memcpy of the moved bytes by this host's copy engine, divided by the pages moved, is the figure.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time

import numpy as np

from hal.transfer import segcopy
from hicache_ref.core.synthetic_kv import KVWriter
from hicache_ref.sim.run.serial_replay import replay

GEOMETRY = {"layers": 2, "kv_dim": 64}  # 256 bytes a token: real bytes, seconds per run
CAPACITY = {"l1_tokens": 32768, "l2_tokens": 262144}  # small enough that pages move both ways
GOAL_US = 10.0


@contextlib.contextmanager
def timed_kv(seconds: list[float]):
    """Adds the wall seconds spent in KVWriter.write / mismatches (stand-in compute and the
    check, not transfers) to seconds[0] while inside."""
    originals = {name: getattr(KVWriter, name) for name in ("write", "mismatches")}

    def timed(fn):
        def run(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(self, *args, **kwargs)
            finally:
                seconds[0] += time.perf_counter() - t0
        return run

    try:
        for name, fn in originals.items():
            setattr(KVWriter, name, timed(fn))
        yield
    finally:
        for name, fn in originals.items():
            setattr(KVWriter, name, fn)


def memcpy_seconds(nbytes: int, repeat: int = 5) -> float:
    """Median seconds this host's copy engine takes to copy `nbytes` (in 64 MiB pieces)."""
    piece = min(max(nbytes, 1), 64 << 20)
    src, dst = np.ones(piece, np.uint8), np.zeros(piece, np.uint8)
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        left = nbytes
        while left > 0:
            n = min(left, piece)
            if segcopy.engine() == "native":
                segcopy.copy_segments(np.array([src.ctypes.data], np.uint64), np.array([dst.ctypes.data], np.uint64),
                                      np.array([n], np.uint64))
            else:
                dst[:n] = src[:n]
            left -= n
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def measure(spec, requests, repeat: int = 1) -> dict:
    """The per-page overhead of a materialized replay of `requests` on `spec`'s policies (at
    GEOMETRY and CAPACITY), medians of `repeat` pairs of runs."""
    base = spec.replace(**GEOMETRY, **CAPACITY)
    mat_spec, priced_spec = base.replace(materialize=True), base.replace(materialize=False)
    mat, priced, kv = [], [], []
    fig = None
    for _ in range(repeat):
        gc.collect()
        fig_priced = replay(priced_spec, requests)
        priced.append(fig_priced["wall_seconds"])
        gc.collect()
        spent = [0.0]
        with timed_kv(spent):
            fig = replay(mat_spec, requests)
        mat.append(fig["wall_seconds"])
        kv.append(spent[0])
        if fig["d2h_tokens"] != fig_priced["d2h_tokens"] or fig["h2d_tokens"] != fig_priced["h2d_tokens"]:
            raise RuntimeError("bench replay: the materialized and priced runs moved different tokens")
    moved = fig["d2h_bytes"] + fig["h2d_bytes"]
    pages = (fig["d2h_tokens"] + fig["h2d_tokens"]) // spec.page_size
    copy_s = memcpy_seconds(moved)
    m, p, k = statistics.median(mat), statistics.median(priced), statistics.median(kv)
    beyond = max(0.0, m - p - k - copy_s)
    return {"geometry": GEOMETRY, "capacity": CAPACITY, "requests": fig["requests"], "pages_moved": pages,
            "bytes_moved": moved, "materialized_wall_seconds": m, "priced_wall_seconds": p,
            "kv_fill_and_check_seconds": k, "memcpy_seconds": copy_s,
            "overhead_us_per_page": beyond / pages * 1e6 if pages else None,
            "with_kv_fill_us_per_page": (m - p - copy_s) / pages * 1e6 if pages else None,
            "goal_us_per_page": GOAL_US, "kv_mismatch_tokens": fig["kv_mismatch_tokens"]}


def line(r: dict) -> str:
    """The figure as one line of bench replay's text output."""
    per = r["overhead_us_per_page"]
    return (f"per-page overhead (materialized {r['geometry']['layers']} layers x {r['geometry']['kv_dim']}, "
            f"{r['requests']:,} requests, {r['pages_moved']:,} pages / {r['bytes_moved'] / 2**20:.1f} MiB moved): "
            f"materialized {r['materialized_wall_seconds']:.2f} s - priced {r['priced_wall_seconds']:.2f} s - KV fill "
            f"and check {r['kv_fill_and_check_seconds']:.2f} s - memcpy {r['memcpy_seconds'] * 1e3:.1f} ms = "
            + (f"{per:.1f} us a page" if per is not None else "n/a (no page moved)")
            + f" (goal <= {GOAL_US:g}); with the KV fill {r['with_kv_fill_us_per_page'] or 0:.1f} us a page")

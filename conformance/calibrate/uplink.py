"""The shared uplink, measured: L2 write-back (D2H) and L3 puts timed alone, then both at once.

On a P800 node the two cross one path out of the card (the PCIe uplink the NIC sits behind); on
a CPU box, memory bandwidth. Each is timed alone, then both are started together (two threads
released by one barrier) and timed to the later end: uplink_gbps = (D2H bytes + L3 bytes) / the
seconds both took, the rate the path gave the two together, which is what
hicache_ref.sim.price.mechanisms.shared_uplink_seconds prices with. When both at once take no longer
than the longer one alone (within CONTENDED), they did not contend: the rate is then a lower
bound of the path's, and the source says so.
"""

from __future__ import annotations

import secrets
import statistics
import threading
import time

import numpy as np

from conformance.calibrate.probe import Buffers, run_once

NBYTES = 64 << 20  # each side moves this much per run
OBJECTS = 16  # the L3 side: this many equal objects in one batch
CONTENDED = 1.10  # both at once over the longer alone: above this, the two shared the path


def _median(fn, repeat: int) -> float:
    fn()  # warm-up: first touch, connections
    return statistics.median(fn() for _ in range(repeat))


def measure(backend, store, nbytes: int = NBYTES, objects: int = OBJECTS, repeat: int = 5) -> dict:
    """Seconds of one D2H of `nbytes` on `backend`, one put of `nbytes` in `objects` objects to
    `store` (its backend hook: the bytes it moves), and both at once; the rate of the two together."""
    buffers = Buffers(backend, nbytes)
    plans = buffers.plans("d2h", 1, 1)
    stream = backend.new_stream()
    size = nbytes // objects
    tag = secrets.token_hex(4)
    items = [(f"calibrate-uplink-{tag}-{i}", [np.full((1, size), i & 0xFF, dtype=np.uint8)]) for i in range(objects)]

    def d2h() -> float:
        return run_once(backend, stream, plans)[0]

    def put() -> float:
        t0 = time.perf_counter()
        if not all(store._write(items)):
            raise RuntimeError(f"{store.name}: a put of {objects} objects failed")
        return time.perf_counter() - t0

    def both() -> float:
        gate, ends, errors = threading.Barrier(3), [], []

        def side(fn):
            gate.wait()
            try:
                fn()
            except BaseException as e:  # raised below, in the caller's thread
                errors.append(e)
            ends.append(time.perf_counter())

        threads = [threading.Thread(target=side, args=(fn,), daemon=True) for fn in (d2h, put)]
        for t in threads:
            t.start()
        gate.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return max(ends) - t0

    try:
        alone_d2h, alone_l3 = _median(d2h, repeat), _median(put, repeat)
        together = _median(both, repeat)
    finally:
        stream.close()
        for key, _ in items:
            store._discard(key)
        del buffers
    moved = nbytes + objects * size
    return dict(backend=backend.name, storage=store.name, d2h_bytes=nbytes, l3_bytes=objects * size, objects=objects,
                repeat=repeat, d2h_seconds=alone_d2h, l3_seconds=alone_l3, both_seconds=together,
                contention=together / max(alone_d2h, alone_l3),
                contended=together > CONTENDED * max(alone_d2h, alone_l3),
                uplink_gbps=moved / together / 1e9)


def source(cal: dict, who: str) -> str:
    """How uplink_gbps was measured, for the profile's source line."""
    how = (f"(D2H {cal['d2h_bytes'] >> 20} MiB on {cal['backend']} + L3 put {cal['l3_bytes'] >> 20} MiB in "
           f"{cal['objects']} objects to {cal['storage']}) / {cal['both_seconds']:.4f} s both at once, medians of "
           f"{cal['repeat']} (alone: D2H {cal['d2h_seconds']:.4f} s, L3 {cal['l3_seconds']:.4f} s)")
    if not cal["contended"]:
        how += "; the two did not contend here, so this is a lower bound of the path's rate"
    return f"{who}: {how}"

"""`hicache calibrate --storage SPEC`: measure an L3 store's link and write it as the profile's l3_link.

Batches of objects are put and got through the store's backend hooks (the bytes the store moves,
without the integrity pass above them), over object sizes and batch lengths, each point the median
of repeats. One least-squares fit per direction, seconds = per_batch + objects x per_object + bytes
/ rate, gives the rate and the two latencies (hicache_ref.sim.price.mechanisms.l3_seconds prices with
them). The shared uplink is measured beside it (conformance.calibrate.uplink) when a backend is
given: D2H on that backend and puts to the store, alone and at once.
"""

from __future__ import annotations

import secrets
import statistics
import time
from pathlib import Path

import numpy as np
import yaml

from hardware_profiles import load_profile

OBJECT_SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20)
BATCHES = (1, 4, 16)
REPEAT = 5
MEASURED = ("read_gbps", "write_gbps", "per_batch_us", "per_object_us")


def _time(fn, repeat: int) -> float:
    fn()  # warm-up: first-touch, connections
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def measure(store, sizes=OBJECT_SIZES, batches=BATCHES, repeat: int = REPEAT) -> dict:
    """Put/get timings of `store` (an open hicache_ref.storage backend) and the fitted link. A store
    bounded below the largest batch is refused before anything is written (ValueError naming it);
    the objects written are removed whatever happens."""
    tag = secrets.token_hex(4)
    largest = max(sizes) * max(batches)
    bound = getattr(store, "max_bytes", None)
    if isinstance(bound, int) and bound < largest:
        raise ValueError(f"{store.name}: max_bytes {bound:,} holds less than the largest batch calibration writes "
                         f"({max(batches)} objects of {max(sizes) >> 10} KiB = {largest:,} bytes); give more")
    points = {"write": [], "read": []}
    for size in sizes:
        for n in batches:
            keys = [f"calibrate-l3-{tag}-{size}-{n}-{i}" for i in range(n)]
            src = [(k, [np.full((1, size), i & 0xFF, dtype=np.uint8)]) for i, k in enumerate(keys)]
            dst = [(k, [np.empty((1, size), dtype=np.uint8)]) for k in keys]

            def put(items=src):
                if not all(store._write(items)):
                    raise ValueError(f"{store.name}: a put of {len(items)} objects failed{_why(store)}")

            def get(items=dst):
                if any(s is None or s < 0 for s in store._read(items)):
                    raise ValueError(f"{store.name}: a get of {len(items)} objects missed{_why(store)}")

            try:
                points["write"].append((n, n * size, _time(put, repeat)))
                points["read"].append((n, n * size, _time(get, repeat)))
            finally:
                for k in keys:
                    store._discard(k)
    fits = {d: _fit(p) for d, p in points.items()}
    link = {"read_gbps": fits["read"]["gbps"], "write_gbps": fits["write"]["gbps"],
            "per_batch_us": (fits["read"]["per_batch_us"] + fits["write"]["per_batch_us"]) / 2,
            "per_object_us": (fits["read"]["per_object_us"] + fits["write"]["per_object_us"]) / 2}
    return dict(storage=store.name, sizes=list(sizes), batches=list(batches), repeat=repeat,
                points={d: [dict(objects=n, bytes=b, seconds=s) for n, b, s in p] for d, p in points.items()},
                fits=fits, l3_link=link)


def _why(store) -> str:
    why = getattr(store, "last_error", None)
    return f" ({why})" if why else ""


def _fit(points) -> dict:
    """seconds = a + b objects + c bytes by least squares; negative latencies written 0 (noise)."""
    x = np.array([[1.0, n, b] for n, b, _ in points])
    y = np.array([s for _, _, s in points])
    (a, b, c), *_ = np.linalg.lstsq(x, y, rcond=None)
    pred = x @ np.array([a, b, c])
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
    gbps = 1.0 / (c * 1e9) if c > 0 else None
    return dict(per_batch_us=max(0.0, a * 1e6), per_object_us=max(0.0, b * 1e6), gbps=gbps, r2=r2,
                raw=dict(a=float(a), b=float(b), c=float(c)))


def profile_yaml(base, cal: dict, who: str) -> str:
    """YAML of `base` with its l3_link section's measured keys replaced; uplink_gbps too where
    cal["uplink"] measured it, else kept."""
    data = yaml.safe_load(Path(str(base.path)).read_text(encoding="utf-8"))
    section = dict(data.get("l3_link") or {})
    how = (f"least squares of put/get seconds = per_batch + objects x per_object + bytes / rate over "
           f"{'/'.join(str(s >> 10) for s in cal['sizes'])} KiB objects in batches of "
           f"{'/'.join(map(str, cal['batches']))}, medians of {cal['repeat']} (storage {cal['storage']}; "
           f"R^2 read {cal['fits']['read']['r2']:.3f}, write {cal['fits']['write']['r2']:.3f})")
    for key in MEASURED:
        value = cal["l3_link"][key]
        section[key] = "unknown" if value is None else {"value": round(float(value), 6), "source": f"{who}: {how}"}
    if cal.get("uplink") is not None:
        from conformance.calibrate import uplink

        up = cal["uplink"]
        section["uplink_gbps"] = {"value": round(float(up["uplink_gbps"]), 6), "source": uplink.source(up, who)}
    if "uplink_gbps" not in section:
        section["uplink_gbps"] = "unknown"
    data["l3_link"] = section
    return f"# Calibrated from profile {base.name}: l3_link measured ({who}).\n" + \
        yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def write(out: Path, base, cal: dict, who: str) -> None:
    """Write OUT (the profile with its measured l3_link) and load it back (a file that cannot load is a bug)."""
    from conformance.common.safe_write import check_target, write_text

    out = check_target(out)
    write_text(out, profile_yaml(base, cal, who))  # atomic; never through a link, FIFO or device
    load_profile(out)

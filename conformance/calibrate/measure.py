"""What `hicache calibrate` measures on the machine it runs on, and the least-squares fits.

It measures bandwidth, per-segment and per-launch cost, registration seconds, and the host costs
of translation entries and remote NUMA memory (conformance.calibrate.host_costs).
The link figures are the medians at the largest size and the fitted slopes.
`poor_fits` names the fits behind link figures whose slope is not known well enough (fit_quality).
Each measurement and fit: docs/architecture.md, "Design notes".
"""

from __future__ import annotations

import statistics

from conformance.calibrate import fit_quality, host_costs
from conformance.calibrate.probe import Buffers, paired, paired_ratio, probe
from hicache_ref.sim.price.cost import LineFit, fit_line

MIB = 1 << 20
SIZES = (1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)
SIZE_SEGMENTS = 1  # one contiguous transfer per size (nvbandwidth-style), like the memcpy peer
SEGMENT_BYTES = 16 * MIB
SEGMENT_COUNTS = (1, 256, 1024, 4096, 16384)  # down to 1 KiB segments, where a fixed cost shows
LAUNCH_COUNTS = (1, 4, 16, 64, 256)
REGISTER_SIZES = (32 * MIB, 64 * MIB, 128 * MIB)
# The link figures that are fitted slopes, and where their fit is in calibrate()'s result.
FITTED = (("per_segment_us", "per-segment fit", ("segments", "fit")),
          ("per_launch_us", "per-launch fit", ("launches", "fit")),
          ("registration_s_per_gib", "registration fit (THP)", ("registration", "fit_thp")))


def _fit_json(fit: LineFit | None) -> dict | None:
    return None if fit is None else fit.to_json()


def bandwidth(backend, sizes, repeat: int) -> tuple[dict, dict]:
    """({direction: [per-size rows]}, {direction: fit of seconds on bytes})."""
    rows: dict = {"h2d": [], "d2h": []}
    for nbytes in sizes:
        buffers = Buffers(backend, nbytes)
        for direction in rows:
            t, peer = paired(backend, buffers, direction, repeat, SIZE_SEGMENTS)
            rows[direction].append({"bytes": nbytes, "median_s": t.median_s, "gbps": t.gbps,
                                    "gbps_stderr": t.gbps_stderr, "spread": t.spread,
                                    "best_gbps": t.best_gbps, "modeled_gbps": t.modeled_gbps,
                                    "memcpy_gbps": peer.gbps, "memcpy_best_gbps": peer.best_gbps,
                                    "memcpy_spread": peer.spread, "ratio_vs_memcpy": paired_ratio(t, peer)})
        del buffers
    fits = {}
    for direction, rs in rows.items():
        fits[direction] = fit_line([r["bytes"] for r in rs], [r["median_s"] for r in rs]) if len(rs) > 1 else None
    return rows, fits


def counts(backend, direction: str, *, what: str, counts_, repeat: int, nbytes: int = SEGMENT_BYTES) -> dict:
    """Median seconds of the same bytes in k segments (what='segments') or k submissions ('launches')."""
    buffers = Buffers(backend, nbytes)
    points = []
    for k in counts_:
        s = probe(backend, buffers, direction, segments=k, launches=k if what == "launches" else 1, repeat=repeat)
        points.append({what: k, "median_s": s.median_s, "spread": s.spread, "modeled_s": s.modeled_s})
    fit = fit_line([p[what] for p in points], [p["median_s"] for p in points])
    return {"direction": direction, "bytes": nbytes, "points": points, "fit": fit.to_json()}


def registration(backend, sizes, repeat: int) -> dict:
    """Seconds to register host buffers with `backend`, 4 KB pages vs THP; {'error'} when it cannot."""
    from hal.memory.host import allocate_host

    out: dict = {}
    for kind, huge in (("4k", False), ("thp", True)):
        pts = []
        for nbytes in sizes:
            secs = []
            for _ in range(repeat):
                try:
                    with allocate_host(nbytes, huge_pages=huge, backend=backend) as buf:
                        secs.append(buf.report()["register_seconds"])
                except OSError as e:
                    return {"error": f"registering {nbytes} bytes failed: {e}"}
            pts.append({"bytes": nbytes, "seconds": statistics.median(secs)})
        fit = fit_line([p["bytes"] / 2**30 for p in pts], [p["seconds"] for p in pts])
        out[kind] = pts
        out[f"fit_{kind}"] = fit.to_json()
        out[f"{kind}_s_per_gib"] = max(0.0, fit.b)
    return out


def fit_judgements(cal: dict) -> dict[str, dict | None]:
    """fit_quality.judge of the fit behind each fitted link figure (None where it was not measured)."""
    out = {}
    for key, _, (block, name) in FITTED:
        fit = cal.get(block, {}).get(name)
        out[key] = None if not isinstance(fit, dict) else fit_quality.judge(fit["xs"], fit["ys"])
    return out


def poor_fits(cal: dict) -> list[tuple[str, str, str]]:
    """(link key, what, why) of each fitted figure whose slope is not known well enough, in FITTED order."""
    what = {key: label for key, label, _ in FITTED}
    return [(key, what[key], j["why"]) for key, j in fit_judgements(cal).items() if j is not None and not j["accepted"]]


def calibrate(backend, *, sizes=SIZES, repeat: int = 5, translation_sizes=None, progress=None) -> dict:
    """Every measurement above on `backend`, and the host costs (conformance.calibrate.host_costs);
    the figures for the profile under 'link' and 'host_costs' (each: value, measured, written, why:
    a value is None where it was not measured or its fit was refused)."""

    say = progress or (lambda _msg: None)
    say("bandwidth over sizes")
    rows, fits = bandwidth(backend, sizes, repeat)
    say("per-segment cost")
    seg = counts(backend, "h2d", what="segments", counts_=SEGMENT_COUNTS, repeat=repeat)
    say("per-launch cost")
    launch = counts(backend, "h2d", what="launches", counts_=LAUNCH_COUNTS, repeat=repeat)
    say("registration")
    reg = registration(backend, REGISTER_SIZES, max(1, repeat // 2))
    say("translation entries")
    trans = host_costs.translation(backend, translation_sizes or host_costs.TRANSLATION_SIZES,
                                   rounds=max(9, 5 * repeat), progress=say)
    say("NUMA placement")
    numa = host_costs.numa(backend, rounds=max(9, 2 * repeat))
    largest = {d: rs[-1] for d, rs in rows.items()}
    link = {
        "h2d_gbps": largest["h2d"]["gbps"],
        "d2h_gbps": largest["d2h"]["gbps"],
        # a slope below zero is noise around a cost too small to see: recorded as 0
        "per_segment_us": max(0.0, seg["fit"]["b"]) * 1e6,
        "per_launch_us": max(0.0, launch["fit"]["b"]) * 1e6,
        "registration_s_per_gib": reg.get("thp_s_per_gib"),
    }
    return {
        "bandwidth": rows, "bandwidth_fits": {d: _fit_json(f) for d, f in fits.items()},
        "memcpy_gbps": largest["h2d"]["memcpy_gbps"], "segments": seg, "launches": launch,
        "registration": reg, "link": link, "repeat": repeat, "sizes": list(sizes),
        "translation": trans, "numa": numa,
        "host_costs": {
            "translation_slowdown_per_mentry": {
                "value": trans.get("value"), "measured": "error" not in trans,
                "written": bool(trans.get("accepted")), "why": trans.get("error") or trans.get("why", "")},
            "registered_slowdown_per_gb": {
                "value": (trans.get("registered") or {}).get("value"), "measured": "error" not in trans,
                "written": bool((trans.get("registered") or {}).get("accepted")),
                "why": trans.get("error") or (trans.get("registered") or {}).get("why", "")},
            "numa_remote_bw_factor": {
                "value": numa.get("factor"), "measured": numa["measured"], "written": numa["measured"],
                "why": numa.get("why", "")},
        },
    }

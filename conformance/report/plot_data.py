"""The numbers behind report.html's plots, gathered once per report (and kept in report.json):
the all-hit fit and prefill line, bandwidth over sizes per direction on the backend, segments
and modeled time of the seed transfer per layout, and a calibration's curves when one exists.
"""

from __future__ import annotations

import json
from pathlib import Path

from hicache_ref.sim.price import cost
from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.sim.price.prefill_model import compute_of

SWEEP_BYTES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)
SWEEP_REPEAT = 5


def allhit_curve(profile) -> dict | None:
    """The modeled all-hit points of the seed geometry, their fit, prefill(n) and break-even;
    None when the profile cannot price them (hicache_ref.sim.price.cost)."""
    if profile is None:
        return None
    from hal.transfer.seed import SEED_GEOMETRY as g

    compute = compute_of(profile)
    try:
        fit = cost.allhit_fit(profile, g.layers, g.token_bytes)
        be = cost.break_even_tokens(profile, g.layers, g.token_bytes)
    except mech.Unpriced:
        return None
    grid = [256, 1024, 2048, 3000, 4096, 8192, 16384, 32768]
    prefill = [[n, compute.prefill_seconds(n)] for n in grid] if compute is not None else None
    return {"fit": fit.to_json(), "break_even_tokens": be, "prefill": prefill,
            "floor_s": compute.prefill_fixed_s, "l2_path_s": compute.l2_path_fixed_s}


def bandwidth_sweep(backend) -> dict | None:
    """{direction: [{bytes, gbps, modeled_gbps, memcpy_gbps}]} measured on `backend` now."""
    if backend is None:
        return None
    from conformance.calibrate.probe import Buffers, memcpy_sample, probe

    out: dict = {"h2d": [], "d2h": []}
    for nbytes in SWEEP_BYTES:
        buffers = Buffers(backend, nbytes)
        peer = memcpy_sample(nbytes, SWEEP_REPEAT)
        for direction in out:
            s = probe(backend, buffers, direction, segments=1, repeat=SWEEP_REPEAT)
            out[direction].append({"bytes": nbytes, "gbps": s.gbps, "modeled_gbps": s.modeled_gbps,
                                   "spread": s.spread, "memcpy_gbps": peer.gbps})
    return out


def layouts(profile) -> list[dict]:
    """Segments and modeled seconds (count backend, the profile's link model) of the seed transfer."""
    from hal.backend import get_backend
    from hal.transfer.layouts import MLA_LAYOUTS
    from hal.transfer.seed import seed_plan

    priced = get_backend("count", profile) if profile is not None else None
    rows = []
    for layout in MLA_LAYOUTS:
        plan = seed_plan(layout)
        rows.append({"layout": layout, "segments": plan.num_segments, "bytes": plan.nbytes,
                     "modeled_seconds": None if priced is None else priced.model_seconds(plan)})
    return rows


def calibration_path(profile) -> Path | None:
    """`hicache calibrate --out X.yaml` keeps its samples in X.calibration.json beside it."""
    if profile is None:
        return None
    path = Path(str(profile.path))
    return path.with_name(path.stem + ".calibration.json")


def calibration(profile) -> dict | None:
    path = calibration_path(profile)
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def uplink_sharing(profile) -> dict | None:
    """Per-card D2H bandwidth while the cards of one uplink back up at once (the IDO effect,
    hicache_ref.sim.price.mechanisms.dma_gbps); None without a topology or the figures it needs."""
    if profile is None or profile.topology is None:
        return None
    topo = profile.topology
    writers = topo.devices_per_switch or 1
    try:
        shared, ido_on = (mech.dma_gbps(profile, "d2h", mech.HostState(writers_per_uplink=writers, ido=ido))
                          for ido in (topo.ido == "on", True))
        shared, ido_on = float(shared), float(ido_on)
    except mech.Unpriced:
        return None
    return {"devices_per_switch": topo.devices_per_switch, "ido": topo.ido, "d2h_gbps": profile.link.d2h_gbps,
            "shared_d2h_gbps": shared, "ido_on_d2h_gbps": ido_on,
            "factor_source": profile.sources.get("host_costs.ido_shared_d2h_factor")}


def gather(profile, backend) -> dict:
    return {"allhit": allhit_curve(profile), "bandwidth": bandwidth_sweep(backend),
            "layouts": layouts(profile), "calibration": calibration(profile), "uplink": uplink_sharing(profile)}

"""Every derived parameter of a profile, recomputed from its readings, with the arithmetic shown.

Each parameter comes from the readings that constrain it (`derives` in the readings file): solved
exactly where one reading fixes one parameter, least squares (relative residuals) where several
do. Parameters depend on each other (the D2H time in a first request depends on the translation
and NUMA factors fitted from the workload), so the steps repeat until nothing moves.
tests/test_derive.py checks the profile's values against this.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hal.transfer.seed import SEED_GEOMETRY
from hicache_ref.sim import cost
from hicache_ref.sim import mechanisms as mech
from hicache_ref.sim.readings import chunk_traffic, first_request, seed_host_state, workload_change_pct

ITERATIONS = 60


def with_values(profile, **values):
    """`profile` with `section.key` values replaced (e.g. {"link.per_segment_us": 120.0})."""
    sections = {}
    for key, v in values.items():
        sec, name = key.split(".")
        sections.setdefault(sec, {})[name] = v
    return dataclasses.replace(profile, **{sec: dataclasses.replace(getattr(profile, sec), **kw)
                                           for sec, kw in sections.items()})


def _golden(f, lo: float, hi: float, steps: int = 80) -> float:
    """The minimum of a unimodal f on [lo, hi]."""
    g = (5 ** 0.5 - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def _relative_sq(pairs) -> float:
    return float(sum(((m - s) / s) ** 2 if s else m * m for m, s in pairs))


def derive(profile, readings, runs) -> tuple[object, dict[str, str]]:
    """(profile with every derived parameter set, {key: arithmetic}) from `readings` on `runs`."""
    R, sc, st = readings.reading, readings.scenario, readings.states
    g = SEED_GEOMETRY
    n1, chunk = sc["first_request_tokens"], sc["chunk_tokens"]
    p, notes = profile, {}
    for _ in range(ITERATIONS):
        before = _values(p)
        # floor and bandwidth: the all-hit state's effective H2D is the measured one
        floor = R("deployment_floor").value / 1e3
        hs = seed_host_state(st[R("h2d_bandwidth").state], sc, sc["l2_gb_per_card"], p)
        slow = mech.dma_gbps(with_values(p, **{"link.h2d_gbps": 1.0}), "h2d", hs)  # factors alone
        h2d = R("h2d_bandwidth").value / slow
        p = with_values(p, **{"compute.prefill_fixed_s": floor, "link.h2d_gbps": h2d})
        notes["compute.prefill_fixed_s"] = f"the all-hit intercept's deployment floor: {floor * 1e3:g} ms"
        notes["link.h2d_gbps"] = (f"{R('h2d_bandwidth').value:g} GB/s measured / {slow:.6f} (translation and NUMA "
                                  f"factors of state {R('h2d_bandwidth').state}) = {h2d:.4f} GB/s")
        # all-hit line: intercept - floor - one launch per layer = L2 path; slope - bytes/bandwidth = items
        launch = p.link.per_launch_us * 1e-6
        path = R("allhit_intercept").value / 1e3 - floor - g.layers * launch
        per_token_bw = g.token_bytes / (R("h2d_bandwidth").value * 1e9)
        item_us = (R("allhit_slope").value * 1e-6 - per_token_bw) / g.layers * 1e6
        p = with_values(p, **{"compute.l2_path_fixed_s": path, "link.kernel_per_item_us": item_us})
        notes["compute.l2_path_fixed_s"] = (f"{R('allhit_intercept').value:g} ms - {floor * 1e3:g} ms floor - "
                                            f"{g.layers} launches x {p.link.per_launch_us:g} us = {path * 1e3:.4f} ms")
        notes["link.kernel_per_item_us"] = (f"({R('allhit_slope').value:g} us/token - {g.token_bytes:,} B / "
                                            f"{R('h2d_bandwidth').value:g} GB/s = {per_token_bw * 1e6:.4f} us) / "
                                            f"{g.layers} layers = {item_us:.6f} us per token-layer item")
        # prefill: break-even (prefill = all-hit there) and the cold first request fix a and b
        be = R("break_even").value
        allhit_be = cost.allhit_seconds(p, int(be), g.layers, g.token_bytes, seed_host_state(
            st[R("break_even").state], sc, sc["l2_gb_per_card"], p))
        t1 = R("first_request_off").value
        a, b = np.linalg.solve([[be, be * be], [n1, n1 * n1]], [allhit_be - floor, t1 - floor])
        p = with_values(p, **{"compute.prefill_per_token_s": float(a), "compute.prefill_per_token_pair_s": float(b)})
        notes["compute.prefill_per_token_s"] = notes["compute.prefill_per_token_pair_s"] = (
            f"solving floor + a n + b n^2 = all-hit({be:g}) = {allhit_be:.6f} s at n = {be:g} and = {t1:g} s at the "
            f"first request's n = {n1:,}: a = {a * 1e6:.6f} us/token, b = {b * 1e12:.6f} ps/token pair")
        # per segment: one chunk's inline submission and the first build's first request (least squares)
        one = chunk_traffic("page_first_direct", chunk)
        chunks = -(-n1 // chunk)
        inline = st[R("first_request_first_build").state]
        extra = R("first_request_first_build").value - t1

        def seg_error(s_us, p=p):
            q = with_values(p, **{"link.per_segment_us": s_us})
            return _relative_sq([(mech.submission_seconds(q, one), R("d2h_submission_inline").value),
                                 (first_request(q, inline, sc) - t1, extra)])
        s_us = _golden(seg_error, 0.0, 10_000.0)
        p = with_values(p, **{"link.per_segment_us": s_us})
        notes["link.per_segment_us"] = (
            f"least squares (relative) over one chunk's inline submission ({one.segments:,} segments = "
            f"{R('d2h_submission_inline').value:g} s) and the first build's extra first-request time ({chunks} chunks "
            f"x {one.segments:,} segments = {R('first_request_first_build').value:g} - {t1:g} = {extra:.2f} s): "
            f"{s_us:.4f} us per segment")
        # contention and interference: the two daemon-thread first requests, 2 equations in 2 unknowns
        rows, rhs = [], []
        for name in ("first_request_daemon", "first_request_layer_first_daemon"):
            state = st[R(name).state]
            hs = seed_host_state(state, sc, sc["l2_gb_per_card"], p)
            one = chunk_traffic(state["host_layout"], chunk)
            d2h = mech.Traffic(one.bytes * chunks, one.segments * chunks, one.launches * chunks, one.items * chunks,
                               one.kernel)
            rows.append([mech.submission_seconds(p, d2h), mech.device_seconds(p, "d2h", d2h, hs)])
            rhs.append(R(name).value - t1)
        kappa, phi = (float(np.clip(v, 0.0, 1.0)) for v in np.linalg.solve(rows, rhs))
        p = with_values(p, **{"host_costs.submit_contention": kappa, "host_costs.d2h_interference": phi})
        notes["host_costs.submit_contention"] = notes["host_costs.d2h_interference"] = (
            f"solving kappa x submission + phi x D2H time = first request - {t1:g} s for page_first_direct "
            f"({rows[0][0]:.4f} s, {rows[0][1]:.4f} s -> {rhs[0]:.2f} s) and layer_first ({rows[1][0]:.4f} s, "
            f"{rows[1][1]:.4f} s -> {rhs[1]:.2f} s): kappa = {kappa:.6f}, phi = {phi:.6f}")
        # translation and NUMA: each a least-squares fit over its pair of workload readings
        for key, names, lo, hi in (("host_costs.translation_slowdown_per_mentry", ("registered_80gb", "registered_15gb"),
                                    0.0, 10.0),
                                   ("host_costs.numa_remote_bw_factor", ("numa_remote", "numa_local"), 0.05, 1.0)):
            def err(v, p=p, key=key, names=names):
                q = with_values(p, **{key: v})
                return _sq_points([(workload_change_pct(q, runs, st[R(n).state], R(n).l2_gb_per_card or
                                                        sc["l2_gb_per_card"], st), R(n).value) for n in names])
            v = _golden(err, lo, hi)
            p = with_values(p, **{key: v})
            pairs = [(workload_change_pct(p, runs, st[R(n).state], R(n).l2_gb_per_card or sc["l2_gb_per_card"], st),
                      R(n).value) for n in names]
            notes[key] = (f"least squares over {' and '.join(names)} (seed {', '.join(f'{s:+g}%' for _, s in pairs)}; "
                          f"model {', '.join(f'{m:+.2f}%' for m, _ in pairs)}): {v:.6f}")
        if max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(_values(p), before, strict=True)) < 1e-10:
            break
    return p, notes


def _sq_points(pairs) -> float:
    return float(sum((m - s) ** 2 for m, s in pairs))


DERIVED_KEYS = ("compute.prefill_fixed_s", "compute.prefill_per_token_s", "compute.prefill_per_token_pair_s",
                "compute.l2_path_fixed_s", "link.h2d_gbps", "link.kernel_per_item_us", "link.per_segment_us",
                "host_costs.submit_contention", "host_costs.d2h_interference",
                "host_costs.translation_slowdown_per_mentry", "host_costs.numa_remote_bw_factor")


def value(profile, key: str) -> float:
    sec, name = key.split(".")
    return getattr(getattr(profile, sec), name)


def _values(profile) -> tuple[float, ...]:
    return tuple(float(value(profile, k) or 0.0) for k in DERIVED_KEYS)


SIGNIFICANT = 6  # digits the profile keeps of a derived value (tests/test_derive.py compares at this)


def profile_entries(profile, notes: dict[str, str]) -> dict[str, tuple[float, str]]:
    """{key: (value rounded to SIGNIFICANT digits, source line)} of every derived parameter, as
    the profile YAML writes them (`source: "derived: ..."`)."""
    out = {}
    for key in DERIVED_KEYS:
        v = float(f"{value(profile, key):.{SIGNIFICANT}g}")
        out[key] = (v, f"derived: {notes[key]} (seed work (P800 acceptance runs), hardware_profiles/readings/)")
    return out


def main() -> None:  # python -m hicache_ref.sim.derive [PROFILE]: the derived values as YAML lines
    import sys

    from hardware_profiles import load_profile
    from hardware_profiles.readings import load_readings
    from hicache_ref.sim.readings import seed_requests, seed_runs

    profile = load_profile(sys.argv[1] if len(sys.argv) > 1 else "p800")
    readings = load_readings(profile)
    derived, notes = derive(profile, readings, seed_runs(readings, seed_requests(), profile))
    for key, (v, src) in profile_entries(derived, notes).items():
        print(f"{key}: {v!r}\n  source: {src!r}")


if __name__ == "__main__":
    main()

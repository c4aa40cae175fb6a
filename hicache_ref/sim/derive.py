"""Every derived parameter of a profile, recomputed from its readings, with the arithmetic shown.

Each parameter comes from the readings that constrain it (`derives` in the readings file): solved
exactly where one reading fixes one parameter (floor, H2D bandwidth, L2 path, kernel item, the
per-token prefill at break-even), least squares where several readings each depend on several
parameters (JOINT: residuals in tolerances, shown), with the fit's covariance, each parameter's
standard error and the readings that determine it (hicache_ref.sim.fit_stats). tests/sim/test_derive.py
checks the profile against this; `python -m hicache_ref.sim.derive` prints the standard errors
(flagging a parameter fewer than two readings determine) and the values to write.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hal.transfer.seed import SEED_GEOMETRY
from hicache_ref.sim import cost, fit_stats
from hicache_ref.sim import mechanisms as mech
from hicache_ref.sim.readings import model_value, tolerance
from hicache_ref.sim.seed_scenario import seed_host_state

# The parameters fitted together, their bounds and starting scale, and the readings that constrain
# them: each reading depends on several (a workload's TTFT on the prefill curve, the D2H
# interference, the translation and NUMA factors at once), so one fit over all of them.
JOINT = (("compute.prefill_per_token_pair_s", 0.0, 1e-8, 1e-9), ("link.per_segment_us", 0.0, 10_000.0, 100.0),
         ("host_costs.submit_contention", 0.0, 1.0, 0.3), ("host_costs.d2h_interference", 0.0, 1.0, 0.5),
         ("host_costs.translation_slowdown_per_mentry", 0.0, 10.0, 0.01),
         ("host_costs.numa_remote_bw_factor", 0.05, 1.0, 0.8),
         ("host_costs.registered_slowdown_per_gb", 0.0, 1.0, 0.001))
JOINT_READINGS = ("first_request_off", "first_request_first_build", "d2h_submission_inline", "first_request_daemon",
                  "first_request_layer_first_daemon", "nonhit_slowdown_daemon", "registered_80gb", "registered_15gb",
                  "numa_remote", "numa_local", "ttft_before_transfer_fixes", "ttft_all_fixes")


def with_values(profile, **values):
    """`profile` with `section.key` values replaced (e.g. {"link.per_segment_us": 120.0})."""
    sections = {}
    for key, v in values.items():
        sec, name = key.split(".")
        sections.setdefault(sec, {})[name] = v
    return dataclasses.replace(profile, **{sec: dataclasses.replace(getattr(profile, sec), **kw)
                                           for sec, kw in sections.items()})


def exact(p, readings, notes):
    """The parameters one reading each fixes: floor, H2D bandwidth, L2 path, kernel item, and the
    per-token prefill given the pair term (break-even: prefill(n) = all-hit(n) there)."""
    R, sc, st, g = readings.reading, readings.scenario, readings.states, SEED_GEOMETRY
    floor = R("deployment_floor").value / 1e3
    hs = seed_host_state(st[R("h2d_bandwidth").state], sc, sc["l2_gb_per_card"], p)
    slow = mech.dma_gbps(with_values(p, **{"link.h2d_gbps": 1.0}), "h2d", hs)  # the state's factors alone
    h2d = R("h2d_bandwidth").value / slow
    p = with_values(p, **{"compute.prefill_fixed_s": floor, "link.h2d_gbps": h2d})
    notes["compute.prefill_fixed_s"] = f"the all-hit intercept's deployment floor, {floor * 1e3:g} ms"
    notes["link.h2d_gbps"] = (f"{R('h2d_bandwidth').value:g} GB/s measured / {slow:.6f} (translation and NUMA factors "
                              f"of state {R('h2d_bandwidth').state}) = {h2d:.4f} GB/s")
    launch = p.link.per_launch_us * 1e-6
    path = R("allhit_intercept").value / 1e3 - floor - g.layers * launch
    per_token_bw = g.token_bytes / (R("h2d_bandwidth").value * 1e9)
    item_us = (R("allhit_slope").value * 1e-6 - per_token_bw) / g.layers * 1e6
    p = with_values(p, **{"compute.l2_path_fixed_s": path, "link.kernel_per_item_us": item_us})
    notes["compute.l2_path_fixed_s"] = (f"{R('allhit_intercept').value:g} ms all-hit intercept - {floor * 1e3:g} ms "
                                        f"floor - {g.layers} launches x {p.link.per_launch_us:g} us = "
                                        f"{path * 1e3:.4f} ms")
    notes["link.kernel_per_item_us"] = (f"({R('allhit_slope').value:g} us/token all-hit slope - {g.token_bytes:,} B / "
                                        f"{R('h2d_bandwidth').value:g} GB/s = {per_token_bw * 1e6:.4f} us) / "
                                        f"{g.layers} layers = {item_us:.6f} us per token-layer item")
    be = R("break_even").value
    allhit = cost.allhit_seconds(p, int(be), g.layers, g.token_bytes)  # the host state break_even_tokens prices
    b = p.compute.prefill_per_token_pair_s or 0.0
    a = max(0.0, (allhit - floor - b * be * be) / be)  # a pair term too steep for break-even: a = 0
    p = with_values(p, **{"compute.prefill_per_token_s": a})
    notes["compute.prefill_per_token_s"] = (
        f"break-even at {be:g} tokens: {floor:g} + a {be:g} + b {be:g}^2 = all-hit({be:g}) = {allhit:.6f} s, "
        f"with b the fitted pair term: a = {a * 1e6:.6f} us/token")
    return p


@dataclasses.dataclass(frozen=True)
class Derivation:
    """The derivation's result: the profile with every derived value, the arithmetic, and the joint
    fit's statistics (residuals in tolerances, Jacobian, covariance) over `readings_used`."""

    profile: object
    notes: dict
    x: np.ndarray
    jac: np.ndarray
    residuals: np.ndarray
    cov: np.ndarray
    chi2_factor: float
    readings_used: tuple[str, ...]

    def estimates(self) -> list[fit_stats.Estimate]:
        """Each jointly fitted parameter with its standard error and the readings that determine it."""
        carried = fit_stats.determining(self.jac, self.readings_used)
        out = []
        for j, (key, lo, hi, _) in enumerate(JOINT):
            v = float(self.x[j])
            at = bool(np.isclose(v, lo, rtol=1e-6, atol=1e-12) or np.isclose(v, hi, rtol=1e-6, atol=1e-12))
            out.append(fit_stats.Estimate(key, v, float(np.sqrt(max(self.cov[j, j], 0.0))), tuple(carried[j]), at))
        return out


def reading_scale(r) -> float:
    kind, size = tolerance(r)
    return size * abs(r.value) if kind == "relative" else size


def _fitted(x, p):
    return with_values(p, **{k: float(v) for (k, *_), v in zip(JOINT, x, strict=True)})


def residual_function(profile, readings, runs, names=JOINT_READINGS):
    """x (the JOINT parameters) -> the readings `names`' residuals in tolerances, the exact
    parameters re-solved on top of `profile` for each x."""
    rows = [readings.reading(n) for n in names]

    def residuals(x):
        q = exact(_fitted(x, profile), readings, {})
        return np.array([(model_value(q, r, readings, runs) - r.value) / reading_scale(r) for r in rows])

    return residuals


def derive_fit(profile, readings, runs, names=JOINT_READINGS) -> Derivation:
    """Every derived parameter of `profile` from `readings` on `runs`, the joint fit over the
    readings `names` (JOINT_READINGS, or a subset to leave some out), with its statistics. The fit
    starts from JOINT's starting scale, never the profile's values: the same readings give the same
    parameters whatever the profile held, and a refit without a reading inherits nothing from it."""
    from scipy.optimize import least_squares

    notes: dict[str, str] = {}
    lo = np.array([lo for _, lo, _, _ in JOINT])
    hi = np.array([hi for _, _, hi, _ in JOINT])
    x_scale = np.array([x0 for *_, x0 in JOINT])
    p = profile
    x = np.array([np.clip(x0, a, b) for _, a, b, x0 in JOINT])
    for _ in range(4):  # the exact parameters move a little with the fitted factors: settle both
        fit = least_squares(residual_function(p, readings, runs, names), x, bounds=(lo, hi), x_scale=x_scale,
                            method="trf", xtol=1e-12, ftol=1e-12)
        settled = np.allclose(fit.x, x, rtol=1e-9, atol=0)
        x = fit.x
        p = exact(_fitted(x, p), readings, notes)
        if settled:
            break
    fun = residual_function(p, readings, runs, names)
    res = fun(x)
    jac = fit_stats.jacobian(fun, x, lo, hi, x_scale)
    cov, s2 = fit_stats.covariance(jac, res)
    table = "; ".join(f"{n} {v:+.2f}" for n, v in zip(names, res, strict=True))
    first = JOINT[0][0]
    for k, *_ in JOINT:
        notes[k] = (f"least squares with {', '.join(j for j, *_ in JOINT[1:])} over {len(names)} readings, residuals "
                    f"in tolerances: {table}" if k == first else f"the least squares of {first}")
    return Derivation(p, notes, x, jac, res, cov, s2, tuple(names))


def derive(profile, readings, runs, names=JOINT_READINGS) -> tuple[object, dict[str, str]]:
    """(profile with every derived parameter set, {key: arithmetic}) from `readings` on `runs`."""
    d = derive_fit(profile, readings, runs, names)
    return d.profile, d.notes


DERIVED_KEYS = ("compute.prefill_fixed_s", "compute.prefill_per_token_s", "compute.prefill_per_token_pair_s",
                "compute.l2_path_fixed_s", "link.h2d_gbps", "link.kernel_per_item_us", "link.per_segment_us",
                "host_costs.submit_contention", "host_costs.d2h_interference",
                "host_costs.translation_slowdown_per_mentry", "host_costs.numa_remote_bw_factor",
                "host_costs.registered_slowdown_per_gb")


def value(profile, key: str) -> float:
    sec, name = key.split(".")
    return getattr(getattr(profile, sec), name)


def _values(profile) -> tuple[float, ...]:
    return tuple(float(value(profile, k) or 0.0) for k in DERIVED_KEYS)


SIGNIFICANT = 6  # digits the profile keeps of a derived value (tests/sim/test_derive.py compares at this)


def profile_entries(profile, notes: dict[str, str]) -> dict[str, tuple[float, str]]:
    """{key: (value rounded to SIGNIFICANT digits, source line)} of every derived parameter, as
    the profile YAML writes them (`source: "derived: ..."`)."""
    out = {}
    for key in DERIVED_KEYS:
        v = float(f"{value(profile, key):.{SIGNIFICANT}g}")
        out[key] = (v, f"derived: {notes[key]} (seed work (P800 acceptance runs), hardware_profiles/readings/)")
    return out


def report_lines(d: Derivation) -> list[str]:
    """Each jointly fitted parameter: value, standard error, the readings that determine it, and a
    flag where fewer than two readings do (or it sits at a bound of the fit)."""
    out = [f"# joint fit over {len(d.readings_used)} readings; covariance x {d.chi2_factor:.3g} "
           f"(max(1, reduced chi-square))"]
    for e in d.estimates():
        rel = f" ({e.stderr / abs(e.value) * 100:.0f}%)" if e.value else ""
        flag = []
        if len(e.determined_by) < fit_stats.MIN_DETERMINING:
            flag.append(f"determined by {len(e.determined_by)} reading{'s' if len(e.determined_by) != 1 else ''}")
        if e.at_bound:
            flag.append("at a bound of the fit: its standard error understates what is unknown")
        out.append(f"# {e.key} = {e.value:.6g} +/- {e.stderr:.3g}{rel}; determined by "
                   f"{', '.join(e.determined_by) or 'no reading'}" + (f"  [FLAG: {'; '.join(flag)}]" if flag else ""))
    return out


def main() -> None:  # python -m hicache_ref.sim.derive [PROFILE]: the derived values as YAML lines
    import sys

    from hardware_profiles import load_profile
    from hardware_profiles.readings import load_readings
    from hicache_ref.sim.seed_scenario import seed_requests, seed_runs

    profile = load_profile(sys.argv[1] if len(sys.argv) > 1 else "p800")
    readings = load_readings(profile)
    if readings is None:
        sys.exit(f"{profile.path}: readings: the profile names no readings file, so nothing is derived")
    d = derive_fit(profile, readings, seed_runs(readings, seed_requests(), profile))
    for line in report_lines(d):
        print(line)
    for key, (v, src) in profile_entries(d.profile, d.notes).items():
        print(f"{key}: {v!r}\n  source: {src!r}")


if __name__ == "__main__":
    main()

"""`hicache calibrate --prefill`: the fitted prefill terms (conformance.calibrate.prefill_fit) written
into a profile as measured, each with its standard error, and the L2 path from an all-hit table.

The all-hit line's intercept is the prefill's fixed part + the L2 path + one launch per layer
(hicache_ref.sim.price.cost.allhit_seconds), so l2_path_fixed_s = intercept - fixed - layers x per_launch;
its slope less the KV bytes per token over H2D, per layer, is the kernel's cost per item (written
where H2D is known). Standard errors add in quadrature. Every other section of the base is kept.
"""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from conformance.calibrate.prefill_fit import Refused, written_terms
from hardware_profiles.profile_schema import build


def geometry(profile, model_name: str | None) -> tuple[int, int, str]:
    """(layers, KV bytes per token per rank, what they are of): `model_name` or the profile's
    compute.prefill_model, else the seed's geometry."""
    from hal.transfer.seed import SEED_GEOMETRY
    from hicache_ref.models.catalog import load_model

    name = model_name or profile.compute.prefill_model
    if name is None:
        return SEED_GEOMETRY.layers, SEED_GEOMETRY.token_bytes, "the seed geometry"
    arch = load_model(name)
    tp = profile.compute.prefill_tp or profile.device.devices_per_node or 1
    return arch.layers, arch.token_kv_bytes(tp), f"{arch.name} at TP {tp}"


def uncertainty_of(profile, key: str) -> float:
    """The standard deviation a profile states for `section.key`: a measured value's standard error,
    an assumed value's range as a uniform spread (width / sqrt 12), else 0 (derived or exact). What
    is computed from it carries it on: a term written as measured is never surer than its inputs."""
    if key in profile.stderrs:
        return float(profile.stderrs[key])
    if key in profile.ranges:
        lo, hi = profile.ranges[key]
        return (hi - lo) / math.sqrt(12.0)
    return 0.0


def l2_terms(profile, allhit: dict, fixed: tuple[float, float], model_name: str | None) -> tuple[dict, list[str]]:
    """{section.key: (value, stderr, how)} the all-hit fit gives, and notes on what it could not.
    Standard errors carry the fit's and the profile's own (uncertainty_of: the launches, H2D)."""
    t = allhit["terms"]
    (i, se_i), (s, se_s) = (t["intercept_s"]["value"], t["intercept_s"]["stderr"]), \
        (t["slope_s_per_token"]["value"], t["slope_s_per_token"]["stderr"])
    layers, token_bytes, of = geometry(profile, model_name)
    launch_us = profile.link.per_launch_us
    notes = [] if launch_us is not None else ["link.per_launch_us unknown: the launches' part of the intercept taken as 0"]
    launches = layers * (launch_us or 0.0) * 1e-6
    se_launches = layers * uncertainty_of(profile, "link.per_launch_us") * 1e-6
    l2 = i - fixed[0] - launches
    se_l2 = math.sqrt(se_i ** 2 + fixed[1] ** 2 + se_launches ** 2)
    if l2 < -2 * se_l2:
        raise Refused(f"all-hit intercept {i:.4g} s is below the prefill's fixed part {fixed[0]:.4g} s: the all-hit "
                      "table was not all hits, or the two tables come from different deployments")
    out = {"compute.l2_path_fixed_s": (max(0.0, l2), se_l2, f"all-hit intercept {i:.6g} +/- {se_i:.2g} s - fixed "
                                       f"{fixed[0]:.6g} +/- {fixed[1]:.2g} s - {layers} launches x {launch_us or 0:g} "
                                       f"+/- {se_launches / layers * 1e6:.2g} us")}
    h2d = profile.link.h2d_gbps
    if h2d is None:
        notes.append("link.h2d_gbps unknown: the all-hit slope's per-item part is not written (calibrate the link first)")
    else:
        item = (s - token_bytes / (h2d * 1e9)) / layers * 1e6
        se_h2d = uncertainty_of(profile, "link.h2d_gbps")
        se_item = math.hypot(se_s, token_bytes * se_h2d / (h2d * h2d * 1e9)) / layers * 1e6
        if item < -2 * se_item:
            notes.append(f"kernel item {item:.4g} us is negative beyond its error: the slope is below the KV bytes at "
                         f"{h2d:g} GB/s; not written")
        else:
            out["link.kernel_per_item_us"] = (max(0.0, item), se_item, f"(all-hit slope {s * 1e6:.5g} us/token - "
                                              f"{token_bytes} B / {h2d:g} +/- {se_h2d:.2g} GB/s) / {layers} layers ({of})")
    return out, notes


def _measured(value: float, stderr: float, source: str) -> dict:
    """A measured leaf: its value and standard error (a fit with no residual has none to state)."""
    leaf = {"value": float(f"{value:.6g}")}
    if float(f"{stderr:.3g}") > 0:
        leaf["stderr"] = float(f"{stderr:.3g}")
    return {**leaf, "source": source}


def profile_yaml(base, fit: dict | None, l2: dict, who: str) -> tuple[str, list[str]]:
    """YAML of `base` with the fitted compute terms (and `l2`'s keys) written as measured."""
    data = yaml.safe_load(Path(str(base.path)).read_text(encoding="utf-8"))
    notes: list[str] = []
    compute = dict(data.get("compute") or {})
    if fit is not None:
        terms, notes = written_terms(fit)
        how = (f"least squares of no-hit TTFT = fixed + a n + b n^2 over {fit['requests']} requests at "
               f"{len(fit['lengths'])} prompt lengths ({fit['lengths'][0]['tokens']:,}-{fit['lengths'][-1]['tokens']:,} "
               f"tokens), {fit['dof']} dof, rms residual {fit['rmse_s'] * 1e3:.3g} ms")
        compute.pop("prefill_curve", None)  # a curve would win over the measured terms
        for key, (v, se) in terms.items():
            compute[key] = _measured(v, se, f"{who}: {how}")
    sections = {"compute": compute, "link": dict(data.get("link") or {})}
    for path, (v, se, how) in l2.items():
        section, key = path.split(".")
        sections[section][key] = _measured(v, se, f"{who}: {how}")
    data.update(sections)
    header = f"# Prefill calibrated from profile {base.name} ({who}).\n"
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100), notes


def write(out: Path, text: str) -> None:
    """Check `text` loads as a profile, then write it atomically (never a file --profile cannot load)."""
    from conformance.common.safe_write import write_text

    build(text, Path(out))
    write_text(out, text)

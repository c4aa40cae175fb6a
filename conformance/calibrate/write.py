"""A calibrated profile: the base profile's YAML with its link section replaced by what was
measured and its host_costs updated with what was (the base's other host costs kept with their
sources), each figure sourced `measured: <command> on <host> (<cpu>), <date>: <how>`, and the
samples kept beside it as <stem>.calibration.json (report.html draws them). The result loads
with `--profile FILE.yaml`; writing refuses to leave a file that would not."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import socket
from pathlib import Path

import yaml

from hardware_profiles.field_checks import HOST_COST_BOUNDS


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what platform knows; the report's environment uses it too."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict:
    return {"host": socket.gethostname(), "cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release()}


def stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


HOW = {
    "h2d_gbps": "median of {repeat} transfers of {size} MiB in {segs} segment(s) (warm-up 1)",
    "d2h_gbps": "median of {repeat} transfers of {size} MiB in {segs} segment(s) (warm-up 1)",
    "per_segment_us": "least-squares slope over {seg_counts} segments of 16 MiB, one submission ({seg_se})",
    "per_launch_us": "least-squares slope over {launch_counts} submissions of 16 MiB ({launch_se})",
    "registration_s_per_gib": "least-squares slope over registrations of {reg_sizes} MiB on THP "
                              "({reg_se}; 4 KB pages: {reg_4k:.4f} s/GiB)",
}


def _uncertainty(cal: dict, key: str, scale: float, unit: str) -> str:
    """'slope S +/- E UNIT' of a fitted link figure, from calibrate's fit judgement."""
    j = (cal.get("fit_quality", {}).get("fits") or {}).get(key)
    if not j:
        return "not measured"
    return (f"slope {j['b'] * scale:.4g} +/- {j['se_b'] * scale:.2g} {unit}, resolution {j['resolution'] * scale:.2g}, "
            f"rms residual {j['rel_rmse']:.1%} of the mean")


CALIBRATED_SENTENCE = "Link and host costs calibrated by hicache calibrate on"


def profile_yaml(base, cal: dict, command: str, backend: str) -> str:
    """YAML text of `base` (a loaded Profile) with the calibrated link section and host costs."""
    data = yaml.safe_load(Path(str(base.path)).read_text(encoding="utf-8"))
    m, when = cal["machine"], cal["date"]
    who = f"measured: `{command}` (backend {backend}) on {m['host']} ({m['cpu']}, {m['cores']} cores), {when}"
    from conformance.calibrate.measure import LAUNCH_COUNTS, REGISTER_SIZES, SEGMENT_COUNTS, SIZE_SEGMENTS

    reg = cal["registration"]
    fields = {"repeat": cal["repeat"], "size": cal["sizes"][-1] >> 20, "segs": SIZE_SEGMENTS,
              "seg_counts": "/".join(map(str, SEGMENT_COUNTS)), "seg_se": _uncertainty(cal, "per_segment_us", 1e6, "us"),
              "launch_counts": "/".join(map(str, LAUNCH_COUNTS)),
              "launch_se": _uncertainty(cal, "per_launch_us", 1e6, "us"),
              "reg_sizes": "/".join(str(s >> 20) for s in REGISTER_SIZES), "reg_4k": reg.get("4k_s_per_gib") or 0.0,
              "reg_se": _uncertainty(cal, "registration_s_per_gib", 1.0, "s/GiB")}
    accepted = {key: why for key, _, why in cal.get("fit_quality", {}).get("poor", [])}
    link = {}
    for key, value in cal["link"].items():
        if value is None:
            link[key] = "unknown"
            continue
        source = f"{who}: {HOW[key].format(**fields)}"
        if key in accepted:  # written only because --accept-poor-fit said so: the source says it
            source += f"; poor fit accepted with --accept-poor-fit ({accepted[key]})"
        link[key] = with_stderr({"value": round(float(value), 6), "source": source}, link_stderr(cal, key))
    data["link"] = link
    if cal.get("device_memory_bytes"):
        data["device"] = {**(data.get("device") or {}), "hbm_gib": {
            "value": round(cal["device_memory_bytes"] / 2**30, 3),
            "source": f"{who}: torch.cuda.get_device_properties(device).total_memory = "
                      f"{cal['device_memory_bytes']} bytes"}}
    data["host_costs"] = host_costs_section(data.get("host_costs") or {}, cal, who)
    # A profile calibrated again says its latest calibration once, not every one before it.
    kept = base.description.split(CALIBRATED_SENTENCE)[0].rstrip()
    data["description"] = (f"{kept} {CALIBRATED_SENTENCE} {m['host']}, {when}; the rest as in profile {base.name}.")
    header = (f"# Calibrated from profile {base.name} by `{command}` on {m['host']}, {when}.\n"
              f"# Samples and fits: the .calibration.json beside this file.\n")
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


# Fitted link figures: the fit's slope is in seconds per count (us figures) or seconds per GiB.
SLOPE_SCALE = {"per_segment_us": 1e6, "per_launch_us": 1e6, "registration_s_per_gib": 1.0}


def link_stderr(cal: dict, key: str) -> float | None:
    """The standard error of a measured link figure: the median bandwidth's (its repeats) at the
    largest size, a fitted figure's slope's (conformance.calibrate.fit_quality); None where unknown."""
    if key in ("h2d_gbps", "d2h_gbps"):
        rows = (cal.get("bandwidth") or {}).get(key[:3]) or []
        return rows[-1].get("gbps_stderr") if rows else None
    from conformance.calibrate.measure import fit_judgements

    j = fit_judgements(cal).get(key)
    return None if j is None else j["se_b"] * SLOPE_SCALE[key]


def with_stderr(leaf: dict, se) -> dict:
    """`leaf` ({value, source}) with `stderr:` beside them where the standard error is a finite number."""
    if se is None or not math.isfinite(se):
        return leaf
    return {**leaf, "stderr": float(f"{abs(float(se)):.4g}")}


def _translation_source(t: dict) -> str:
    if "error" in t:
        return f"not measured: {t['error']}"
    f = t["fit"]
    how = (f"least squares of H2D seconds per byte on million translation entries (bytes / page size, from smaps) "
           f"of regions of {'/'.join(str(s >> 20) for s in t['sizes'])} MiB registered on 4 KB pages and on THP, "
           f"{t['rounds']} rounds of {t['moved_bytes'] >> 20} MiB in {t['piece_bytes'] >> 10} KiB pieces at random "
           f"offsets over the region, one intercept per round and size ({t['dropped_rounds']} rounds dropped as "
           f"outliers); slope {f['b']:.4g} +/- {f['se_b']:.2g} s/B per M entries, intercept {f['a']:.4g} s/B, "
           f"{f['dof']} dof, rmse {f['rmse']:.3g} s/B")
    if not t["accepted"]:
        return f"not written: {t['why']} ({how})"
    return (f"{how}: rho = slope / intercept = {t['rho']:.4g} +/- {t['se']:.2g}"
            + (" (negative within its error: written 0)" if t["rho"] < 0 else ""))


def _numa_source(n: dict) -> str:
    per = ", ".join(f"node {k} {v['factor']:.3f} ({v['gbps']:.2f} GB/s)" for k, v in n["remote"].items())
    return (f"remote / local bandwidth of one {n['bytes'] >> 20} MiB H2D from THP memory bound to each node, "
            f"median over {n['rounds']} alternating rounds of the per-round ratio; local node {n['local']} "
            f"({n['local_how']}, {n['local_gbps']:.2f} GB/s); {per}; the mean of the nodes' factors, at most 1")


def _registered_source(t: dict) -> str:
    if "error" in t or "registered" not in t:
        return f"not measured: {t.get('error', 'no THP points')}"
    r = t["registered"]
    how = (f"least squares of THP H2D seconds per byte (the translation fit's rho per million entries divided out) "
           f"on the GB registered, regions of {'/'.join(str(s >> 20) for s in t['sizes'])} MiB")
    if not r["accepted"]:
        return f"not written: {r['why']} ({how})"
    return (f"{how}: sigma = slope / intercept = {r['sigma']:.4g} +/- {r['se']:.2g} per GB"
            + (" (negative within its error: written 0)" if r["sigma"] < 0 else ""))


def _registered(section: dict, cal: dict, who: str) -> None:
    """host_costs.registered_slowdown_per_gb: written where the fit is accepted; else a known base value
    is kept with why it was not replaced, or unknown with the reason."""
    key, t = "registered_slowdown_per_gb", cal["translation"]
    r, held = t.get("registered") or {}, section.get(key)
    if r.get("accepted"):
        section[key] = with_stderr({"value": round(float(r["value"]), 6), "source": f"{who}: {_registered_source(t)}"},
                                   r.get("se"))
    elif isinstance(held, dict) and held.get("value") not in (None, "unknown"):
        section[key] = {**held, "source": f"{held['source'].rstrip()}; kept: {who}: {_registered_source(t)}"}
    else:
        section[key] = {"value": "unknown", "source": f"{who}: {_registered_source(t)}"}


def host_costs_section(base: dict, cal: dict, who: str) -> dict:
    """The base profile's host_costs (values and sources kept) with what calibrate measured.
    A refused translation fit leaves a known base value in place, its source saying why it was
    not replaced, else writes unknown with the reason; the NUMA factor is written only where it
    was measured. Keys in the schema's order."""
    section = dict(base)
    key = "translation_slowdown_per_mentry"
    t, value = cal["translation"], cal["host_costs"][key]["value"]
    held = section.get(key)
    if value is not None:
        section[key] = with_stderr({"value": round(float(value), 6), "source": f"{who}: {_translation_source(t)}"},
                                   t.get("se"))
    elif isinstance(held, dict) and held.get("value") not in (None, "unknown"):
        section[key] = {"value": held["value"], "source": f"{held['source'].rstrip()}; kept: {who}: "
                        f"{_translation_source(t)}"}
    else:
        section[key] = {"value": "unknown", "source": f"{who}: {_translation_source(t)}"}
    _registered(section, cal, who)
    n = cal["numa"]
    if n["measured"]:
        section["numa_remote_bw_factor"] = with_stderr({"value": round(float(n["factor"]), 6),
                                                        "source": f"{who}: {_numa_source(n)}"}, n.get("factor_stderr"))
    return {k: section[k] for k in HOST_COST_BOUNDS if k in section}


def write(out: Path, base, cal: dict, command: str, backend: str) -> Path:
    """Write OUT (YAML) and OUT's .calibration.json atomically, then load OUT as a profile."""
    out = Path(out)
    text = profile_yaml(base, cal, command, backend)
    side = out.with_name(out.stem + ".calibration.json")
    from conformance.common.safe_write import write_text
    from hardware_profiles.profile_schema import build

    try:  # refused before either file is written: --profile must load what is written
        build(text, out)
    except ValueError as e:
        raise ValueError(f"--out: {out} not written: the measured profile would not load: {e}") from None
    for path, body in ((side, json.dumps(cal, indent=1) + "\n"), (out, text)):
        write_text(path, body)
    return side

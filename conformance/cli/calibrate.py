"""`hicache calibrate`: measure the link model on this machine and write it as a profile.

It measures nvbandwidth-style (warm-up, repeats, medians, spread) with least-squares fits (conformance/calibrate).
`--out FILE.yaml` writes the profile and FILE.calibration.json; `hicache conform --profile FILE.yaml` uses it.
A fitted slope not known well enough (its standard error; conformance/calibrate/fit_quality.py)
is not written unless --accept-poor-fit. The host costs (translation-entry
slowdown, remote NUMA factor) are written where measured well, else unknown or kept, with the reason.
What is measured and the exit rules: docs/architecture.md, "Design notes".
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from pathlib import Path

from conformance.common import args as arg_types
from conformance.common.backend_choice import check_backend
from conformance.common.errors import CliError, clip, clip_path
from conformance.common.inputs import load_profile_arg, new_file
from conformance.common.progress import ticker
from hal.common.units import HELP as UNITS

HELP = ("measure H2D/D2H bandwidth, per-segment, per-launch and registration costs, the translation-entry "
        "slowdown and the remote NUMA factor; write a measured profile")


def add_arguments(p) -> None:
    p.add_argument("--backend", default="emu", help="backend to calibrate (default emu: this CPU)")
    p.add_argument("--profile", default=None, help="base profile whose other sections the output keeps "
                   "(default: the backend's default profile)")
    p.add_argument("--out", default=None, help="write the calibrated profile here (FILE.yaml) and "
                   "FILE.calibration.json beside it")
    p.add_argument("--sizes", default="1MiB,4MiB,16MiB,64MiB,256MiB", help="transfer sizes, comma separated "
                   f"({UNITS}; at most 1 GiB each; the largest gives the profile's bandwidth)")
    p.add_argument("--translation-sizes", default="64MiB,256MiB,1GiB", help="host regions registered on 4 KB "
                   f"pages and on THP for the translation-entry fit, comma separated ({UNITS}; two of the largest "
                   "are held at once, within this machine's memory; go larger on a real node)")
    p.add_argument("--repeat", type=arg_types.count(3, 1000), default=5, help="timed repeats per point (>= 3)")
    p.add_argument("--accept-poor-fit", action="store_true",
                   help="write --out even with a fitted slope not known well enough (its source says so)")
    p.add_argument("--storage", default=None, metavar="SPEC", help="measure this L3 store's link instead "
                   "(file:DIR, memory:, mooncake:...): put/get over object sizes, per-batch and per-object "
                   "latency, and the uplink it shares with D2H on --backend (both at once); --out writes the base "
                   "profile with its l3_link measured")
    p.add_argument("--prefill", default=None, metavar="FILE", help="fit the prefill instead: measured no-hit TTFT "
                   "against prompt length (SGLang bench_serving --output-details JSONL, vLLM benchmark_serving "
                   "--save-result JSON, or CSV with input_len and ttft_s/ttft_ms), fixed + linear + quadratic with "
                   "standard errors; --out writes them into --profile as measured")
    p.add_argument("--allhit", default=None, metavar="FILE", help="with --prefill (or a profile with a known fixed "
                   "part): an all-hit TTFT table of the same shape, whose line gives the L2 path (and the kernel's "
                   "per-item cost where the profile knows H2D)")
    p.add_argument("--model", default=None, help="with --allhit: the served model whose layers and KV bytes the "
                   "all-hit slope is split by (a preset or YAML; default the profile's compute.prefill_model, else "
                   "the seed geometry)")
    p.add_argument("--json", action="store_true", help="print the samples, fits and link figures as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress line")


def run(a) -> int:
    from conformance.calibrate import measure, write
    from conformance.calibrate.sizes import region_sizes, transfer_sizes
    from conformance.plugin import backend_status, default_profile_name
    from hal.backend import get_backend

    if a.storage is not None:
        return _storage(a)
    if a.prefill is not None or a.allhit is not None:
        from conformance.cli.calibrate_prefill import run_prefill

        return run_prefill(a)
    sizes = transfer_sizes(a.sizes)
    regions = region_sizes(a.translation_sizes)
    out = None if a.out is None else new_file("--out", a.out, (".yaml", ".yml"))
    if out is not None:  # both outputs checked before the measuring, so neither is written alone
        new_file("--out", out.with_name(out.stem + ".calibration.json"))
    check_backend(a.backend)
    name = a.profile or default_profile_name(a.backend)
    if name is None:
        raise CliError("--profile", f"backend {a.backend!r} has no default profile: name a base profile")
    base = load_profile_arg("--profile", name)
    ok, why = backend_status(a.backend)
    if not ok:
        raise CliError("--backend", f"{a.backend} is not available here: {clip(why, 160)}")
    command = "hicache calibrate " + " ".join(shlex.quote(x) for x in sys.argv[2:]) if sys.argv[1:2] == ["calibrate"] \
        else f"hicache calibrate --backend {a.backend}"
    with get_backend(a.backend, base) as backend, ticker("hicache calibrate", a.quiet):
        if not backend.capabilities().moves_bytes:  # its "bandwidth" would be the speed of bookkeeping
            raise CliError("--backend", f"{a.backend} moves no bytes, so it has no link to measure (emu, cuda, xpu)")
        cal = measure.calibrate(backend, sizes=sizes, repeat=a.repeat, translation_sizes=regions)
        cal["device_memory_bytes"] = backend.device_memory_bytes()
    cal.update({"machine": write.machine(), "date": write.stamp(), "command": command, "backend": a.backend,
                "base_profile": base.name})
    from conformance.calibrate import fit_quality

    poor = measure.poor_fits(cal)
    cal["fit_quality"] = {"rules": fit_quality.RULES, "fits": measure.fit_judgements(cal),
                          "poor": [list(p) for p in poor], "accepted": bool(poor) and a.accept_poor_fit}
    refused = out is not None and bool(poor) and not a.accept_poor_fit
    if out is not None and not refused:
        side = write.write(out, base, cal, command, a.backend)
        cal["written"] = {"profile": str(out), "calibration": str(side)}
    if a.json:
        print(json.dumps(cal, indent=1))
    else:
        _print(a, cal, out if not refused else None)
    if poor:
        fits = "; ".join(f"{what}: {why}" for _, what, why in poor)
        if refused:
            print(f"hicache: --out: {clip_path(out)} not written: {fits} (retake with more --repeat on a quieter "
                  "host, or pass --accept-poor-fit)", file=sys.stderr)
            return 1
        print(f"hicache: warning: {fits}" + ("; written anyway (--accept-poor-fit)" if out is not None else ""),
              file=sys.stderr)
    return 0


def _size(n: int) -> str:
    """A transfer size as given in binary units: 64 KiB, 1 MiB, 1.5 MiB (a size under 1 MiB read 0 MiB)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def _print(a, cal: dict, out: Path | None) -> None:
    """The human summary: bandwidth per size, the fitted costs with their standard errors, registration."""
    link = cal["link"]
    print(f"calibrated {a.backend} on {cal['machine']['host']} ({cal['machine']['cpu']}), {cal['date']}")
    print(f"{'size':>10}  {'h2d GB/s':>9}  {'d2h GB/s':>9}  {'memcpy GB/s':>11}  spread h2d/d2h")
    for h, d in zip(cal["bandwidth"]["h2d"], cal["bandwidth"]["d2h"], strict=True):
        print(f"{_size(h['bytes']):>11}  {h['gbps']:>9.2f}  {d['gbps']:>9.2f}  {h['memcpy_gbps']:>11.2f}  "
              f"{h['spread']:.0%}/{d['spread']:.0%}")
    j = cal["fit_quality"]["fits"]
    print(f"per segment {link['per_segment_us']:.3f} us (+/- {j['per_segment_us']['se_b'] * 1e6:.2g}), per launch "
          f"{link['per_launch_us']:.3f} us (+/- {j['per_launch_us']['se_b'] * 1e6:.2g})")
    reg = cal["registration"]
    if "error" in reg:
        print(f"registration: not measured: {reg['error']}")
    else:
        print(f"registration: {reg['4k_s_per_gib']:.4f} s/GiB on 4 KB pages (R^2 {reg['fit_4k']['r2']:.3f}), "
              f"{reg['thp_s_per_gib']:.4f} s/GiB on THP (R^2 {reg['fit_thp']['r2']:.3f})")
    t, n = cal["translation"], cal["numa"]
    if "error" in t:
        print(f"translation entries: not measured: {t['error']}")
    elif t["accepted"]:
        print(f"translation entries: rho {t['rho']:.4g} +/- {t['se']:.2g} per million entries "
              f"(written {t['value']:.4g}; {t['fit']['points']} timings, {t['dropped_rounds']} rounds dropped)")
    else:
        print(f"translation entries: written unknown: {t['why']}")
    if n["measured"]:
        print(f"remote NUMA: bandwidth factor {n['factor']:.3f} (local node {n['local']})")
    else:
        print(f"remote NUMA: not measured: {n['why']} (numa_remote_bw_factor kept from the base profile)")
    hbm = cal.get("device_memory_bytes")
    print(f"device memory: {hbm / 2**30:.1f} GiB (device.hbm_gib)" if hbm else
          f"device memory: not measured: backend {a.backend} keeps device buffers in host memory "
          "(device.hbm_gib kept from the base profile)")
    if out is not None:
        print(f"profile: {out} (load it with --profile {out}); samples: {cal['written']['calibration']}")


def _storage(a) -> int:
    """`--storage SPEC`: the L3 store's link (conformance/calibrate/l3_link.py) into the profile's l3_link."""
    from conformance.calibrate import l3_link, uplink, write
    from conformance.plugin import backend_status
    from hal.backend import get_backend
    from hicache_ref.storage.registry import open_storage

    out = None if a.out is None else new_file("--out", a.out, (".yaml", ".yml"))
    base = load_profile_arg("--profile", a.profile or "p800")
    check_backend(a.backend)  # the D2H side of the shared uplink
    ok, why = backend_status(a.backend)
    if not ok:
        raise CliError("--backend", f"{a.backend} is not available here: {clip(why, 160)}")
    with contextlib.ExitStack() as held:  # whatever opened is closed on any refusal below
        backend = held.enter_context(get_backend(a.backend, base))
        if not backend.capabilities().moves_bytes:
            raise CliError("--backend", f"{a.backend} moves no bytes; the uplink needs real D2H (emu, cuda, xpu)")
        try:
            store = held.enter_context(open_storage(a.storage))
        except (ValueError, RuntimeError, OSError) as e:
            raise CliError("--storage", clip(str(e), 200)) from None
        if not getattr(store, "moves_bytes", True):
            raise CliError("--storage", f"{a.storage}: moves no bytes; measure a real store (file:, memory:, mooncake:)")
        with ticker("hicache calibrate", a.quiet):
            try:
                cal = l3_link.measure(store, repeat=a.repeat)
            except ValueError as e:  # a store too small, or one that failed a put or get (it says why)
                raise CliError("--storage", clip(str(e), 300)) from None
            cal["uplink"] = uplink.measure(backend, store, repeat=a.repeat)
    m = write.machine()
    cal.update(machine=m, date=write.stamp(), base_profile=base.name)
    if out is not None:
        l3_link.write(out, base, cal, f"measured: `hicache calibrate --storage {a.storage}` on {m['host']}, {cal['date']}")
        cal["written"] = {"profile": str(out)}
    if a.json:
        print(json.dumps(cal, indent=1))
        return 0
    link = cal["l3_link"]
    rate = lambda v: "unknown" if v is None else f"{v:.2f} GB/s"  # noqa: E731
    print(f"L3 link of {a.storage}: read {rate(link['read_gbps'])}, write {rate(link['write_gbps'])}, "
          f"per batch {link['per_batch_us']:.1f} us, per object {link['per_object_us']:.1f} us "
          f"(R^2 read {cal['fits']['read']['r2']:.3f}, write {cal['fits']['write']['r2']:.3f})")
    up = cal["uplink"]
    print(f"uplink shared with D2H on {a.backend}: {up['uplink_gbps']:.2f} GB/s for both at once ("
          f"{up['contention']:.2f}x the longer alone: {'contended' if up['contended'] else 'no contention, a lower bound'})")
    if out is not None:
        print(f"profile: {out} (load it with --profile {out})")
    return 0

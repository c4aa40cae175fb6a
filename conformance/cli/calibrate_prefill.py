"""`hicache calibrate --prefill FILE [--allhit FILE]`: the prefill terms fitted from measured TTFTs.

Every input is checked (the tables read and fitted, the profile built and loaded in memory) before
--out is written; a degenerate table is refused with what to measure (conformance/calibrate/prefill_fit.py).
"""

from __future__ import annotations

import json

from conformance.common.errors import CliError, clip_path
from conformance.common.inputs import load_profile_arg, new_file, text_file


def _table(option: str, path: str) -> list:
    from conformance.calibrate.ttft_table import TableError, read_table

    p = text_file(option, path, "a TTFT table (JSONL, JSON or CSV)")
    try:
        return read_table(p)
    except TableError as e:
        raise CliError(option, str(e)) from None


def run_prefill(a) -> int:
    from conformance.calibrate import prefill_fit, prefill_profile, write
    from hicache_ref.sim.price.mechanisms import Unpriced
    from hicache_ref.sim.price.prefill_model import require_compute

    out = None if a.out is None else new_file("--out", a.out, (".yaml", ".yml"))
    base = load_profile_arg("--profile", a.profile or "p800")
    fit = allhit = None
    try:
        if a.prefill is not None:
            fit = prefill_fit.fit_no_hit(_table("--prefill", a.prefill))
        if a.allhit is not None:
            allhit = prefill_fit.fit_all_hit(_table("--allhit", a.allhit))
    except prefill_fit.Refused as e:
        raise CliError("--allhit" if fit is not None else "--prefill", str(e)) from None
    l2, notes = {}, []
    if allhit is not None:
        if fit is not None:
            t = fit["terms"]["prefill_fixed_s"]
            fixed = (max(0.0, t["value"]), t["stderr"])
        else:
            try:
                fixed = (require_compute(base).prefill_fixed_s,
                         prefill_profile.uncertainty_of(base, "compute.prefill_fixed_s"))
            except Unpriced as e:
                raise CliError("--allhit", f"needs the prefill's fixed part: give --prefill too ({e})") from None
        try:
            l2, notes = prefill_profile.l2_terms(base, allhit, fixed, a.model)
        except prefill_fit.Refused as e:
            raise CliError("--allhit", str(e)) from None
        except ValueError as e:
            raise CliError("--model", str(e).removeprefix("--model: ")) from None
    m = write.machine()
    tables = " ".join(f"{o} {clip_path(v)}" for o, v in (("--prefill", a.prefill), ("--allhit", a.allhit)) if v)
    who = f"measured: `hicache calibrate {tables}` on {m['host']}, {write.stamp()}"
    try:
        text, fit_notes = prefill_profile.profile_yaml(base, fit, l2, who)
    except prefill_fit.Refused as e:
        raise CliError("--prefill", str(e)) from None
    notes = fit_notes + notes
    if out is not None:
        prefill_profile.write(out, text)
    doc = {"profile": base.name, "no_hit": fit, "all_hit": allhit, "notes": notes,
           "written": {k: {"value": v, "stderr": se, "how": how} for k, (v, se, how) in l2.items()},
           "out": None if out is None else str(out)}
    if a.json:
        print(json.dumps(doc, indent=1))
        return 0
    for name, f in (("no-hit prefill", fit), ("all-hit", allhit)):
        if f is None:
            continue
        print(f"{name}: {f['requests']} requests, rms residual {f['rmse_s'] * 1e3:.3g} ms")
        print(f"{'tokens':>10}  {'requests':>8}  {'median s':>9}  {'mean resid ms':>13}")
        for row in f["lengths"]:
            print(f"{row['tokens']:>10,}  {row['requests']:>8}  {row['median_s']:>9.4f}  {row['mean_residual_s'] * 1e3:>13.3f}")
        for k, t in f["terms"].items():
            print(f"  {k} = {t['value']:.6g} +/- {t['stderr']:.2g}")
    for k, (v, se, how) in l2.items():
        print(f"  {k} = {v:.6g} +/- {se:.2g} ({how})")
    for n in notes:
        print(f"note: {n}")
    if out is not None:
        print(f"profile: {out} (load it with --profile {out})")
    return 0

"""report.html: one self-contained page (styles inline, plots as base64 PNG) from which a person
can sign a node off: verdict, every target with its basis and source, the assumptions, the plots,
the environment and doctor checks, and the per-module test table."""

from __future__ import annotations

from html import escape

from conformance.report import html_plots
from conformance.report.html_parts import badge, fmt, table, verdict_badge
from conformance.report.html_readings import answer_block, readings_table
from conformance.report.target_rows import split_counts

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1300px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;width:100%;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;padding:3px 10px;border-radius:4px;color:#fff;font-weight:600}
.PASS,.pass{background:#2e7d32} .FAIL,.fail{background:#c62828} .NOT_RUN,.not_measured{background:#757575} .PARTIAL{background:#ef6c00}
.pass-modeled{background:#fff;color:#1565c0;border:2px dashed #1565c0} .fail-modeled{background:#fff;color:#c62828;border:2px dashed #c62828}
.answer{border:2px solid #1565c0;border-radius:6px;padding:8px 14px;margin:12px 0;background:#f5f9ff}
.answer .gain{color:#2e7d32;font-weight:700} .answer .loss{color:#c62828;font-weight:700}
.answer .undecided{color:#ef6c00;font-weight:700}
.ok{color:#2e7d32;font-weight:600} .warn{color:#ef6c00;font-weight:600} .bad{color:#c62828;font-weight:600}
.muted{color:#666} .small{font-size:12px} img{max-width:100%;border:1px solid #eee;margin:6px 0}
.grid{display:flex;flex-wrap:wrap;gap:12px} .grid img{max-width:640px}
"""


def _targets(report: dict) -> str:
    rows = []
    for r in report["targets"]:
        if r.get("kind") == "reading":
            continue
        tol = f" ± {r['tolerance']:g}" if r.get("tolerance") else ""
        # key names only (the source is the tooltip); assumed ones are flagged, they are what to replace
        inputs = "<br>".join(
            f'<code title="{escape(v)}">{escape(k)}</code>'
            + (' <span class="warn">assumed</span>' if v.lower().startswith("assumed") else "")
            for k, v in (r.get("inputs") or {}).items())
        rows.append([f'<span id="target-{escape(r["name"])}">{escape(r["name"])}</span>', fmt(r["value"]),
                     f"{escape(r['comparator'])} {fmt(r['target'])}{tol}", escape(r["unit"]), verdict_badge(r),
                     escape(r["basis"]), escape(r["reason"]), escape(r["source"]),
                     f'<span class="small">{inputs}</span>'])
    return table(["target", "value", "target", "unit", "verdict", "basis", "reason / what it rests on",
                   "source", "model inputs"], rows, num_cols=(1,))


def _images(report: dict) -> str:
    f, env = report["figures"], report["environment"]
    parts = []
    for title, png, note, missing in (
        ("All-hit fit and break-even", html_plots.allhit(f.get("allhit")),
         "modeled points from the profile's compute model, fitted by least squares (hicache_ref.sim.price.cost)",
         f"profile {env.get('profile')} cannot price an all-hit request "
         "(compute.prefill_fixed_s, compute.l2_path_fixed_s, the link)"),
        ("Bandwidth vs size, per direction", html_plots.bandwidth(f.get("bandwidth")),
         f"measured on backend {env['backend']} in this run (median of 5; one segment per transfer), with a plain "
         "memcpy of the same bytes as the peer",
         f"backend {env['backend']} is not available here: nothing was measured"),
        ("Seed transfer per host layout", html_plots.layouts(f.get("layouts")),
         "segments of the seed transfer and its time priced by the profile's link model", "no profile"),
    ):
        if png:
            parts.append(f"<h3>{escape(title)}</h3><p class='muted small'>{escape(note)}</p>"
                         f'<img alt="{escape(title)}" src="data:image/png;base64,{png}">')
        else:
            parts.append(f"<h3>{escape(title)}</h3><p class='muted'>not available: {escape(missing)}</p>")
    up = f.get("uplink")
    if up and up.get("devices_per_switch") and up["devices_per_switch"] > 1:
        parts.append("<h3>Shared uplinks and PCIe ordering (IDO)</h3>" + table(
            ["devices per uplink", "IDO", "D2H per card alone", "D2H per card, uplink shared, this IDO",
             "same with IDO on", "factor source"],
            [[fmt(up["devices_per_switch"]), escape(up["ido"]), fmt(up["d2h_gbps"]) + " GB/s",
              fmt(up["shared_d2h_gbps"]) + " GB/s", fmt(up["ido_on_d2h_gbps"]) + " GB/s",
              escape(up.get("factor_source") or "not given")]]))
    cal = html_plots.calibration(f.get("calibration"))
    if cal:
        c = f["calibration"]
        parts.append(f"<h3>Calibration curves</h3><p class='muted small'>from {escape(str(c.get('command', '?')))} "
                     f"on {escape(str(c.get('machine', {}).get('host', '?')))}, {escape(str(c.get('date', '?')))}</p>")
        parts.extend(f'<img alt="calibration" src="data:image/png;base64,{png}">' for png in cal)
    else:
        parts.append("<h3>Calibration curves</h3><p class='muted'>no calibration for this profile "
                     "(run <code>hicache calibrate --out PROFILE.yaml</code> and pass that profile)</p>")
    return "\n".join(parts)


def _environment(env: dict) -> str:
    keys = ("backend", "backend_available", "backend_reason", "profile", "profile_path", "host", "cpu", "cores",
            "kernel", "os", "python", "torch")
    rows = [[escape(k), fmt(env.get(k))] for k in keys]
    topo = env.get("topology") or {}
    rows.append(["topology", escape(f"{topo.get('source', '?')} ({topo.get('origin', '?')}): "
                                    f"{topo.get('devices', '?')} device(s), {topo.get('numa_nodes', '?')} NUMA node(s)")
                 + "<br><span class='small muted'>" + "<br>".join(escape(n) for n in topo.get("notes", [])) + "</span>"])
    out = table(["item", "value"], rows)
    doctor = env.get("doctor") or {}
    if doctor.get("checks"):
        cls = {"ok": "ok", "warn": "warn", "fail": "bad"}
        out += "<h3>Doctor checks</h3>" + table(
            ["check", "status", "what was found", "fix"],
            [[escape(c["name"]), f"<span class='{cls.get(c['status'], 'muted')}'>{escape(c['status'])}</span>",
              escape(c.get("value", "")), escape(c.get("fix", "") or "")] for c in doctor["checks"]])
    elif doctor.get("error"):
        out += f"<p class='bad'>doctor could not run: {escape(doctor['error'])}</p>"
    return out


def _tests(report: dict) -> str:
    s = report["summary"]
    rows = [[escape(m["module"]), *(fmt(m[k]) for k in ("tests", "passed", "failed", "errors", "skipped", "xfailed"))]
            for m in s["modules"]]
    t = s["totals"]
    rows.append(["<b>total</b>", *(f"<b>{fmt(t[k])}</b>" for k in ("tests", "passed", "failed", "errors",
                                                                       "skipped", "xfailed"))])
    out = table(["module", "tests", "passed", "failed", "errors", "skipped", "xfailed"], rows, range(1, 7))
    if s["failures"]:
        out += "<h3>Failures</h3>" + table(["test", "message"], [[escape(f["test"]), escape(f["message"][:500])]
                                                                 for f in s["failures"][:200]])
    if s["skip_reasons"]:
        out += "<h3>Skip reasons</h3>" + table(["tests", "reason"], [[fmt(n), escape(r)]
                                                                    for r, n in s["skip_reasons"].items()], (0,))
    return out


def render(report: dict) -> str:
    env = report["environment"]
    t, r = split_counts(report)
    why = f"<p class='bad'>NOT RUN: {escape(report['not_run_reason'])}</p>" if report.get("not_run_reason") else ""
    if report.get("partial_reason"):
        why = (f"<p class='bad'>PARTIAL: the deciding suites did not run in full ({escape(report['partial_reason'])}): "
               "no check of the node failed (seed readings the model misses are the model's verdict), but this run "
               "signs nothing off</p>")
    assumptions = table(["profile key", "source"], [[f"<code>{escape(k)}</code>", escape(v)]
                                                     for k, v in report["assumptions"].items()]) \
        if report["assumptions"] else "<p>none: every figure is measured, derived or from the seed work</p>"
    unchecked = ", ".join(escape(n) for n in report["unchecked_targets"]) or "none"
    failed = ", ".join(escape(n) for n in report["failed_targets"]) or "none"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>hicache conform: {escape(env['backend'])} / {escape(str(env.get('profile')))}: {escape(report['verdict'])}</title>
<style>{STYLE}</style></head><body>
<h1>HiCache conformance report {badge(report['verdict'])}</h1>
{answer_block(report)}
<p>backend <b>{escape(env['backend'])}</b>, profile <b>{escape(str(env.get('profile')))}</b>, host
<b>{escape(env['host'])}</b> ({escape(env['cpu'])}), generated {escape(report.get('generated_at', ''))}</p>
{why}
<table><tr><th>tests</th><th>targets</th><th>readings (modeled)</th><th>failed targets and readings</th><th>not measured</th><th>assumed inputs</th></tr>
<tr><td>{fmt(report['summary']['totals']['passed'])} passed, {fmt(report['summary']['totals']['failed']
 + report['summary']['totals']['errors'])} failed, {fmt(report['summary']['totals']['skipped'])} skipped</td>
<td>{t['measured_pass']} PASS (measured), {t['modeled_pass']} PASS (modeled), {t['fail']} fail,
{t['not_measured']} not measured of {t['total']}</td>
<td>{r['modeled_pass']} PASS (modeled), {r['fail']} FAIL (modeled), {r['not_measured']} not measured of {r['total']}</td>
<td>{failed}</td><td>{unchecked}</td><td>{len(report['assumptions'])}</td></tr></table>
<h2>Targets</h2>
<p class="muted small">measured: on backend {escape(env['backend'])} in this run; modeled: from the profile's model,
with the inputs named. A target that cannot be measured here is <i>not_measured</i>, never a pass.</p>
{_targets(report)}
<h2>Readings: the seed's measurements as modeled targets</h2>
<p class="muted small">each reading of the profile's readings file, computed by the profile's model on its scenario
(hicache_ref.sim.fit.modeled_readings) and checked against the seed's value: a modeled pass says the model reproduces the
reading, not that this backend was measured.</p>
{readings_table(report)}
<h2>Assumptions the verdict rests on</h2>
{assumptions}
<h2>Plots</h2>
{_images(report)}
<h2>Environment</h2>
{_environment(env)}
<h2>Tests</h2>
{_tests(report)}
</body></html>
"""

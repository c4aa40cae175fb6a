"""report.html's opening answer (does HiCache pay off on the profile's scenario) and its table of
readings, the seed's measurements as modeled targets (conformance.targets.reading_rows)."""

from __future__ import annotations

from html import escape

from conformance.report.html_parts import fmt, table, verdict_badge


def _tolerance(reading: dict) -> str:
    kind, size = reading["tolerance"]["kind"], reading["tolerance"]["size"]
    return {"relative": f"± {size:.0%}", "points": f"± {size:g} points", "exact": "exact",
            "sign": "same sign"}.get(kind, escape(kind))


def _read_as(reading: dict, reason: str) -> str:
    """How the project reads the reading, unless the reason says it already (a fail does)."""
    how = reading.get("interpretation") or ""
    return "" if not how or how in reason else f'<br><span class="small muted">read as: {escape(how)}</span>'


def readings_table(report: dict) -> str:
    """The readings of the profile's readings file, each a modeled target: seed vs model."""
    rows = []
    for r in report["targets"]:
        if r.get("kind") != "reading":
            continue
        d = r.get("reading") or {}
        derives = "<br>".join(f"<code>{escape(k)}</code>" for k in d.get("derives") or ())
        rows.append([f'<span id="reading-{escape(r["name"])}">{escape(r["name"])}</span>'
                     f'<br><span class="small muted">{escape(d.get("measured", ""))}</span>',
                     escape(str(d.get("state") or "-")), fmt(r["target"]), fmt(r["value"]), escape(r["unit"]),
                     _tolerance(d) if d.get("tolerance") else "-", verdict_badge(r),
                     escape(r["reason"]) + _read_as(d, r["reason"]), f'<span class="small">{derives}</span>'])
    if not rows:
        env = report["environment"]
        return f"<p class='muted'>profile {escape(str(env.get('profile')))} has no readings file: no modeled targets</p>"
    return table(["reading", "state", "seed", "model", "unit", "tolerance", "verdict", "why",
                   "derives"], rows, num_cols=(2, 3))


def answer_block(report: dict) -> str:
    """The report's opening: does HiCache pay off on the profile's scenario (conformance.report.answer)."""
    a = report.get("answer")
    if not a:
        return ""
    if a["ttft_change_pct"] is None:
        head = "<p class='muted'>no answer: " + escape(a["text"]) + "</p>"
    else:
        word = a.get("answer") or ("gain" if a["gain"] else "loss")
        lo, hi = a.get("ttft_change_pct_interval") or (a["ttft_change_pct"],) * 2
        net = a.get("net_benefit_seconds_interval")
        members = a.get("ensemble_members") or 1
        head = (f"<p><span class='{word}'>{escape(word)}</span>: TTFT <b>{a['ttft_change_pct']:+.2f}%</b> "
                f"[{lo:+.2f}%, {hi:+.2f}%] vs HiCache off with every fix on"
                + (f", net benefit [{net[0]:+.1f} s, {net[1]:+.1f} s]" if net else "")
                + f" (modeled, 5-95% over {members} parameter set{'s' * (members != 1)}; the seed measured "
                f"{a['seed_ttft_change_pct']:+.2f}%)</p>")
    mv = report.get("model_verdict")
    counts = (f"<p>model {escape(str(mv))}: <b>{a['readings_within']}</b> seed readings within tolerance, "
              f"<b>{a['readings_outside']}</b> outside, {a['readings_not_measured']} not measured, of "
              f"{a['readings_total']} (the model's verdict; the node's is the badge above)</p>"
              if a["readings_total"] else "")
    if a.get("readings_loo_total"):
        counts += (f"<p>left out of the fit: <b>{a['readings_loo_within']}</b> of {a['readings_loo_total']} "
                   "jointly fitted readings predicted within tolerance by a fit without them</p>")
    scenario = f"<p class='small muted'>scenario: {escape(a['scenario'])}</p>" if a.get("scenario") else ""
    return f'<div class="answer" id="answer"><h2>Does HiCache pay off here?</h2>{head}{counts}{scenario}</div>'

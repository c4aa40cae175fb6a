"""The pieces every section of report.html is built from: a value as text, a table, a badge, and
a row's verdict badge with its basis on it (a modeled pass never looks like a measured one)."""

from __future__ import annotations

from html import escape


def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) >= 1):
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return escape(str(v))


def badge(text: str) -> str:
    return f'<span class="badge {escape(text.replace(" ", "_"))}">{escape(text)}</span>'


def verdict_badge(row: dict) -> str:
    """A row's verdict with its basis on the badge: "PASS (measured)" solid, "PASS (modeled)" dashed
    in another colour, so a figure the profile's model gives never reads as one measured here."""
    if row["verdict"] == "not_measured":
        return '<span class="badge not_measured">NOT MEASURED</span>'
    cls = row["verdict"] if row["basis"] == "measured" else f"{row['verdict']}-modeled"
    return f'<span class="badge {escape(cls)}">{escape(row["verdict"].upper())} ({escape(row["basis"])})</span>'


def table(head: list[str], rows: list[list[str]], num_cols=()) -> str:
    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in num_cols else f"<td>{c}</td>" for i, c in enumerate(r))
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    return "\n".join(out)

"""One self-contained HTML page for people: the answer first, then sections of text, code, tables and
inline PNG plots (base64), no outside file or script. Shared by advise, replay, sweep and ablate `--out`.

Plots never use an axis offset (matplotlib's "+1.234e3" corner label): a tick reads as its value.
"""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field

_STYLE = ("body{font-family:sans-serif;max-width:72em;margin:1em auto;padding:0 1em;color:#222}"
          "h1{font-size:1.4em}.answer{font-size:1.2em;padding:.6em;border-left:6px solid #4477aa;background:#f3f6fa}"
          "pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap}table{border-collapse:collapse;font-size:.9em}"
          "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}td:first-child,th:first-child{text-align:left}"
          "img{max-width:100%}")


@dataclass
class Section:
    """A heading and what follows it, in this order: lines of text, a code block, a table, plots."""

    heading: str
    text: list[str] = field(default_factory=list)
    code: str | None = None
    headers: list[str] | None = None
    rows: list[list] = field(default_factory=list)
    images: list[bytes] = field(default_factory=list)


def page(title: str, answer: list[str], sections: list[Section]) -> str:
    """The page as text: `answer` lines in the box at the top, then each section."""
    e = html.escape
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{e(title)}</title>",
           f"<style>{_STYLE}</style></head><body>", f"<h1>{e(title)}</h1>",
           "<div class='answer'>" + "<br>".join(e(a) for a in answer) + "</div>"]
    for s in sections:
        out.append(f"<h2>{e(s.heading)}</h2>")
        out += [f"<p>{e(t)}</p>" for t in s.text]
        if s.code is not None:
            out.append(f"<pre>{e(s.code)}</pre>")
        if s.headers:
            out.append("<table><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in s.headers) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{e(cell(v))}</td>" for v in row) + "</tr>" for row in s.rows]
            out.append("</table>")
        out += [f"<img alt='{e(s.heading)}' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
                for png in s.images]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def cell(v) -> str:
    """A table cell: n/m for a figure not measured, numbers grouped, floats to 4 significant digits."""
    if v is None:
        return "n/m"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4g}"
    return str(v)


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def no_offset(ax) -> None:
    """Ticks as plain values: no offset or scientific corner label on either axis."""
    for axis in (ax.xaxis, ax.yaxis):
        fmt = axis.get_major_formatter()
        if hasattr(fmt, "set_useOffset"):
            fmt.set_useOffset(False)
            fmt.set_scientific(False)


def png(fig) -> bytes:
    """The figure as PNG bytes without a timestamp or software tag (the same figures, the same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, metadata={"Software": None})
    pyplot().close(fig)
    return buf.getvalue()


def bars(labels: list[str], values: list[float | None], ylabel: str, title: str) -> bytes:
    """A bar per label from zero (a missing value drawn as no bar), labels under the bars."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels)), 4))
    ax.bar(range(len(labels)), [0.0 if v is None else v for v in values], color="#4477aa")
    ax.axhline(0, color="#222", lw=0.8)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    no_offset(ax)
    fig.tight_layout()
    return png(fig)

"""report.html's plots, drawn with matplotlib (Agg: no display needed) and returned as base64
PNG so the page is one self-contained file. Each function takes the data plot_data gathered
and returns None when there is nothing to draw."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend is chosen before pyplot loads

DPI = 96
COLORS = {"h2d": "#1f77b4", "d2h": "#d62728", "memcpy": "#7f7f7f", "fit": "#2ca02c", "prefill": "#9467bd"}


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    # no timestamp in the PNG: the same data gives the same bytes
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def allhit(data: dict | None) -> str | None:
    if not data:
        return None
    fit = data["fit"]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs, ys = fit["xs"], fit["ys"]
    ax.plot(xs, [y * 1e3 for y in ys], "o", color=COLORS["fit"], label="all-hit points")
    grid = [0, max(xs)]
    ax.plot(grid, [(fit["a"] + fit["b"] * x) * 1e3 for x in grid], "-", color=COLORS["fit"],
            label=f"fit T(n) = {fit['a'] * 1e3:.1f} ms + {fit['b'] * 1e6:.3f} us*n (R^2 {fit['r2']:.4f})")
    if data.get("prefill"):
        px = [p[0] for p in data["prefill"]]
        ax.plot(px, [p[1] * 1e3 for p in data["prefill"]], "--", color=COLORS["prefill"], label="prefill(n), compute model")
    if data.get("break_even_tokens") is not None:
        be = data["break_even_tokens"]
        ax.axvline(be, color="black", lw=0.8, ls=":")
        ax.annotate(f"break-even {be:,.0f} tokens", (be, (fit["a"] + fit["b"] * be) * 1e3),
                    textcoords="offset points", xytext=(8, -14))
    if data.get("floor_s") is not None:
        ax.axhline(data["floor_s"] * 1e3, color=COLORS["memcpy"], lw=0.8, ls="--", label="deployment floor")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("request time (ms)")
    ax.set_title("All-hit request time T(n) and prefill")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def bandwidth(sweep: dict | None, title: str = "Bandwidth vs transfer size (this run)", modeled: bool = True) -> str | None:
    if not sweep:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for direction in ("h2d", "d2h"):
        rows = sweep.get(direction) or []
        if not rows:
            continue
        mib = [r["bytes"] / 2**20 for r in rows]
        ax.plot(mib, [r["gbps"] for r in rows], "o-", color=COLORS[direction], label=f"{direction} measured (wall)")
        if modeled and any(r.get("modeled_gbps") for r in rows):
            ax.plot(mib, [r.get("modeled_gbps") or float("nan") for r in rows], "s--", color=COLORS[direction],
                    alpha=0.6, label=f"{direction} modeled clock")
    first = next((sweep[d] for d in ("h2d", "d2h") if sweep.get(d)), [])
    if first and first[0].get("memcpy_gbps"):
        ax.plot([r["bytes"] / 2**20 for r in first], [r["memcpy_gbps"] for r in first], "^:",
                color=COLORS["memcpy"], label="memcpy (same run)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("transfer size (MiB)")
    ax.set_ylabel("GB/s")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def layouts(rows: list[dict] | None) -> str | None:
    if not rows:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    names = [r["layout"] for r in rows]
    left.bar(names, [r["segments"] for r in rows], color="#8c564b")
    left.set_yscale("log")
    left.set_ylabel("DMA segments (log)")
    left.set_title("Seed transfer: segments per host layout")
    for i, r in enumerate(rows):
        left.annotate(f"{r['segments']:,}", (i, r["segments"]), ha="center", va="bottom", fontsize=8)
    modeled = [r["modeled_seconds"] for r in rows]
    if all(m is not None for m in modeled):
        right.bar(names, [m * 1e3 for m in modeled], color="#17becf")
        for i, m in enumerate(modeled):
            right.annotate(f"{m * 1e3:.0f} ms", (i, m * 1e3), ha="center", va="bottom", fontsize=8)
        right.set_ylabel("modeled time (ms)")
        right.set_title("Seed transfer: modeled time (link model)")
    else:
        right.text(0.5, 0.5, "link model incomplete:\nmodeled time unknown", ha="center", va="center")
        right.set_axis_off()
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    return _png(fig)


def _fit_panel(ax, block: dict, xkey: str, xlabel: str, title: str) -> None:
    pts = block.get("points") or []
    xs = [p[xkey] for p in pts]
    ax.plot(xs, [p["median_s"] * 1e3 for p in pts], "o", label="median")
    fit = block.get("fit")
    if fit:
        ax.plot(xs, [(fit["a"] + fit["b"] * x) * 1e3 for x in xs], "-",
                label=f"fit {fit['a'] * 1e3:.3f} ms + {fit['b'] * 1e6:.3f} us/{xkey[:-1]} (R^2 {fit['r2']:.3f})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("ms")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def calibration(cal: dict | None) -> list[str]:
    """Calibration curves: bandwidth over sizes, per-segment and per-launch fits, registration."""
    if not cal:
        return []
    out = []
    if cal.get("bandwidth"):
        out.append(bandwidth(cal["bandwidth"], "Calibration: bandwidth vs size", modeled=False))
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    if cal.get("segments"):
        _fit_panel(axes[0], cal["segments"], "segments", "segments (same bytes)", "Per-segment cost")
    if cal.get("launches"):
        _fit_panel(axes[1], cal["launches"], "launches", "submissions (same bytes)", "Per-launch cost")
    reg = cal.get("registration") or {}
    for kind, marker in (("4k", "o-"), ("thp", "s-")):
        pts = reg.get(kind) or []
        if pts:
            axes[2].plot([p["bytes"] / 2**30 for p in pts], [p["seconds"] for p in pts], marker,
                         label=f"{kind}: {reg.get(kind + '_s_per_gib', float('nan')):.3f} s/GiB")
    axes[2].set_xlabel("GiB registered")
    axes[2].set_ylabel("seconds")
    axes[2].set_title("Registration", fontsize=10)
    axes[2].legend(fontsize=7)
    axes[2].grid(alpha=0.3)
    out.append(_png(fig))
    return [p for p in out if p]

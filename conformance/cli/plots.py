"""Figures of `hicache trace stats --plot`, `hicache sweep` and `hicache ablate` (matplotlib, Agg: no display needed).

PNG files carry no timestamp or software tag, so the same figures give the same bytes.
"""

from __future__ import annotations

from pathlib import Path

_METADATA = {"Software": None}


def _save(fig, path: str | Path) -> None:
    """The figure as a PNG at `path`, written safely (conformance.common.safe_write): a full disk
    leaves no partial PNG, a link at `path` is not followed."""
    from conformance.common.safe_write import atomic_file

    with atomic_file(path, binary=True) as f:
        fig.savefig(f, format="png", dpi=100, metadata=_METADATA)


def seconds_label(v: float, signed: bool = False) -> str:
    """A bar's seconds in three significant digits: whole seconds read every sub-second step on a
    small trace or a fast part as "0 s"."""
    sign = "+" if signed else ""
    return f"{v:{sign}.0f} s" if abs(v) >= 100 else f"{v:{sign}.3g} s"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def trace_stats_plot(path: str | Path, stats: dict, lengths: list[int]) -> None:
    """Input-length histogram and hit rate vs LRU capacity (the reuse-distance CDF, in tokens)."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.hist(lengths, bins=40, color="#4477aa")
    left.set_xlabel("input tokens per request")
    left.set_ylabel("requests")
    left.set_title(f"{stats['requests']:,} requests, reuse {stats['prefix_reuse_rate']:.3f}")
    curve = stats["hit_rate_by_capacity"]
    right.plot([p["capacity_tokens"] for p in curve], [p["hit_rate"] for p in curve], marker="o", color="#228833")
    right.axhline(stats["unlimited_hit_rate"], linestyle="--", color="grey", label="unlimited")
    right.set_xscale("log", base=2)
    right.set_xlabel(f"LRU capacity, tokens (page {stats['page_size']}): reuse distance")
    right.set_ylabel("token hit rate")
    right.legend(loc="lower right")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plain_axis(ax) -> None:
    """Tick labels as the values themselves: no offset or scale factor, so a difference of 0.3 ms
    near 1.2 s reads as 1.2003 - 1.2000, not as a cliff from 0 to 3 with "+1.2" in a corner."""
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)


def sweep_plot(path: str | Path, result: dict) -> None:
    """Hit rate and net benefit vs L2 capacity, the plateau marked."""
    plt = _pyplot()
    tiers = result["tiers"]
    xs = [t["l2_tokens"] for t in tiers]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(xs, [t["hit_rate"] for t in tiers], marker="o", color="#4477aa", label="hit rate")
    ax.axhline(result["l1_alone_hit_rate"], linestyle=":", color="grey", label="L1 alone")
    ax.set_xlabel("L2 capacity, tokens")
    ax.set_ylabel("token hit rate")
    benefit = [t["net_benefit_seconds"] for t in tiers]
    if all(b is not None for b in benefit):
        other = ax.twinx()
        other.plot(xs, benefit, marker="s", color="#cc6677", label="net benefit")
        _band(other, xs, tiers)
        other.axhline(0.0, linewidth=0.8, color="#cc6677", alpha=0.4)  # above: a gain against HiCache off
        other.set_ylabel("net benefit, s (band: 5-95% over the parameter ensemble)")
        plain_axis(other)
    else:
        ax.set_title("net benefit not modeled: " + tiers[0].get("net_benefit_reason", ""), fontsize=8)
    plateau = result["plateau_l2_tokens"]
    if result.get("none_pays"):
        ax.plot([], [], " ", label="no tier pays: no plateau")
    elif plateau:
        label = f"plateau {plateau:,}" if result["on_plateau"] else f"largest tier {plateau:,} (not on the plateau)"
        ax.axvline(plateau, linestyle="--", color="#228833", label=label)
    ax.legend(loc="lower right")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _band(ax, xs, tiers) -> None:
    """The net benefit's 5-95% interval per tier as a shaded band (where every tier has one)."""
    ivs = [t.get("net_benefit_seconds_interval") for t in tiers]
    if xs and all(iv is not None for iv in ivs):
        ax.fill_between(xs, [iv[0] for iv in ivs], [iv[1] for iv in ivs], color="#cc6677", alpha=0.25, linewidth=0)


def sweep_l3_plot(path: str | Path, result: dict) -> None:
    """Hit rate, L3 bytes moved and net benefit vs L3 capacity over a fixed L1/L2, the plateau marked."""
    plt = _pyplot()
    tiers = result["tiers"]
    xs = [t["l3_tokens"] for t in tiers]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(xs, [t["hit_rate"] for t in tiers], marker="o", color="#4477aa", label="hit rate")
    ax.axhline(result["without_l3_hit_rate"], linestyle=":", color="grey", label="without L3")
    ax.set_xlabel("L3 capacity, tokens")
    ax.set_ylabel("token hit rate")
    other = ax.twinx()
    other.plot(xs, [t["l3_bytes_read"] / 2**30 for t in tiers], marker="^", color="#ddaa33", label="L3 read GiB")
    other.plot(xs, [t["l3_bytes_written"] / 2**30 for t in tiers], marker="v", color="#aa3377", label="L3 written GiB")
    other.set_ylabel("L3 GiB moved")
    benefit = [t.get("net_benefit_seconds") for t in tiers]
    if all(b is not None for b in benefit):
        third = ax.twinx()
        third.spines["right"].set_position(("axes", 1.12))
        third.plot(xs, benefit, marker="s", color="#cc6677", label="net benefit, s")
        _band(third, xs, tiers)
        third.set_ylabel("net benefit, s (band: 5-95%)")
    title = "net benefit, s: " + ", ".join(f"{b:+.1f}" for b in benefit) if all(b is not None for b in benefit) \
        else "net benefit not modeled: " + (tiers[0].get("net_benefit_reason") or "")
    ax.set_title(title, fontsize=8)
    if result["on_plateau"] and result["plateau_l3_tokens"]:
        ax.axvline(result["plateau_l3_tokens"], linestyle="--", color="#228833",
                   label=f"plateau {result['plateau_l3_tokens']:,}")
    ax.legend(loc="lower right")
    other.legend(loc="upper left")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def ablate_plot(path: str | Path, result: dict) -> None:
    """Waterfall of net benefit per ablate step: the first bar the baseline, then each step's
    change over the last step that was priced (a step that changes nothing is a thin line, labelled
    with its change), steps not measured drawn as hatched gaps, and a last bar with the total; each
    priced step's net benefit carries its 5-95% interval as an error bar."""
    plt = _pyplot()
    steps = result["steps"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    level = None
    for i, s in enumerate(steps):
        net = s["net_benefit_seconds"]
        if net is None:
            ax.bar(i, 0 if level is None else level, color="none", edgecolor="grey", hatch="//")
            ax.annotate("not measured", (i, 0 if level is None else level), ha="center", va="bottom", fontsize=7)
            continue
        base = 0.0 if level is None else level
        ax.bar(i, net - base, bottom=base, color="#4477aa" if net >= base else "#cc6677", edgecolor="black",
               linewidth=0.5)
        ax.annotate(seconds_label(net - base, signed=True) if level is not None else seconds_label(net), (i, max(net, base)),
                    ha="center", va="bottom", fontsize=7)
        iv = s.get("net_benefit_seconds_interval")
        if iv is not None:  # the rung's net benefit, 5-95% over the parameter ensemble
            ax.errorbar(i, net, yerr=[[net - iv[0]], [iv[1] - net]], fmt="none", ecolor="black", capsize=3,
                        linewidth=0.8)
        level = net
    labels = [s["step"] for s in steps]
    if level is not None:  # the total after every priced step
        ax.bar(len(steps), level, color="#999933", edgecolor="black", linewidth=0.5)
        ax.annotate(seconds_label(level), (len(steps), max(level, 0)), ha="center", va="bottom", fontsize=7)
        labels.append("total")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.margins(y=0.12)  # room for the labels above the highest bar
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("modeled net benefit, s (bars: 5-95%)")
    plain_axis(ax)
    c = result["configuration"]
    ax.set_title(f"ablate: {c['requests']:,} requests, profile {c['profile']}, TP {c['tp']}", fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def readings_plot(path: str | Path, result: dict) -> None:
    """Seed vs model per reading: how far the model lies from the seed's value, in tolerances
    (the shaded band is within), each row labelled with both values and the unit."""
    plt = _pyplot()
    rows = result["readings"]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.2))
    for i, r in enumerate(rows):
        t, seed, model = r["tolerance"], r["seed"], r["model"]
        size = {"relative": t["size"] * abs(seed), "points": t["size"]}.get(t["kind"], 0.0)
        if model is None:  # not measured (within None), or the model gives no value (a fail)
            failed = r["within"] is False
            ax.annotate("no model value" if failed else "not measured", (0, i), ha="center", va="center", fontsize=7,
                        color="#cc6677" if failed else "grey")
            continue
        if size:
            x = (model - seed) / size
        else:  # exact counts and signs: on the line when within, else at the edge
            x = 0.0 if r["within"] else 3.0 * (1 if model > seed else -1)
        x = max(-3.0, min(3.0, x))
        ax.plot([x], [i], "o", color="#4477aa" if r["within"] else "#cc6677")
    ax.axvspan(-1, 1, color="#dddddd", zorder=0)
    ax.axvline(0, color="black", linewidth=0.6)
    labels = [f"{r['reading']}  {r['seed']:.4g} -> {'n/m' if r['model'] is None else format(r['model'], '.4g')} "
              f"{r['unit']}" for r in rows]
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(-3.2, 3.2)
    ax.set_xlabel("model - seed, in tolerances (shaded: within; clipped at 3)")
    ans = result.get("answer", {})
    ax.set_title(f"seed readings vs model, profile {result['configuration']['profile']}: "
                 f"{ans.get('readings_within', 0)} of {ans.get('readings_total', len(rows))} within", fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)

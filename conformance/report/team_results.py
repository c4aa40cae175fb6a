"""report.html of `hicache replay`, `sweep` and `ablate` with --out: the command's answer first, its
printed summary, its figures as a table and a plot (conformance.report.team_page renders it)."""

from __future__ import annotations

from conformance.report.team_page import Section, bars, no_offset, page, png, pyplot


def _answer(change, net, what: str) -> str:
    if change is None:
        return f"{what}: TTFT change not modeled"
    word = "a gain" if change < 0 else "a loss" if change > 0 else "no change"
    return f"{what}: modeled TTFT {change:+.2f}% against L1 alone, net benefit {net:+,.2f} s ({word})" \
        if net is not None else f"{what}: modeled TTFT {change:+.2f}% ({word})"


def replay_page(fig: dict, lines: list[str]) -> str:
    keys = ("requests", "input_tokens", "hit_rate", "l1_hit_tokens", "l2_hit_tokens", "d2h_bytes", "h2d_bytes",
            "d2h_segments", "h2d_segments", "modeled_transfer_seconds", "net_benefit_seconds", "modeled_ttft_change_pct")
    answer = _answer(fig.get("modeled_ttft_change_pct"), fig.get("net_benefit_seconds"), "this replay")
    return page("hicache replay", [answer], [Section("summary", code="\n".join(lines)),
                                            Section("figures", headers=["figure", "value"],
                                                    rows=[[k, fig.get(k)] for k in keys])])


def sweep_page(r: dict, lines: list[str]) -> str:
    tiers = r["tiers"]
    key = "l2_tokens" if tiers and "l2_tokens" in tiers[0] else "l3_tokens"
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([t[key] for t in tiers], [t["hit_rate"] for t in tiers], marker="o", color="#228833")
    ax.set_ylim(0, max([t["hit_rate"] for t in tiers] + [0.01]) * 1.1)
    ax.set_xlabel(key.replace("_", " "))
    ax.set_ylabel("hit rate")
    no_offset(ax)
    fig.tight_layout()
    images = [png(fig)]
    nets = [t.get("net_benefit_seconds") for t in tiers]
    if any(v is not None for v in nets):
        images.append(bars([f"{t[key]:,}" for t in tiers], nets, "net benefit, s", "net benefit per tier (from zero)"))
    best = [t for t in tiers if t.get("net_benefit_seconds") is not None]
    answer = (f"best tier by net benefit: {max(best, key=lambda t: t['net_benefit_seconds'])[key]:,} tokens"
              if best else "net benefit not modeled for these tiers")
    return page("hicache sweep", [lines[-2] if len(lines) > 1 else "", answer], [
        Section("summary", code="\n".join(lines)),
        Section("tiers", headers=[key, "hit rate", "gain", "net s"],
                rows=[[t[key], t["hit_rate"], t.get("marginal_gain"), t.get("net_benefit_seconds")] for t in tiers],
                images=images)])


def ablate_page(r: dict, lines: list[str]) -> str:
    steps = r["steps"]
    last = steps[-1] if steps else {}
    answer = _answer(last.get("ttft_change_pct"), last.get("net_benefit_seconds"), f"every fix ({last.get('step')})")
    return page("hicache ablate", [answer], [
        Section("summary", code="\n".join(lines)),
        Section("the ladder", headers=["step", "change", "hit rate", "TTFT %", "net s"],
                rows=[[s["step"], s["change"], s["hit_rate"], s.get("ttft_change_pct"), s["net_benefit_seconds"]]
                      for s in steps],
                images=[bars([s["step"] for s in steps], [s.get("ttft_change_pct") for s in steps],
                             "TTFT change vs HiCache off, %", "each rung, from zero")])])

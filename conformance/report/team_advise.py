"""advise's report.html: per profile the answer, the flags to paste, the ranked table with intervals,
the capacity curve and the ladder on this trace (conformance.report.team_page renders it)."""

from __future__ import annotations

from conformance.report.team_page import Section, bars, no_offset, page, png, pyplot


def _interval(row: dict, key: str, fmt: str) -> str:
    span = row.get(key)
    return "n/m" if span is None else f"[{format(span[0], fmt)}, {format(span[1], fmt)}]"


def _chosen(p: dict) -> dict:
    """The pick where HiCache goes on, else the best configuration tried ({} when none was priced)."""
    return p.get("pick") or p.get("best_tried") or {}


def capacity_plot(p: dict) -> bytes:
    """Hit rate by L2 tier (one pass), L1 alone as a line, and the replayed tiers' TTFT change."""
    plt = pyplot()
    fig, left = plt.subplots(figsize=(8, 4))
    xs = [c["l2_tokens"] for c in p["curve"]]
    left.plot(xs, [c["hit_rate"] for c in p["curve"]], marker="o", color="#228833", label="hit rate (one pass)")
    left.axhline(p["reuse"]["l1_alone_hit_rate"], color="#888", ls="--", label="L1 alone")
    left.set_ylim(0, max([p["reuse"]["ceiling_hit_rate"], *[c["hit_rate"] for c in p["curve"]], 0.01]) * 1.1)
    left.set_xscale("log")
    left.set_xlabel("L2 tokens per rank")
    left.set_ylabel("hit rate")
    replayed = sorted({(r["l2_tokens_per_rank"], r["ttft_change_pct"]) for r in p["ranked"]
                       if r["ttft_change_pct"] is not None and not r["tp_shared"] and not r["l3"]
                       and r["write_policy"] == _chosen(p).get("write_policy")
                       and r["layout"] == _chosen(p).get("layout")})
    if replayed:
        right = left.twinx()
        right.plot([x for x, _ in replayed], [y for _, y in replayed], marker="s", color="#aa3377",
                   label="TTFT change % (replayed)")
        right.axhline(0, color="#aa3377", lw=0.6)
        right.set_ylabel("TTFT change vs HiCache off, %")
        no_offset(right)
    left.legend(loc="lower right", fontsize=8)
    left.set_title(f"{p['profile']}: capacity curve")
    fig.tight_layout()
    return png(fig)


def _profile_sections(p: dict) -> list[Section]:
    name = p["profile"]
    out = []
    if p["on"]:
        out.append(Section(f"{name}: flags to paste", code=p["command"], text=["Host settings:"] + p["host_settings"]))
    else:
        out.append(Section(f"{name}: no flags", text=[f"Leave --enable-hierarchical-cache out: {p['reason']}"]))
    out.append(Section(f"{name}: sizes and their arithmetic", text=p["sizes"]))
    out.append(Section(f"{name}: ranked configurations", text=[
        "TTFT change and net benefit against HiCache off on the same L1; intervals: 5th-95th percentile over the "
        "profile's ensemble, holding the central value; the word: gain when the whole interval is below zero, loss above, else undecided."],
        headers=["#", "configuration", "hit rate", "TTFT %", "interval", "net s", "interval", "answer"],
        rows=[[i + 1, r["label"], r["hit_rate"], r["ttft_change_pct"], _interval(r, "ttft_change_pct_interval", "+.2f"),
               r["net_benefit_seconds"], _interval(r, "net_benefit_seconds_interval", "+.2f"), r["answer"]]
              for i, r in enumerate(p["ranked"])]))
    if p["curve"]:
        out.append(Section(f"{name}: capacity curve", images=[capacity_plot(p)],
                           headers=["--hicache-ratio", "L2 tokens per rank", "hit rate"],
                           rows=[[c["hicache_ratio"], c["l2_tokens"], c["hit_rate"]] for c in p["curve"]]))
    if p["ladder"]:
        rows = [[s["step"], s["change"], s["kept"]["label"], s["ttft_change_pct"], s["net_benefit_seconds"], s["answer"]]
                for s in p["ladder"]]
        host = p.get("host_ladder", [])
        rows += [[f"host: {h['step']}", "priced on the kept configuration (no hit changes)", "", h["ttft_change_pct"],
                  h["net_benefit_seconds"], h["answer"]] for h in host]
        out.append(Section(f"{name}: the ladder on this trace", text=[
            "Each step keeps what the step before chose and tries its own values (the seed's order)."],
            headers=["step", "what it tries", "kept", "TTFT %", "net s", "answer"], rows=rows,
            images=[bars([r[0] for r in rows], [r[3] for r in rows], "TTFT change vs HiCache off, %",
                         f"{name}: each step's kept configuration")]))
    return out


def side_by_side(r: dict) -> Section:
    """One row per profile: on or off, its pick (or best tried) and its figures."""
    rows = []
    for p in r["profiles"]:
        top = next((x for x in p["ranked"] if x["label"] == _chosen(p).get("label")), None)
        rows.append([p["profile"], "on" if p["on"] else "off", None if top is None else top["label"],
                     None if top is None else top["ttft_change_pct"],
                     "n/m" if top is None else _interval(top, "ttft_change_pct_interval", "+.2f"),
                     None if top is None else top["net_benefit_seconds"], None if top is None else top["answer"]])
    return Section("profiles side by side", text=["The same replays, priced by each profile."],
                   headers=["profile", "HiCache", "configuration", "TTFT %", "interval", "net s", "answer"], rows=rows)


def advise_page(r: dict) -> str:
    sections = [side_by_side(r)] if len(r["profiles"]) > 1 else []
    sections += [s for p in r["profiles"] for s in _profile_sections(p)]
    sections.append(Section("run", text=[f"{r['requests']:,} requests ({r['input_tokens']:,} input tokens) of "
                                         f"{r['trace']}; {r['replays_run']} replays"]))
    return page("hicache advise", [p["headline"] for p in r["profiles"]], sections)

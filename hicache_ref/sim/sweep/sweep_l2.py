"""The L2 capacity sweep: one trace, one L1, L2 tier by tier; hit rate, transfers, plateau.

It finds the L2 capacity worth deploying (`hicache sweep`).
`one_pass` gets every tier from one LRU stack pass; `replay` replays each tier in parallel processes.
Both give the same keys, and `method` says which ran.
When each applies and the per-tier keys: hicache_ref/README.md, "Capacity sweep" and "Design notes".
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hicache_ref.sim.price import cost, spread
from hicache_ref.sim.run.baseline import off_spec
from hicache_ref.sim.run.replay_workers import replay_in_workers, worker_count
from hicache_ref.sim.run.serial_replay import replay
from hicache_ref.sim.sweep.plateau import DEFAULT_PLATEAU_GAIN, answer_row, find_plateau, paying_plateau
from hicache_ref.sim.trace.reader import TraceRequest
from hicache_ref.sim.trace.stack_distance import stack_profile
from hicache_ref.spec import CacheSpec
from hicache_ref.spec.capacity_check import check_capacity

METHODS = ("auto", "one_pass", "replay")
NET_ONE_PASS = ("one_pass: net benefit needs each request's hits (compute saved) and the modeled transfer "
                "seconds, which only a replay gives (`--method replay` gives them)")
SEGMENTS_ONE_PASS = ("one_pass: segments and modeled seconds depend on which slots pages land in, "
                     "which only a replay knows (`--method replay` gives them)")
_TIER_KEYS = ("l1_hit_tokens", "l2_hit_tokens", "d2h_tokens", "h2d_tokens", "d2h_bytes", "h2d_bytes",
              "d2h_segments", "h2d_segments", "modeled_transfer_seconds", "truncated_requests",
              "l2_unloaded_tokens")


def one_pass_refusal(spec: CacheSpec, tiers: list[int]) -> str | None:
    """Why the one-pass curve would not equal the replays for this spec and these tiers, or None."""
    t = spec.tiers
    if t.write_policy != "write_through":
        return f"write_policy {t.write_policy}: only write_through keeps L2 a superset of L1"
    if t.ghost:
        return "ghost list: it changes what is backed up"
    if t.materialize:
        return "materialize: real bytes are checked only by a replay"
    if t.l1_tokens is None:
        return "unlimited L1: every tier is the whole trace"
    l1 = t.l1_tokens // spec.page_size * spec.page_size
    if tiers[0] // spec.page_size * spec.page_size < l1:
        return f"tier {tiers[0]:,} below L1 {l1:,}: L2 would not hold all of L1"
    return None


def _check(spec: CacheSpec, tiers, plateau_gain, method: str) -> list[int]:
    if not isinstance(spec, CacheSpec):
        raise ValueError(f"spec: expected a CacheSpec, got {type(spec).__name__}")
    if spec.tiers.l1_tokens is None:
        raise ValueError("--l1-tokens: a sweep needs a finite L1 (the spec's tiers.l1_tokens)")
    tiers = list(tiers)
    if not tiers or any(isinstance(t, bool) or not isinstance(t, int) or t <= 0 for t in tiers):
        raise ValueError(f"l2_tokens: expected positive token counts, got {tiers!r}")
    find_plateau(tiers, [0.0] * len(tiers), 0.0, plateau_gain)  # tier order and gain checked before any work
    if method not in METHODS:
        raise ValueError(f"--method: {method!r} is not one of {', '.join(METHODS)}")
    if method == "one_pass" and (why := one_pass_refusal(spec, tiers)):
        raise ValueError(f"--method: one_pass does not apply: {why}")
    return tiers


def _replays(specs: list[CacheSpec], requests: list[TraceRequest], workers: int | None,
             tick: Callable[[], None], replay_tier: Callable[[CacheSpec, list], dict] | None = None) -> list[dict]:
    workers = worker_count(workers, len(specs))
    if workers == 1 or replay_tier is not None:  # another engine's replay runs here, one tier at a time
        out = []
        for s in specs:
            out.append(replay_tier(s, requests) if replay_tier is not None else replay(s, requests, off=False))
            tick()
        return out
    # fresh interpreters, not forks: the parent may hold transfer threads (a fork would copy their locks mid-use)
    return replay_in_workers(specs, requests, workers, tick)


def sweep(spec: CacheSpec, requests: list[TraceRequest], l2_tokens, plateau_gain: float = DEFAULT_PLATEAU_GAIN,
          method: str = "auto", workers: int | None = None,
          progress: Callable[[int, int], None] | None = None,
          replay_tier: Callable[[CacheSpec, list], dict] | None = None) -> dict:
    """Sweep `l2_tokens` (strictly increasing) over `requests` with `spec`'s L1 and policies.

    `method`: auto (one_pass where it applies, else replay), one_pass or replay; `workers`:
    processes for replay (default os.cpu_count()); `progress(done, total)` after each step.
    `replay_tier(spec, requests)`: what replays each L2 tier instead of the reference (another
    engine, hicache_ref.engines.replay_with; method replay only, serial, in this process); the
    L1-alone baseline stays the reference's (an L2 of 0 is no HiCache)."""
    if replay_tier is not None and method != "replay":
        raise ValueError(f"--method: {method}: another engine's tiers are replays (--method replay)")
    tiers = _check(spec, l2_tokens, plateau_gain, method)
    refusal = one_pass_refusal(spec, tiers)
    use = "one_pass" if method == "one_pass" or (method == "auto" and refusal is None) else "replay"
    ps = spec.page_size
    token_bytes = spec.geometry.token_bytes
    check_capacity(spec.replace(l2_tokens=tiers[-1]))  # the largest cache it builds, before any work
    total = 2 if use == "one_pass" else len(tiers) + 1
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    t0 = time.perf_counter()
    ensemble = sweep_ensemble(spec)
    alone_spec = off_spec(spec)
    if use == "one_pass":
        alone = replay(alone_spec, requests, off=False)
        tick()
        if alone["truncated_requests"]:
            if method == "one_pass":
                raise ValueError(f"--method: one_pass does not apply: {alone['truncated_requests']} requests do "
                                 "not fit in L1 (l1_tokens) and are cut")
            use, refusal = "replay", f"{alone['truncated_requests']} requests cut to fit L1"
            total = len(tiers) + 1
        else:
            rows = _one_pass_rows(spec, requests, tiers, alone, token_bytes)
            tick()
    if use == "replay":
        if replay_tier is None:
            figs = _replays([spec.replace(l2_tokens=t) for t in tiers] + [alone_spec], requests, workers, tick)
            alone = figs.pop()
        else:
            figs = _replays([spec.replace(l2_tokens=t) for t in tiers], requests, workers, tick, replay_tier)
            alone = _replays([alone_spec], requests, 1, tick)[0]
        rows = []
        for t, f in zip(tiers, figs, strict=True):  # each tier against the L1-alone run, as replay prices itself
            priced = tier_spread(f, alone, ensemble)
            rows.append({"l2_tokens": t, "hit_rate": f["hit_rate"], **{k: f[k] for k in _TIER_KEYS},
                         **{k: v for k, v in priced.items() if k.startswith(("net_benefit", "modeled_ttft"))},
                         **{k: priced.get(k) for k in spread.KEYS}})
    plateau = paying_plateau(tiers, [r["hit_rate"] for r in rows], alone["hit_rate"],
                             [r.get("net_benefit_seconds") for r in rows], plateau_gain)
    for row, gain in zip(rows, plateau.marginal_gains, strict=True):
        row["marginal_gain"] = gain
        row["registered_bytes"] = row["l2_tokens"] // ps * ps * token_bytes
        if "net_benefit_seconds" not in row:  # one pass: the tier's own replay did not run
            row.update(spread.unpriced(), net_benefit_seconds=None, net_benefit_reason=NET_ONE_PASS)
    # the answer at the capacity worth deploying; when none pays, at the best tier (how sure the loss is)
    at = answer_row(rows, plateau, "l2_tokens") or dict.fromkeys(("l2_tokens", *spread.KEYS))
    return dict(method=use, **{k: at[k] for k in spread.KEYS}, answer_l2_tokens=at["l2_tokens"],
                one_pass_refusal=refusal, tiers=rows, plateau_l2_tokens=plateau.plateau_l2_tokens,
                on_plateau=plateau.on_plateau, none_pays=plateau.none_pays, plateau_gain=plateau_gain,
                l1_tokens=alone["l1_tokens"],
                l1_alone_hit_rate=alone["hit_rate"], requests=alone["requests"], input_tokens=alone["input_tokens"],
                page_size=ps, write_policy=spec.tiers.write_policy, host_layout=spec.tiers.host_layout,
                profile=alone["profile"], geometry=spec.geometry.config(), token_bytes=token_bytes,
                spec=spec.to_dict(), wall_seconds=time.perf_counter() - t0)


def sweep_ensemble(spec: CacheSpec) -> tuple | None:
    """The parameter ensemble every tier is priced over (hicache_ref.sim.price.spread), None without a profile."""
    if spec.profile is None:
        return None
    from hardware_profiles import load_profile

    return spread.members(load_profile(spec.profile))


def tier_spread(fig: dict, alone: dict, ensemble) -> dict:
    """A tier's net-benefit keys, answer and intervals against the sweep's L1-alone run `alone`, priced
    here over `ensemble` (its replay may have run in another process; None: no profile to price with)."""
    return cost.replay_figures(None if ensemble is None else ensemble[0], fig, alone, ensemble)


def _one_pass_rows(spec: CacheSpec, requests, tiers: list[int], alone: dict, token_bytes: int) -> list[dict]:
    ps = spec.page_size
    profile = stack_profile(requests, ps)
    hit_pages = profile.hit_pages([t // ps for t in tiers])
    full_tokens = int(profile.full_pages.sum()) * ps
    l1_hit = alone["l1_hit_tokens"]
    rows = []
    for t, pages in zip(tiers, hit_pages, strict=True):
        hit = int(pages) * ps
        d2h, h2d = full_tokens - hit, hit - l1_hit
        rows.append(dict(l2_tokens=t, hit_rate=hit / profile.input_tokens if profile.input_tokens else 0.0,
                         l1_hit_tokens=l1_hit, l2_hit_tokens=h2d, d2h_tokens=d2h, h2d_tokens=h2d,
                         d2h_bytes=d2h * token_bytes, h2d_bytes=h2d * token_bytes, d2h_segments=None,
                         h2d_segments=None, modeled_transfer_seconds=None, segments_reason=SEGMENTS_ONE_PASS,
                         truncated_requests=0, l2_unloaded_tokens=0))
    return rows

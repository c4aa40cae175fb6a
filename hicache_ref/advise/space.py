"""The configurations upstream accepts, as the search walks them.

Layout x io backend: SGLang 0.5.23 resolves the pair before it builds the host pool
(hicache_ref.spec.root's io resolution mirrors it): page_first with direct becomes
page_first_direct, page_first_direct always moves by direct, page_head moves by kernel only.
Pairs that resolve to the same pool are one candidate, named by the flags that ask for it.
L2 tiers are --hicache-ratio steps over L1, sized as upstream does (hicache_ref.spec.sizing),
up to what host memory holds and no further than the whole trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hal.transfer.io_backend import IO_BACKENDS, effective_host_layout
from hal.transfer.layout_registry import get_layout
from hal.transfer.layouts import HOST_LAYOUTS, MLA_LAYOUTS
from hicache_ref.core.policy import POLICIES
from hicache_ref.spec import sizing

UPSTREAM_DEFAULT_POLICY = "write_through"  # SGLang 0.5.23's --hicache-write-policy default
RATIOS = (1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0)


@dataclass(frozen=True)
class Candidate:
    """One HiCache configuration: the flags' values and the deployment's host-pool sharing."""

    layout: str  # --hicache-mem-layout as given
    io_backend: str  # --hicache-io-backend as resolved
    write_policy: str
    ratio: float  # --hicache-ratio: L2 per rank = this x L1, as upstream rounds it
    l2_per_rank: int
    tp_shared: bool = False
    l3: bool = False

    def but(self, **changes) -> Candidate:
        return replace(self, **changes)

    def label(self) -> str:
        return (f"{self.layout}+{self.io_backend}, {self.write_policy}, ratio {self.ratio:g}"
                + (", TP-shared" if self.tp_shared else "") + (", L3" if self.l3 else ""))

    def to_json(self) -> dict:
        return dict(layout=self.layout, io_backend=self.io_backend, write_policy=self.write_policy,
                    hicache_ratio=self.ratio, l2_tokens_per_rank=self.l2_per_rank, tp_shared=self.tp_shared,
                    l3=self.l3, label=self.label())


def layout_io_pairs(attention: str) -> list[tuple[str, str]]:
    """(layout, io backend) pairs upstream accepts for `attention`, one per distinct resolved pool."""
    layouts = MLA_LAYOUTS if attention == "mla" else HOST_LAYOUTS
    seen, out = set(), []
    for layout in layouts:
        for io in IO_BACKENDS:
            lay = get_layout(layout)
            if io == "direct" and not lay.upstream_direct:
                continue  # page_head: kernel only
            resolved_io = "direct" if lay.native_io_backend == "direct" else io
            pool = (effective_host_layout(layout, resolved_io), resolved_io)
            if pool not in seen:
                seen.add(pool)
                out.append(pool)  # named as the pool upstream builds
    return out


def write_policies() -> tuple[str, ...]:
    """The write policies upstream takes, its default first."""
    return (UPSTREAM_DEFAULT_POLICY, *[p for p in POLICIES if p != UPSTREAM_DEFAULT_POLICY])


def ranks_on_node(profile, tp: int) -> int:
    """Ranks whose host pools share one node's memory: one per card of the node where the profile
    says how many (a TP group wider than a node spans several), else the TP group."""
    return profile.device.devices_per_node or tp


def host_budget_tokens(profile, token_bytes: int, ranks: int, host_gib: float | None = None) -> tuple[int | None, str]:
    """Host tokens one rank's pool may take: the node's memory (`host_gib`, else the profile's) less
    upstream's 10 GiB reserve, over the ranks that share the node; (None, why) when neither gives it."""
    h = profile.host
    if host_gib is not None:
        return _per_rank(host_gib * 2**30, f"{host_gib:,.12g} GiB (--host-gib)", "--host-gib", token_bytes, ranks)
    if h.numa_nodes and h.memory_per_node_gib:
        return _per_rank(h.numa_nodes * h.memory_per_node_gib * 2**30,
                         f"{h.numa_nodes} nodes x {h.memory_per_node_gib:g} GiB", f"--profile {profile.name}",
                         token_bytes, ranks)
    return None, (f"profile {profile.name} gives no host memory (host.numa_nodes, host.memory_per_node_gib): "
                  "the host pools tried are not bounded by it; --host-gib gives a node's")


def _ranks(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def _per_rank(total: float, source: str, option: str, token_bytes: int, ranks: int,
              remedy: str = "") -> tuple[int, str]:
    free = total - sizing.HOST_MEMORY_RESERVE_BYTES
    if free < ranks * token_bytes:
        raise ValueError(f"{option}: {source} holds no host pool for {_ranks(ranks)} after upstream's 10 GiB "
                         f"reserve{remedy}")
    per_rank = int(free // ranks)
    tokens = per_rank // token_bytes
    return tokens, (f"host: {source} = {total / 1e9:,.1f} GB, less upstream's 10 GiB reserve, over {_ranks(ranks)} "
                    f"= {per_rank / 1e9:,.1f} GB per rank = {tokens:,} tokens of {token_bytes:,} B")


def check_host_gib(host_gib: float, l1_tokens: int, page_size: int, token_bytes: int, ranks: int) -> None:
    """--host-gib must hold the smallest pool upstream takes (larger than L1: the first --hicache-ratio
    step) on each of the node's ranks, after its 10 GiB reserve; ValueError naming it and the least that does."""
    need = sizing.host_tokens(l1_tokens, page_size, token_bytes, ratio=RATIOS[0])
    least = math.ceil((need * token_bytes * ranks + sizing.HOST_MEMORY_RESERVE_BYTES) / 2**30 * 10) / 10
    budget, _ = _per_rank(host_gib * 2**30, f"{host_gib:,.12g} GiB", "--host-gib", token_bytes, ranks,
                          remedy=f": give at least {least:,.1f} GiB")
    if need > budget:
        raise ValueError(f"--host-gib: {host_gib:,.12g} GiB leaves {budget:,} tokens a rank for {_ranks(ranks)}; the "
                         f"smallest host pool upstream takes (--hicache-ratio {RATIOS[0]:g} of L1's {l1_tokens:,}) "
                         f"is {need:,}: give at least {least:,.1f} GiB")


def l2_tiers(l1_tokens: int, page_size: int, token_bytes: int, whole_tokens: int,
             budget_tokens: int | None) -> list[tuple[float, int]]:
    """(ratio, L2 tokens per rank) of each --hicache-ratio step: above L1 (upstream requires it),
    within the host budget, the first step at or past the whole trace the last."""
    out = []
    for r in RATIOS:
        tokens = sizing.host_tokens(l1_tokens, page_size, token_bytes, ratio=r)
        if tokens <= l1_tokens or (budget_tokens is not None and tokens > budget_tokens):
            continue
        out.append((r, tokens))
        if tokens >= whole_tokens:
            break
    return out

"""HiCache off, one definition for every command: the same trace and the same spec through L1 alone.

replay, sweep, ablate and conform (and what prices on top of them) all take their TTFT change and
net benefit against this run: the spec's L1, page size, geometry, semantics and serving (concurrency,
arrival times, PD release), with no L2, no L3 and no TP group (each rank's L1 is its own), replayed
by the reference and priced with nothing registered and nothing moved (hicache_ref.sim.price.cost.off_price).
Whether HiCache helps is then measured against what a server without it would actually hit, not
against the L1 hits of a run whose L1 HiCache itself refilled. docs/model.md, "Net benefit and TTFT change".
"""

from __future__ import annotations

import dataclasses

from hicache_ref.spec import CacheSpec
from hicache_ref.spec.storage import StorageSpec
from hicache_ref.spec.tp import TPSpec


def off_spec(spec: CacheSpec) -> CacheSpec:
    """The spec of HiCache off for `spec`: L2 0, no L3, no TP group, priced not materialized
    (hits do not depend on bytes), on a backend of the spec's profile (backend None)."""
    if is_off(spec):
        return spec
    tiers = dataclasses.replace(spec.tiers, l2_tokens=0, materialize=False)
    return dataclasses.replace(spec, tiers=tiers, storage=StorageSpec(), tp=TPSpec(), backend=None)


def is_off(spec: CacheSpec) -> bool:
    """Whether `spec` already is HiCache off (L2 0, no L3, no TP group, not materialized)."""
    t = spec.tiers
    return t.l2_tokens == 0 and spec.storage.l3 is None and spec.tp.ranks is None and not t.materialize \
        and spec.backend is None


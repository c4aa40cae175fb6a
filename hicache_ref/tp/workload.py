"""The seeded random workload every rank drives through its reference HiCache.

`make_ops` turns the seed alone into the op list, the same on every rank. Requests take a prefix of
one of a few documents plus a fresh suffix, so prefixes are shared; the ops insert, match, evict,
load back and back up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from hicache_ref.core.allocator import ORDERS
from hicache_ref.core.policy import POLICIES

KINDS = ("insert", "match", "evict", "evict_host", "load_back", "backup")
WEIGHTS = (0.40, 0.10, 0.10, 0.08, 0.17, 0.15)
TOKEN_LIMIT = 1 << 31


class Op(NamedTuple):
    kind: str
    tokens: np.ndarray  # the request (insert) or the document prefix (match, load_back, backup)
    pages: int  # evict / evict_host: how many pages to free


@dataclass(frozen=True)
class WorkloadConfig:
    """One SPMD run: what every rank does, and the hooks tests use to break it."""

    ops: int = 200
    seed: int = 0
    free_list: str = "fifo"
    check_every: int = 32
    shared: bool = False
    shared_dir: str | None = None
    inject_divergence_at: int | None = None  # perturb the last rank's allocator at this op
    write_policy: str = "write_through_selective"
    # MLA geometry, small so that 8 ranks on 2 cores stay quick; real bytes throughout.
    layers: int = 2
    kv_dim: int = 64
    page_size: int = 4
    l1_pages: int = 24  # small tiers: evictions, write-backs and load-backs from the first ops on
    l2_pages: int = 48
    documents: int = 10
    max_doc_pages: int = 10
    timeout: float = 30.0  # every collective, and the rendezvous
    backend: str = "emu"
    profile: str | None = None
    gate: bool = True  # the visibility protocol (off only to show it is needed)
    self_check: bool = True  # log and compare decisions (off only for the bench's baseline)
    d2h_delay_ms: float = 0.0  # rank 0 sleeps up to this long before each D2H (stress)
    faults: dict = field(default_factory=dict)  # test hooks: fail_attach_rank, kill_in_setup_rank, kill_at, hang_at

    def __post_init__(self):
        for name in ("ops", "check_every", "layers", "kv_dim", "page_size", "l1_pages", "l2_pages", "documents",
                     "max_doc_pages"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: expected a non-negative integer, got {self.seed!r}")
        if self.free_list not in ORDERS:
            raise ValueError(f"free_list: {self.free_list!r} is not one of {', '.join(ORDERS)}")
        if self.write_policy not in POLICIES:
            raise ValueError(f"write_policy: {self.write_policy!r} is not one of {', '.join(POLICIES)}")
        i = self.inject_divergence_at
        if i is not None and (isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.ops):
            raise ValueError(f"inject_divergence_at: expected an op index in [0, {self.ops}), got {i!r}")
        if self.shared and self.shared_dir is None:
            raise ValueError("shared_dir: a shared host pool needs a directory for its file (e.g. /dev/shm)")
        if not self.timeout > 0:
            raise ValueError(f"timeout: expected seconds > 0, got {self.timeout!r}")

    def as_dict(self) -> dict:
        return asdict(self)


def make_ops(cfg: WorkloadConfig) -> list[Op]:
    """The op list of `cfg`, a function of its seed and sizes only."""
    rng = np.random.default_rng(cfg.seed)
    ps = cfg.page_size
    docs = [rng.integers(0, TOKEN_LIMIT, size=int(rng.integers(2, cfg.max_doc_pages + 1)) * ps, dtype=np.int64)
            for _ in range(cfg.documents)]
    ops = []
    for _ in range(cfg.ops):
        kind = KINDS[int(rng.choice(len(KINDS), p=WEIGHTS))]
        doc = docs[int(rng.integers(len(docs)))]
        prefix = doc[: int(rng.integers(1, len(doc) // ps + 1)) * ps]
        if kind == "insert":
            suffix = rng.integers(0, TOKEN_LIMIT, size=int(rng.integers(0, 3 * ps)), dtype=np.int64)
            tokens = np.concatenate([prefix, suffix])
        else:
            tokens = prefix
        pages = int(rng.integers(1, max(2, cfg.l1_pages // 4)))
        ops.append(Op(kind, tokens, pages))
    return ops

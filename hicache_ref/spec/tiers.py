"""The tiers node: L1/L2 capacities (or upstream-style L2 sizing), write policy, ghost list, free
lists, host layout, io_backend and whether pools hold real bytes.

Capacities are tokens; None is unlimited (sized to the whole trace), an L2 of 0 is no L2.
`hicache_ratio` / `hicache_size` size L2 from L1 as upstream does (hicache_ref.spec.sizing); the
root spec resolves them into `l2_tokens`. The free lists, host layout and io_backend left None
take the semantics preset's values there too.
"""

from __future__ import annotations

from dataclasses import dataclass

from hal.common.units import HELP as UNITS
from hal.transfer.io_backend import IO_BACKENDS
from hal.transfer.layouts import HOST_LAYOUTS, layout_names
from hicache_ref.core.allocator import ORDERS
from hicache_ref.core.policy import POLICIES
from hicache_ref.spec.fields import (
    ALL_COMMANDS,
    fail,
    flag,
    one_of,
    param,
    parse_int,
    parse_real,
    parse_tokens,
    real,
    whole,
)

MIN_GHOST_ENTRIES = 1024  # the ghost list's default bound: L1 pages, at least this many
SIZE_HELP = UNITS  # how a token count is written: 2M, 64K, 1MiB


MAX_HICACHE_RATIO = 10_000  # upstream uses 2 to 10; past this no host holds the L2 it asks for


@dataclass(frozen=True)
class TiersSpec:
    """What each tier holds and how KV moves between them."""

    PATH = "tiers"
    l1_tokens: int | None = param(None, "--l1-tokens", f"device (L1) capacity in tokens ({SIZE_HELP})",
                                  parse=parse_tokens, shown_default="unlimited", commands=ALL_COMMANDS | {"trace stats", "advise"},
                                  per_command={"sweep": {"required": True},  # a sweep needs a finite L1
                                               "trace stats": {"shown_default": "none: no L1 figure"},
                                               "ablate": {"shown_default": "1/16 of the trace's tokens, per rank"}})
    l2_tokens: int | None = param(None, "--l2-tokens", f"host (L2) capacity in tokens ({SIZE_HELP}); 0: no L2",
                                  parse=parse_tokens, shown_default="unlimited",
                                  commands={"replay", "ablate", "trace stats"},
                                  per_command={"ablate": {"shown_default": "1/4 of the trace's tokens, per rank; "
                                                          "at least the sweep's 8 tiers of whole pages per rank"},
                                               "trace stats": {"shown_default": "none: no L2 figure"}})
    mem_fraction_static: float | None = param(None, "--mem-fraction-static", "share of device memory SGLang "
                                              "gives weights and the KV pool (its option of that name); with "
                                              "--model it sizes L1 when --l1-tokens is not given",
                                              parse=parse_real(1.0), metavar="F",
                                              shown_default="0.85 with --model (say yours)",
                                              commands=ALL_COMMANDS | {"advise"})
    hicache_ratio: float | None = param(None, "--hicache-ratio", "L2 = this x L1 tokens, aligned up to pages "
                                        "plus one, as upstream (needs --l1-tokens)", parse=parse_real(),
                                        metavar="R", commands={"replay"})
    hicache_size: int | None = param(None, "--hicache-size", "L2 = this many GB (10^9 bytes) per rank of KV, "
                                     "as upstream; give it or --hicache-ratio", parse=parse_int(1), metavar="GB",
                                     commands={"replay"})
    write_policy: str = param("write_through_selective", "--write-policy", "when L1 pages are backed up to L2 "
                              "(write_through allows sweep's one-pass curve)", choices=POLICIES,
                              commands={"replay", "sweep", "bench replay"})
    ghost: bool = param(False, "--ghost", "back up prefixes proven reused by a ghost list of L1 evictions",
                        flag=True, commands={"replay", "sweep"})
    ghost_entries: int | None = param(None, "--ghost-entries", f"with --ghost: ghost list bound ({SIZE_HELP})",
                                      parse=parse_tokens, shown_default=f"L1 pages, at least {MIN_GHOST_ENTRIES}",
                                      commands={"replay", "sweep"})
    free_list: str | None = param(None, "--free-list", "device (L1) free-list order (hicache_ref.core.allocator)",
                                  choices=ORDERS, shown_default="the preset's",
                                  commands={"replay", "sweep"})
    host_free_list: str | None = param(None, "--host-free-list", "host (L2) free-list order", choices=ORDERS,
                                       shown_default="the preset's, else --free-list's", commands={"replay", "sweep"})
    host_layout: str | None = param(None, "--host-layout", "host KV layout (in a replay, page_first is used "
                                    "as page_first_direct with --io-backend direct, as upstream)",
                                    choices=HOST_LAYOUTS, shown_default="the preset's (reference: layer_first)",
                                    commands={"replay", "sweep", "plan", "bench replay"})
    io_backend: str | None = param(None, "--io-backend", "how host KV moves: direct (one copy per merged run) or "
                                   "kernel (launches and per-item copies)", choices=IO_BACKENDS,
                                   shown_default="the preset's", commands={"replay", "sweep"})
    materialize: bool = param(False, "--materialize", "real KV pools and bytes; every hit checked bit for bit",
                              flag=True, commands={"replay", "sweep"})

    def __post_init__(self):
        for name in ("l1_tokens", "l2_tokens"):
            whole(self, name, 0, none_ok=True)
        if self.l1_tokens == 0:
            raise fail(self, "l1_tokens", "0 tokens hold no page: L1 needs at least one page")
        real(self, "hicache_ratio", positive=True, none_ok=True)
        if self.hicache_ratio is not None and self.hicache_ratio > MAX_HICACHE_RATIO:  # blamed on itself, not L2
            raise fail(self, "hicache_ratio", f"at most {MAX_HICACHE_RATIO:,} (L2 that many times L1), "
                                              f"got {self.hicache_ratio:.3g}")
        real(self, "mem_fraction_static", positive=True, none_ok=True)
        if self.mem_fraction_static is not None and self.mem_fraction_static > 1:
            raise fail(self, "mem_fraction_static", f"a share of device memory is at most 1, got {self.mem_fraction_static!r}")
        whole(self, "hicache_size", 1, none_ok=True)
        if self.hicache_ratio is not None and self.hicache_size is not None:
            raise fail(self, "hicache_size", "overrides --hicache-ratio (as upstream); give one of the two")
        one_of(self, "write_policy", POLICIES)
        flag(self, "ghost")
        whole(self, "ghost_entries", 1, none_ok=True)
        if self.ghost_entries is not None and not self.ghost:
            raise fail(self, "ghost_entries", "bounds the ghost list, which only --ghost turns on")
        for name in ("free_list", "host_free_list"):
            if getattr(self, name) is not None:
                one_of(self, name, ORDERS)
        if self.io_backend is not None:
            one_of(self, "io_backend", IO_BACKENDS)
        if self.host_layout is not None:
            one_of(self, "host_layout", layout_names())  # asked at check time: a layout registered at run time too
        flag(self, "materialize")

    def sizing_option(self) -> str | None:
        """The upstream sizing option given, if any."""
        return "hicache_size" if self.hicache_size is not None else "hicache_ratio" if self.hicache_ratio else None

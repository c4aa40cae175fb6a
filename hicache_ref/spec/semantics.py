"""The semantics node: a preset name, the request-path switches given explicitly, what they override.

Switches left None take the preset's value when the root spec is made (hicache_ref.spec.root);
afterwards every switch holds its resolved value and `overrides` lists those that differ from
the preset. The free lists, host layout and io_backend are switches too, but live on the tiers node.
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_ref.core.policy import HIT_COUNTS
from hicache_ref.core.radix import BACKUP_SCOPES
from hicache_ref.core.tiers import BACKUP_ALLOCS, EVICT_SIZES, HOST_RECLAIMS
from hicache_ref.spec.fields import fail, one_of, param, parse_tokens, whole
from hicache_ref.spec.presets import DEFAULT_PRESET, PRESETS, preset_names

IO_RESOLUTIONS = ("as_given", "sglang")  # the project's pricing of what is given, SGLang 0.5.23's rules
HOST_SIZINGS = ("refuse", "warn")  # an L2 no larger than L1: refused (0.5 releases), a warning (0.5.23)
COMMANDS = {"replay", "sweep"}  # the ladder (ablate) sets its own hit counting


@dataclass(frozen=True)
class SemanticsSpec:
    """Which decisions the request path makes (hit counting, backups, eviction size, load_back)."""

    PATH = "semantics"
    preset: str = param(DEFAULT_PRESET, "--semantics", "preset for the request-path switches: "
                        "sglang-0.5.23 (that release's decisions), seed (the SGLang HiRadixCache the seed "
                        "tuned) or reference; each switch given explicitly overrides it (the table: "
                        "hicache_ref/README.md)", choices=preset_names(), commands=COMMANDS)
    hit_count: str | None = param(None, "--hit-count", "per_insert: every insert counts a hit (seed); "
                                  "per_request: a request counts each node once (reference); "
                                  "per_request_insert: only past what the request already inserted, and "
                                  "only counted nodes back up (sglang-0.5.23)", choices=HIT_COUNTS,
                                  shown_default="the preset's", commands=COMMANDS)
    backup_scope: str | None = param(None, "--backup-scope", "node: back up a node once its parent is backed up "
                                     "(seed, reference); path: its unbacked ancestors with it (sglang-0.5.23)",
                                     choices=BACKUP_SCOPES, shown_default="the preset's", commands=COMMANDS)
    backup_alloc: str | None = param(None, "--backup-alloc", "whole_chain: a backup takes host slots for all "
                                     "its nodes or none; per_node: node by node, keeping those that fit "
                                     "(sglang-0.5.23)", choices=BACKUP_ALLOCS, shown_default="the preset's",
                                     commands=COMMANDS)
    evict_size: str | None = param(None, "--evict-size", "whole: a short tier evicts as much as the allocation "
                                   "asks (seed); shortfall: only what is missing (reference); demand_shortfall: "
                                   "what an extend's tokens plus a page exceed the free tokens by (sglang-0.5.23)",
                                   choices=EVICT_SIZES, shown_default="the preset's", commands=COMMANDS)
    host_reclaim: str | None = param(None, "--host-reclaim", "under write_back, what L2 eviction frees first: "
                                     "leaves (host-only leaves) or duplicates_first (L2 copies of nodes also "
                                     "in L1, sglang-0.5.23)", choices=HOST_RECLAIMS, shown_default="the preset's",
                                     commands=COMMANDS)
    io_resolution: str | None = param(None, "--io-resolution", "as_given: the layout and io backend priced as "
                                      "given; sglang: page_first_direct with kernel runs direct, page_head "
                                      "with direct is refused (sglang-0.5.23)", choices=IO_RESOLUTIONS,
                                      shown_default="the preset's", commands=COMMANDS)
    host_sizing: str | None = param(None, "--host-sizing", "an L2 sized by --hicache-ratio/--hicache-size no "
                                    "larger than L1: refuse, or warn and go on (sglang-0.5.23)",
                                    choices=HOST_SIZINGS, shown_default="the preset's", commands=COMMANDS)
    load_back_threshold: int | None = param(None, "--load-back-threshold", "host-cached prefixes shorter than "
                                            "this many tokens are recomputed, not loaded (seed, sglang-0.5.23: 10; reference 0)",
                                            parse=parse_tokens, metavar="TOKENS", shown_default="the preset's", commands=COMMANDS)
    load_back_quota: int | None = param(None, "--load-back-quota", "refuse loads of more tokens than this "
                                        "(upstream's mem_quota)", parse=parse_tokens, metavar="TOKENS",
                                        shown_default="none", commands=COMMANDS)
    overrides: tuple = ()  # set by the root: switches given that differ from the preset (not an option)

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise fail(self, "preset", f"{self.preset!r} is not one of {', '.join(PRESETS)}")
        for name, choices in (("hit_count", HIT_COUNTS), ("backup_scope", BACKUP_SCOPES),
                              ("backup_alloc", BACKUP_ALLOCS), ("evict_size", EVICT_SIZES),
                              ("host_reclaim", HOST_RECLAIMS), ("io_resolution", IO_RESOLUTIONS),
                              ("host_sizing", HOST_SIZINGS)):
            if getattr(self, name) is not None:
                one_of(self, name, choices)
        whole(self, "load_back_threshold", 0, none_ok=True)
        whole(self, "load_back_quota", 0, none_ok=True)

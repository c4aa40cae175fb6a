"""The semantics node: a preset name, the request-path switches given explicitly, what they override.

Switches left None take the preset's value when the root spec is made (hicache_ref.spec.root);
afterwards every switch holds its resolved value and `overrides` lists those that differ from
the preset. The free lists and io_backend are switches too, but live on the tiers node.
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_ref.core.policy import HIT_COUNTS
from hicache_ref.core.radix import BACKUP_SCOPES
from hicache_ref.core.tiers import EVICT_SIZES
from hicache_ref.spec.fields import fail, one_of, param, parse_tokens, whole
from hicache_ref.spec.presets import PRESETS, preset_names

COMMANDS = {"replay", "sweep"}  # the ladder (ablate) sets its own hit counting


@dataclass(frozen=True)
class SemanticsSpec:
    """Which decisions the request path makes (hit counting, backups, eviction size, load_back)."""

    PATH = "semantics"
    preset: str = param("reference", "--semantics", "preset for the request-path switches: upstream (SGLang's "
                        "decisions) or reference; each switch given explicitly overrides it", choices=preset_names(), commands=COMMANDS)
    hit_count: str | None = param(None, "--hit-count", "per_insert: every insert counts a hit, as upstream; "
                                  "per_request: a request counts each node once (reference)", choices=HIT_COUNTS,
                                  shown_default="the preset's", commands=COMMANDS)
    backup_scope: str | None = param(None, "--backup-scope", "node: back up a node once its parent is backed up, "
                                     "as upstream; path: its ancestors with it (the seed's)", choices=BACKUP_SCOPES,
                                     shown_default="the preset's", commands=COMMANDS)
    evict_size: str | None = param(None, "--evict-size", "whole: a short tier evicts as much as the allocation "
                                   "asks, as upstream; shortfall: only what is missing (reference)",
                                   choices=EVICT_SIZES, shown_default="the preset's", commands=COMMANDS)
    load_back_threshold: int | None = param(None, "--load-back-threshold", "host-cached prefixes shorter than "
                                            "this many tokens are recomputed, not loaded (upstream 10, reference 0)",
                                            parse=parse_tokens, metavar="TOKENS", shown_default="the preset's", commands=COMMANDS)
    load_back_quota: int | None = param(None, "--load-back-quota", "refuse loads of more tokens than this "
                                        "(upstream's mem_quota)", parse=parse_tokens, metavar="TOKENS",
                                        shown_default="none", commands=COMMANDS)
    overrides: tuple = ()  # set by the root: switches given that differ from the preset (not an option)

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise fail(self, "preset", f"{self.preset!r} is not one of {', '.join(PRESETS)}")
        for name, choices in (("hit_count", HIT_COUNTS), ("backup_scope", BACKUP_SCOPES),
                              ("evict_size", EVICT_SIZES)):
            if getattr(self, name) is not None:
                one_of(self, name, choices)
        whole(self, "load_back_threshold", 0, none_ok=True)
        whole(self, "load_back_quota", 0, none_ok=True)

"""The TP node: ranks of a tensor-parallel group sharing one trace, and whether they share a host copy."""

from __future__ import annotations

from dataclasses import dataclass

from hicache_ref.spec.fields import fail, flag, param, parse_int, whole


@dataclass(frozen=True)
class TPSpec:
    """A TP group: `ranks` None is a single rank."""

    PATH = "tp"
    ranks: int | None = param(None, "--tp", "TP ranks sharing the trace (figures for the group)",
                              parse=parse_int(1, 1024), shown_default="one rank", commands={"replay", "ablate", "advise"},
                              per_command={cmd: {"shown_default": "the profile's devices per node"}
                                           for cmd in ("ablate", "advise")})
    shared_host: bool = param(False, "--shared-host", "with --tp: one host KV copy for the group (effective L2 "
                              "N x --l2-tokens, only rank 0 writes)", flag=True, commands={"replay"})

    def __post_init__(self):
        whole(self, "ranks", 1, 1024, none_ok=True)
        flag(self, "shared_host")
        if self.shared_host and self.ranks is None:
            raise fail(self, "shared_host", "shares one host pool among the ranks of --tp N; give --tp")

"""The storage node: the L3 store under L2 (a spec string naming a registered store) and its prefetch.

`l3` is NAME:ARGS for a store in hicache_ref.storage.registry (file:DIR, mooncake:..., memory:);
a new kind of store is a registered name, not a field. The prefetch options apply only with an L3
and are resolved to their defaults once one is given (the policy, its timeout start and the rate
limit's rule from the semantics preset, by the root spec).
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_ref.l3.policy import DEFAULT_PREFETCH_POLICY, PREFETCH_POLICIES, TIMEOUT_STARTS
from hicache_ref.l3.tier import DEFAULT_THRESHOLD_TOKENS, LIMIT_RULES
from hicache_ref.spec.fields import fail, one_of, param, parse_int, parse_tokens, real, whole

L3_ONLY = {"replay"}
L3_COMMANDS = {"replay", "sweep"}  # --l3 model: runs in both (no bytes); a real store needs --materialize
MODEL_STORE = "model"


def is_model_store(l3: str | None) -> bool:
    """Whether the L3 spec names the store that moves no bytes (hicache_ref.storage.model)."""
    return isinstance(l3, str) and l3.strip().partition(":")[0] == MODEL_STORE


_SLACK_MS = parse_int(0, 3_600_000)


@dataclass(frozen=True)
class StorageSpec:
    """An L3 store and when a request waits for what it prefetches."""

    PATH = "storage"
    l3: str | None = param(None, "--l3", "L3 store under L2: file:DIR[,max_bytes=SIZE], mooncake:METADATA_URL,"
                           "MASTER_ADDR, mooncake:auto (a loopback cluster of its own) or memory:[max_bytes=SIZE] "
                           "(needs --materialize and an L2), or model: (keys and sizes only, no bytes: any geometry, priced by "
                           "the profile's l3_link); adds l3_* figures", metavar="SPEC", commands=L3_COMMANDS)
    l3_tokens: int | None = param(None, "--l3-tokens", "with --l3 model:: the L3 store's capacity in tokens "
                                  "(least recently used pages go past it; 2M, 64K, ...)", parse=parse_tokens,
                                  shown_default="unlimited", commands={"replay"})
    prefetch_policy: str | None = param(None, "--prefetch-policy", "with --l3: when a request stops waiting for "
                                        "its prefetch (best_effort fetches only within --prefetch-slack-ms)",
                                        choices=tuple(PREFETCH_POLICIES),
                                        shown_default=f"the preset's (reference: {DEFAULT_PREFETCH_POLICY})",
                                        commands=L3_COMMANDS)
    prefetch_timeout_start: str | None = param(None, "--prefetch-timeout-start", "with --l3 and the timeout "
                                               "policy: its budget counts from issue, or from the first blocked "
                                               "admission poll, after the queue time (sglang-0.5.23)",
                                               choices=TIMEOUT_STARTS, shown_default="the preset's",
                                               commands=L3_COMMANDS)
    prefetch_limit_rule: str | None = param(None, "--prefetch-limit-rule", "with --l3: cut (in-flight tokens plus "
                                            "the new prefetch under 0.8 x L2, cut to fit) or decline (none once "
                                            "0.5 x L2 is in flight, never cut: sglang-0.5.23)",
                                            choices=tuple(LIMIT_RULES), shown_default="the preset's",
                                            commands=L3_COMMANDS)
    prefetch_threshold: int | None = param(None, "--prefetch-threshold", "with --l3: fewer L3 tokens than this "
                                           "are not prefetched", parse=parse_int(0),
                                           shown_default=str(DEFAULT_THRESHOLD_TOKENS), commands=L3_COMMANDS)
    prefetch_limit_tokens: int | None = param(None, "--prefetch-limit", "with --l3: rate limit, tokens in flight",
                                              parse=parse_int(0), shown_default="the rule's share of L2",
                                              commands=L3_COMMANDS)
    prefetch_slack_seconds: float | None = param(None, "--prefetch-slack-ms", "with --l3: modeled queue time, "
                                                 "whole ms, a request has before it is scheduled",
                                                 parse=lambda text: _SLACK_MS(text) / 1000,
                                                 shown_default="0: serial replay", commands=L3_COMMANDS)

    def __post_init__(self):
        if self.l3 is None:
            for name in ("prefetch_policy", "prefetch_timeout_start", "prefetch_limit_rule", "prefetch_threshold",
                         "prefetch_limit_tokens", "prefetch_slack_seconds", "l3_tokens"):
                if getattr(self, name) is not None:
                    raise fail(self, name, "applies to an L3: give --l3 SPEC")
            return
        from hicache_ref.storage.registry import split_spec, storage_class

        try:
            storage_class(split_spec(self.l3)[0])
        except ValueError as e:
            raise fail(self, "l3", str(e)) from None
        if self.l3_tokens is not None and not is_model_store(self.l3):
            raise fail(self, "l3_tokens", "sizes the model store: give --l3 model: (a real store's bound is its "
                       "max_bytes=SIZE)")
        whole(self, "l3_tokens", 1, none_ok=True)
        # Resolved once an L3 is given; the policy, its timeout start and the limit rule are the
        # preset's (the root spec's).
        for name, value in dict(prefetch_threshold=DEFAULT_THRESHOLD_TOKENS, prefetch_slack_seconds=0.0).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        for name, choices in (("prefetch_policy", tuple(PREFETCH_POLICIES)),
                              ("prefetch_timeout_start", TIMEOUT_STARTS), ("prefetch_limit_rule", tuple(LIMIT_RULES))):
            if getattr(self, name) is not None:
                one_of(self, name, choices)
        whole(self, "prefetch_threshold", 0)
        whole(self, "prefetch_limit_tokens", 0, none_ok=True)
        real(self, "prefetch_slack_seconds")

"""The storage node: the L3 store under L2 (a spec string naming a registered store) and its prefetch.

`l3` is NAME:ARGS for a store in hicache_ref.storage.registry (file:DIR, mooncake:..., memory:);
a new kind of store is a registered name, not a field. The key scheme says whose objects the store
holds: upstream SGLang's (the default, so a store an SGLang server filled serves a replay and the
reverse) or the harness's own (its geometry-tagged keys and integrity trailer, which the storage
benchmarks and conformance suite measure). The prefetch and key options apply only with an L3 and
are resolved to their defaults once one is given (the policy, its timeout start and the rate
limit's rule from the semantics preset, by the root spec).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hicache_ref.l3.prefetch_policy import DEFAULT_PREFETCH_POLICY, PREFETCH_POLICIES, TIMEOUT_STARTS
from hicache_ref.l3.tier import ANCHOR_RULES, DEFAULT_THRESHOLD_TOKENS, LIMIT_RULES
from hicache_ref.spec.fields import fail, one_of, param, parse_int, parse_tokens, real, whole
from hicache_ref.storage.objects import DEFAULT_KEY_SCHEME, DEFAULT_OBJECT_ORDER, KEY_SCHEMES
from hicache_ref.storage.pages import OBJECT_ORDERS

L3_ONLY = {"replay"}
L3_COMMANDS = {"replay", "sweep"}  # --l3 model: runs in both (no bytes); a real store needs --materialize
MODEL_STORE = "model"


def is_model_store(l3: str | None) -> bool:
    """Whether the L3 spec names the store that moves no bytes (hicache_ref.storage.model)."""
    return isinstance(l3, str) and l3.strip().partition(":")[0] == MODEL_STORE


_KEY_OPTIONS = ("key_scheme", "l3_model", "l3_tag", "object_layout", "trailer", "extra_key", "cache_salt")
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
    prefetch_anchor: str | None = param(None, "--prefetch-anchor", "with --l3: any (a prefetch may extend any "
                                        "match) or backed_up (only one whose last matched node has an L2 copy, "
                                        "or none matched: sglang-0.5.23, which under write_back then asks L3 "
                                        "nothing past an L1-only prefix)", choices=ANCHOR_RULES,
                                        shown_default="the preset's", commands=L3_COMMANDS)
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
    key_scheme: str | None = param(None, "--l3-keys", "with --l3: whose objects the store holds: sglang "
                                   "(upstream SGLang 0.5.23's keys and bytes, shared with its servers) or "
                                   "harness (geometry-tagged keys, every object with an integrity trailer)",
                                   choices=KEY_SCHEMES, shown_default=DEFAULT_KEY_SCHEME, commands=L3_ONLY)
    l3_model: str | None = param(None, "--l3-model", "with --l3: the model name in the keys (upstream's "
                                 "--model-path as the server was given it)", metavar="NAME",
                                 shown_default="none", commands=L3_ONLY)
    l3_tag: str | None = param(None, "--l3-tag", "with --l3-keys sglang: the tenant tag before the model in "
                               "Mooncake keys (upstream's extra_backend_tag)", metavar="TAG",
                               shown_default="none", commands=L3_ONLY)
    object_layout: str | None = param(None, "--l3-object-layout", "with --l3-keys sglang: the byte order of a "
                                      "stored page, that of the writing server's host layout", choices=OBJECT_ORDERS,
                                      shown_default=DEFAULT_OBJECT_ORDER, commands=L3_ONLY)
    trailer: str | None = param(None, "--l3-trailer", "with --l3-keys sglang: end each object with the "
                                "harness's integrity trailer (SGLang's own clients then cannot read it); off, "
                                "pages read without one count as l3_unverified_pages", choices=("off", "on"),
                                shown_default="off", commands=L3_ONLY)
    extra_key: str | None = param(None, "--l3-extra-key", "with --l3-keys sglang: the requests' extra_key "
                                  "(e.g. a LoRA id), which seeds upstream's storage hash chain",
                                  metavar="TEXT", shown_default="none", commands=L3_ONLY)
    cache_salt: str | None = param(None, "--l3-cache-salt", "with --l3-keys sglang: the requests' cache_salt, "
                                   "which seeds upstream's storage hash chain", metavar="TEXT",
                                   shown_default="none", commands=L3_ONLY)

    def __post_init__(self):
        if self.l3 is None:
            for name in ("prefetch_policy", "prefetch_timeout_start", "prefetch_limit_rule", "prefetch_anchor",
                         "prefetch_threshold",
                         "prefetch_limit_tokens", "prefetch_slack_seconds", "l3_tokens", *_KEY_OPTIONS):
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
                              ("prefetch_timeout_start", TIMEOUT_STARTS), ("prefetch_limit_rule", tuple(LIMIT_RULES)),
                              ("prefetch_anchor", ANCHOR_RULES)):
            if getattr(self, name) is not None:
                one_of(self, name, choices)
        whole(self, "prefetch_threshold", 0)
        whole(self, "prefetch_limit_tokens", 0, none_ok=True)
        real(self, "prefetch_slack_seconds")
        self._resolve_keys()

    def with_preset_defaults(self, preset_name: str | None = None) -> StorageSpec:
        """This node with the prefetch switches it leaves None given preset `preset_name`'s values
        (default: the default preset's); a root spec has resolved them already (its preset's)."""
        from hicache_ref.spec.presets import DEFAULT_PRESET, STORAGE_SWITCHES, preset

        values = preset(preset_name or DEFAULT_PRESET)
        unset = {name: values[name] for name in STORAGE_SWITCHES if getattr(self, name) is None}
        return dataclasses.replace(self, **unset) if unset and self.l3 is not None else self

    def _resolve_keys(self) -> None:
        if self.key_scheme is None:
            object.__setattr__(self, "key_scheme", DEFAULT_KEY_SCHEME)
        one_of(self, "key_scheme", KEY_SCHEMES)
        for name in ("l3_model", "l3_tag", "extra_key", "cache_salt"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.isprintable()):
                raise fail(self, name, f"expected printable text, got {value!r}")
        for name in ("l3_model", "l3_tag"):
            value = getattr(self, name)
            if value is not None and (not value or any(c.isspace() for c in value)):
                raise fail(self, name, f"expected a name without spaces, got {value!r}")
        if self.key_scheme == "harness":
            for name in ("l3_tag", "object_layout", "trailer", "extra_key", "cache_salt"):
                if getattr(self, name) is not None:
                    raise fail(self, name, "applies to --l3-keys sglang (the harness's objects are layer_first, "
                                           "unseeded, each with a trailer)")
            return
        if self.object_layout is None:
            object.__setattr__(self, "object_layout", DEFAULT_OBJECT_ORDER)
        if self.trailer is None:
            object.__setattr__(self, "trailer", "off")
        one_of(self, "object_layout", OBJECT_ORDERS)
        one_of(self, "trailer", ("off", "on"))

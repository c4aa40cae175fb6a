"""Prefetch policies of the L3 tier on the modeled clock: how many L3 pages a request gets.

They are upstream's `best_effort`, `wait_complete` and `timeout` (SGLang's cache controller).
Here they decide on the modeled clock, so the figures are the same whatever the threads' timing.
A policy turns (pages L3 holds, tokens, slack) into the pages used and the seconds waited past the slack.
The model: hicache_ref/README.md, "Design notes".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hardware_profiles import transfer_price
from hardware_profiles.cost_models import L3LinkModel

# Assumed link of the L3 store where the profile has no l3_link section: a pooled-DRAM store over RDMA,
# one round trip per batch and a streaming rate per direction. Reported with the figures.
ASSUMED_L3_READ_GBPS = 10.0
ASSUMED_L3_WRITE_GBPS = 10.0
ASSUMED_L3_LATENCY_S = 50e-6

DEFAULT_PREFETCH_POLICY = "wait_complete"  # the reference preset's (hicache_ref.spec.presets)
TIMEOUT_BASE_S = 1.0  # upstream's prefetch_timeout_base default
TIMEOUT_PER_KI_TOKEN_S = 0.25  # upstream's prefetch_timeout_per_ki_token default


@dataclass(frozen=True)
class L3Link:
    """Modeled cost of moving pages of `page_bytes` to or from the L3 store."""

    page_bytes: int
    read_gbps: float = ASSUMED_L3_READ_GBPS
    write_gbps: float = ASSUMED_L3_WRITE_GBPS
    latency_s: float = ASSUMED_L3_LATENCY_S  # one round trip per batch
    per_object_s: float = 0.0  # what each object adds beyond its bytes (a transfer posted per object)
    basis: str = "assumed"  # where the values come from: "assumed" or "profile NAME" (with its assumed keys)
    # what prices it (hardware_profiles.transfer_price.l3_seconds, as the simulator's L3 terms): the profile's
    # l3_link itself, else one made of the values above
    model: L3LinkModel | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_profile(cls, profile, page_bytes: int) -> L3Link:
        """The link of `profile`'s l3_link section (hardware_profiles), or the assumed link above when
        the profile does not price the L3 store."""
        m = getattr(profile, "l3_link", None)
        if m is None or not m.known:
            return cls(page_bytes)
        assumed = sorted(k for k in profile.assumptions() if k.startswith("l3_link."))
        basis = f"profile {profile.name}" + (f" (assumed: {', '.join(assumed)})" if assumed else "")
        return cls(page_bytes, m.read_gbps, m.write_gbps, m.per_batch_us * 1e-6, m.per_object_us * 1e-6, basis, m)

    def __post_init__(self):
        for name in ("read_gbps", "write_gbps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{name}: expected a positive rate in GB/s, got {v!r}")
        for name in ("latency_s", "per_object_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"{name}: expected a non-negative number of seconds, got {v!r}")
        if self.model is None:
            object.__setattr__(self, "model", L3LinkModel(self.read_gbps, self.write_gbps, self.latency_s * 1e6,
                                                          self.per_object_s * 1e6))

    def read_seconds(self, pages: int) -> float:
        """Modeled seconds from issue until `pages` pages have landed (0 for none)."""
        return self._seconds(pages, "read")

    def write_seconds(self, pages: int) -> float:
        return self._seconds(pages, "write")

    def _seconds(self, pages: int, direction: str) -> float:
        """One batch of `pages` objects, priced as every L3 transfer is (hardware_profiles.transfer_price)."""
        return transfer_price.l3_seconds(self.model, direction, pages, pages * self.page_bytes, 1) if pages else 0.0

    def pages_within(self, seconds: float) -> float:
        """Pages landed `seconds` after issue (a float; inf for an unbounded wait)."""
        if math.isinf(seconds):
            return math.inf
        if seconds < self.latency_s:
            return 0
        if not self.per_object_s:  # the bytes alone: rate x time
            return math.floor((seconds - self.latency_s) * self.read_gbps * 1e9 / self.page_bytes)
        return math.floor((seconds - self.latency_s) / (self.page_bytes / (self.read_gbps * 1e9) + self.per_object_s))

    def report(self) -> dict:
        out = dict(read_gbps=self.read_gbps, write_gbps=self.write_gbps, latency_s=self.latency_s, basis=self.basis)
        if self.per_object_s:
            out["per_object_s"] = self.per_object_s
        return out


class PrefetchPolicy:
    """When a scheduled request stops waiting for its prefetch (see the module docstring)."""

    name = ""

    def window_seconds(self, tokens: int, slack_seconds: float) -> float:
        """Modeled seconds after issue at which the prefetch of `tokens` is stopped."""
        raise NotImplementedError

    def decide(self, link: L3Link, held_pages: int, page_size: int, slack_seconds: float) -> tuple[int, float]:
        """(pages used, modeled seconds waited past the slack) for a prefetch of `held_pages`."""
        window = self.window_seconds(held_pages * page_size, slack_seconds)
        used = int(min(held_pages, link.pages_within(window)))
        return used, max(0.0, link.read_seconds(used) - slack_seconds)


class BestEffort(PrefetchPolicy):
    """Never wait: what landed within the queue time is used."""

    name = "best_effort"

    def window_seconds(self, tokens, slack_seconds):
        return slack_seconds


class WaitComplete(PrefetchPolicy):
    """Wait for the whole prefetch."""

    name = "wait_complete"

    def window_seconds(self, tokens, slack_seconds):
        return math.inf


# Where the timeout's budget starts: at issue, or at the first admission poll that finds the
# prefetch not done, i.e. after the queue time (SGLang 0.5.23, unified_radix_cache.py
# _start_storage_prefetch_wait).
# Whether the timeout's budget starts after the queue time (first blocked poll) or at issue.
TIMEOUT_AFTER_QUEUE = {"issue": False, "first_blocked_poll": True}
TIMEOUT_STARTS = tuple(TIMEOUT_AFTER_QUEUE)


class Timeout(PrefetchPolicy):
    """Wait until done or `base + per_ki_token * tokens / 1024` seconds after issue (or after the
    first blocked poll, at the end of the slack: `start`)."""

    name = "timeout"

    def __init__(self, base_s: float = TIMEOUT_BASE_S, per_ki_token_s: float = TIMEOUT_PER_KI_TOKEN_S,
                 start: str = "issue"):
        if start not in TIMEOUT_STARTS:
            raise ValueError(f"prefetch_timeout_start: {start!r} is not one of {', '.join(TIMEOUT_STARTS)}")
        self.base_s, self.per_ki_token_s, self.start = base_s, per_ki_token_s, start
        self._after_queue = TIMEOUT_AFTER_QUEUE[start]

    def limit_seconds(self, tokens: int) -> float:
        return self.base_s + self.per_ki_token_s * tokens / 1024

    def window_seconds(self, tokens, slack_seconds):
        if self._after_queue:
            return slack_seconds + self.limit_seconds(tokens)
        return max(slack_seconds, self.limit_seconds(tokens))


PREFETCH_POLICIES = {p.name: p for p in (BestEffort, WaitComplete, Timeout)}


def make_prefetch_policy(name: str, timeout_start: str = "issue") -> PrefetchPolicy:
    """The policy called `name` (ValueError naming prefetch_policy otherwise); a timeout's budget
    starts at `timeout_start` (TIMEOUT_STARTS)."""
    if name not in PREFETCH_POLICIES:
        raise ValueError(f"prefetch_policy: {name!r} is not one of {', '.join(PREFETCH_POLICIES)}")
    return Timeout(start=timeout_start) if name == "timeout" else PREFETCH_POLICIES[name]()

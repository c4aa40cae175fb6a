"""The serving node: serial or up to N requests at once, arrivals, PD disaggregation, decode step.

`pd_disagg` is one deployment concept, a PD-disaggregated prefill node: the tree inserts every
request twice (unfinished after prefill, then finished), and a served replay releases each
request's KV right after its transfer instead of holding it through decode.
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_ref.spec.fields import fail, flag, param, parse_int, parse_real, real, whole

DEFAULT_STEP_MS = 30  # one decode step of a batch; the profiles hold no decode rate yet


@dataclass(frozen=True)
class ServingSpec:
    """How requests reach the cache."""

    PATH = "serving"
    concurrency: int | None = param(None, "--concurrency", "serve up to N requests at once, each holding its KV in "
                                    "L1 until its output_length decode steps end", parse=parse_int(1, 100_000),
                                    shown_default="serial replay", commands={"replay", "ablate", "advise"})
    timestamps: bool = param(False, "--timestamps", "with --concurrency: admit requests at the trace's arrival "
                             "times (decode steps of --step-ms)", flag=True, commands={"replay"})
    pd_disagg: bool = param(False, "--pd-disagg", "a PD-disaggregated prefill node: every request is inserted "
                            "unfinished, then finished; with --concurrency its KV is released right after its "
                            "transfer", flag=True, commands={"replay"})
    step_ms: float = param(DEFAULT_STEP_MS, "--step-ms", "with --concurrency: one decode step, ms, a positive "
                           "decimal such as 30 or 2.5", parse=parse_real(60_000), commands={"replay"})

    def __post_init__(self):
        whole(self, "concurrency", 1, 100_000, none_ok=True)
        flag(self, "timestamps")
        flag(self, "pd_disagg")
        real(self, "step_ms", positive=True)
        if self.timestamps and self.concurrency is None:
            raise fail(self, "timestamps", "applies to a served replay: give --concurrency N")

    @property
    def step_seconds(self) -> float:
        return self.step_ms / 1000

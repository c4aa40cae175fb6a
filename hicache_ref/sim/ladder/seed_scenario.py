"""The seed scenario of a readings file as runs: the base spec, its trace, its L2 per card, its host states.

`hardware_profiles/readings/<profile>.yaml` says the scenario (TP, concurrency, PD, L1, L2 per card);
the trace is hicache_ref.sim.trace.synth.SEED_WORKLOAD. The readings (hicache_ref.sim.fit.modeled_readings)
and `hicache ablate --scenario seed` (hicache_ref.sim.fit.seed_report) replay it through these.
"""

from __future__ import annotations

from hal.transfer.seed import SEED_GEOMETRY
from hicache_ref.sim.ladder.scenario import Runs, host_state, tokens_in
from hicache_ref.sim.price import mechanisms as mech
from hicache_ref.spec import CacheSpec


def seed_base(readings, profile) -> CacheSpec:
    """The spec the scenario's states replay from: its L1 and serving, the seed geometry."""
    sc = readings.scenario
    profile = profile if isinstance(profile, str) else str(profile.path)
    try:
        base = CacheSpec.of(profile=profile, l1_tokens=sc["l1_tokens"], pd_disagg=sc["pd_disagg"],
                            concurrency=sc["concurrency"], page_size=SEED_GEOMETRY.page_size)
        base.replace(tp=sc["tp"])  # the ladder's TP group: checked here, with the rest of the scenario
    except ValueError as e:  # the scenario's values, not options the user gave: name the file's keys
        msg = str(e)
        for option, key in SCENARIO_OPTIONS.items():
            msg = msg.replace(option, f"scenario.{key}")
        raise ValueError(f"{readings.path}: {msg}") from None
    return base


# the spec options a readings file's scenario sets, by the scenario key that sets each
SCENARIO_OPTIONS = {"--l1-tokens": "l1_tokens", "--pd-disagg": "pd_disagg", "--concurrency": "concurrency",
                    "--tp": "tp"}


def seed_runs(readings, requests, profile, progress=None, engine=None) -> Runs:
    return Runs(seed_base(readings, profile), requests, readings.scenario["tp"], progress, engine)


def l2_tokens(gb: float) -> int:
    return tokens_in(gb, SEED_GEOMETRY.token_bytes, SEED_GEOMETRY.page_size)


def seed_host_state(state: dict, scenario: dict, gb: float, profile) -> mech.HostState:
    return host_state(state, profile, l2_tokens(gb), SEED_GEOMETRY.token_bytes, scenario["tp"])


def seed_requests():
    """The seed scenario's trace (hicache_ref.sim.trace.synth.SEED_WORKLOAD)."""
    from hicache_ref.sim.trace.synth import seed_trace

    return seed_trace()

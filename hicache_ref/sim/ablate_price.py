"""Pricing one rung of `hicache ablate`: a replay's figures plus the host-side switches, in seconds.

A replay does not see backup submission, host page size, NUMA placement or PCIe ordering.
This prices the ones the profile holds figures for, through hicache_ref.sim.cost.
What no profile figure covers is never priced: the rung reports not_measured with the reason.
The formulas: hicache_ref/README.md, "Fix ladder" and "Design notes".
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_ref.sim import cost


@dataclass(frozen=True)
class HostSwitches:
    """The host-side switches of a rung that a replay does not model."""

    daemon_threads: bool = False  # False: backups submitted inline on the scheduler thread
    thp: bool = False  # False: 4 KB pages back the host pool
    numa_local: bool = False  # False: host pools on a remote NUMA node
    ido_on: bool = False  # PCIe ID-based ordering on for the shared uplink (or the profile says on)


def shared_uplink(profile) -> bool:
    topo = profile.topology
    return bool(topo is not None and topo.devices_per_switch and topo.devices_per_switch > 1)


def _ido_on(profile, switches: HostSwitches) -> bool:
    return switches.ido_on or (profile.topology is not None and profile.topology.ido == "on")


def transfer_seconds(profile, fig: dict, switches: HostSwitches) -> tuple[float | None, str | None, tuple[str, ...]]:
    """(modeled link seconds, why None, extra assumed keys): the replay's seconds, with D2H bytes
    re-priced at the shared-uplink bandwidth where cards share an uplink and IDO is not on."""
    modeled = fig.get("modeled_transfer_seconds")
    if modeled is None:
        return None, f"profile {profile.name} has no complete link model (link.*)", ()
    if not shared_uplink(profile) or _ido_on(profile, switches) or not fig["d2h_bytes"]:
        return modeled, None, ()
    bw = profile.link.d2h_gbps
    shared = cost.d2h_gbps_shared(profile.link, profile.penalties, profile.topology.devices_per_switch, "off")
    if shared is None:
        return None, (f"{profile.topology.devices_per_switch} cards share an uplink with IDO "
                      f"{profile.topology.ido} and the profile has no penalties.ido_shared_d2h_factor"), ()
    extra = fig["d2h_bytes"] / (shared * 1e9) - fig["d2h_bytes"] / (bw * 1e9)
    return modeled + extra, None, cost.assumed_inputs(profile, ("penalties.ido_shared_d2h_factor",))


def numa_reason(profile, switches: HostSwitches) -> str | None:
    """Why the NUMA penalty of this placement cannot be priced, or None."""
    key = "numa_local_pct" if switches.numa_local else "numa_remote_pct"
    if getattr(profile.penalties, key) is None:
        return f"profile {profile.name} has no penalties.{key}"
    return None


@dataclass(frozen=True)
class Priced:
    """A rung's seconds: modeled link time, TTFT change, net benefit (None: not measured) and why."""

    transfer_s: float | None
    ttft_change_s: float | None
    net_benefit_s: float | None
    not_measured: dict
    assumed_inputs: tuple[str, ...]
    notes: tuple[str, ...] = ()


def price(profile, fig: dict, switches: HostSwitches, baseline_s: float | None,
          unpriced_change: str | None = None) -> Priced:
    """Price one rung's replay figures `fig` under `switches`; `unpriced_change`: why this rung's
    own change cannot be priced (its TTFT and net benefit are then not measured)."""
    transfer, why_transfer, extra = transfer_seconds(profile, fig, switches)
    not_measured = {}
    if why_transfer:
        not_measured["modeled_transfer_seconds"] = why_transfer
    saved = fig.get("modeled_prefill_seconds_saved")
    no_compute = f"profile {profile.name} has no compute model (compute.prefill_*)"
    # No host pool (L2 0: HiCache off), no host memory to place: no NUMA term at all.
    has_host = bool(fig["l2_tokens"])
    why = unpriced_change or why_transfer or (no_compute if saved is None or baseline_s is None else None) \
        or (numa_reason(profile, switches) if has_host else None)
    if why is not None:
        not_measured.update(ttft_change_seconds=why, net_benefit_seconds=why)
        keys = cost.assumed_inputs(profile, (*cost.TRANSFER_KEYS, *cost.REGISTERED_KEYS)) + extra
        return Priced(transfer, None, None, not_measured, tuple(sorted(set(keys))))
    registered = fig["l2_tokens"] * fig["token_bytes"] if fig["l2_tokens"] else 0
    nb = cost.net_benefit(profile, saved, transfer, baseline_s, registered_bytes=registered,
                          numa_local=switches.numa_local if has_host else None)
    ttft = (transfer + nb.penalty_s - saved) / fig["requests"] if fig["requests"] else 0.0
    notes = ()
    lo, hi = cost.SEED_REGISTERED_GB
    if registered and profile.penalties.registered_pct_per_gb is not None and not lo <= registered / cost.GB <= hi:
        held = hi if registered / cost.GB > hi else lo
        notes = (f"registered-size penalty held at its {held} GB value: {registered / cost.GB:.0f} GB registered, "
                 f"the penalty line was measured over {lo}-{hi} GB",)
    return Priced(transfer, ttft, nb.net_s, not_measured, tuple(sorted(set(nb.assumed_inputs + extra))), notes)


def baseline_prefill_seconds(profile, requests) -> float | None:
    """Prefill seconds of every request with no cache (the TTFT of HiCache off), or None."""
    total = 0.0
    for r in requests:
        s = profile.compute.prefill_seconds(r.input_length)
        if s is None:
            return None
        total += s
    return total

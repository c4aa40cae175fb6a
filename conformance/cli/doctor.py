"""`hicache doctor`: preflight of this host for a HiCache deployment (checks run by conformance/doctor/checks.py)."""

from __future__ import annotations

import sys

from conformance.common.errors import CliError
from conformance.common.inputs import load_profile_arg
from conformance.doctor.checks import parse_bytes, run_doctor
from hal.common.units import HELP as UNITS

HELP = ("preflight: PCIe ordering on shared uplinks, NUMA placement, THP (anon, /dev/shm), page tables, "
        "memlock, registered size, then configuration advice; exit 1 if a check fails")


def add_arguments(p) -> None:
    p.add_argument("--backend", default="emu", help="backend whose host is checked (default emu)")
    p.add_argument("--profile", help="hardware profile name or YAML path; emulates its topology when the "
                   "backend has no hardware here")
    p.add_argument("--pool-bytes", help=f"host KV pool per card, e.g. 80G, 75GiB or a byte count ({UNITS}; "
                   "default: the planned local capacity per card)")
    p.add_argument("--json", action="store_true", help='print {"backend", "profile", "checks": [...]} as JSON')


def run(a) -> int:
    pool = None if a.pool_bytes is None else parse_bytes(a.pool_bytes, "--pool-bytes")
    profile = None if a.profile is None else load_profile_arg("--profile", a.profile)
    _backend_here(a.backend, profile is not None)
    report = run_doctor(backend=a.backend, profile=profile, pool_bytes=pool)
    print(report.to_json() if a.json else report.to_table())
    return report.exit_code()


def _backend_here(name: str, with_profile: bool) -> None:
    """A backend that is not available here: without --profile, CliError naming --backend and why
    (the checks would be of a host that does not run it); with one, a warning that the profile's
    layout is checked on this host instead."""
    from conformance.plugin import backend_status
    from hal.backend import available_backends

    if name not in available_backends():
        return  # run_doctor names the unknown backend
    ok, why = backend_status(name)
    if ok:
        return
    if not with_profile:
        raise CliError("--backend", f"{name} is not available here: {why}; doctor checks the host {name} runs "
                                    "on (pass --profile NAME to check that profile's layout from this host)")
    print(f"hicache: warning: --backend {name} is not available here ({why}); checking the profile's layout "
          "from this host", file=sys.stderr, flush=True)

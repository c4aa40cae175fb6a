"""Where a conformance run ran: backend, profile, host, CPU, kernel, torch, topology, doctor."""

from __future__ import annotations

import os
import platform
import socket

from conformance.calibrate.write import cpu_model


def environment(backend: str, profile, backend_reason: str | None) -> dict:
    """The environment block of report.json. The doctor runs here too (host checks); a doctor
    that cannot run is recorded with its reason instead of failing the report."""
    import torch

    from conformance.doctor.checks import run_doctor

    env = {
        "backend": backend, "backend_available": backend_reason is None, "backend_reason": backend_reason,
        "profile": None if profile is None else profile.name,
        "profile_path": None if profile is None else str(profile.path),
        "host": socket.gethostname(), "cpu": cpu_model(), "cores": os.cpu_count(),
        "kernel": platform.release(), "os": platform.platform(), "python": platform.python_version(),
        "torch": torch.__version__,
    }
    try:
        doctor = run_doctor(backend, profile).to_dict()
        env["topology"] = doctor["topology"]
        env["doctor"] = {"checks": doctor["checks"], "pool_bytes": doctor["pool_bytes"],
                         "pool_source": doctor["pool_source"]}
    except (ValueError, OSError) as e:
        env["topology"] = None
        env["doctor"] = {"error": str(e)}
    return env

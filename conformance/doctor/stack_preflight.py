"""The device software stack's preflight in `hicache doctor`: what a backend refuses to time or accept.

A backend with a vendor stack says so with a `preflight()` classmethod (the xpu backend:
hal.backends.support.kunlun_stack) returning one line per refusal, each naming the variable or
library at fault, and the stack's versions; doctor turns each line into a failed check and keeps
the versions in its report. Asked of the backend class, never by name.
"""

from __future__ import annotations

from typing import Any

from conformance.doctor.records import Check


def preflight_checks(backend: str) -> tuple[list[Check], dict[str, Any] | None]:
    """The backend's own preflight of its software stack (a `preflight()` classmethod, the
    xpu backend's), one failed check per refusal, each naming its variable; none where it has none."""
    from hal.backend import backend_class

    try:
        find = getattr(backend_class(backend), "preflight", None)
    except ImportError:
        return [], None
    if find is None:
        return [], None
    refusals, stack = find()
    checks = [Check("preflight", "fail", line, "no timing or acceptance runs until this is fixed")
              for line in refusals]
    seen = "environment and runtime" if stack.get("libxpurt") else "environment (no device runtime here to check)"
    return checks or [Check("preflight", "ok", f"{seen} as an acceptance run needs", "")], stack

"""What `hicache doctor` reports: the checks in run order with the topology and pool they judged; JSON and table.

The JSON keys and the table's lines are what users and scripts read; `exit_code` is 1 only when a
check failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from conformance.doctor.records import Check, fmt_bytes
from hal.topology.topology_model import Topology


@dataclass
class DoctorReport:
    backend: str
    profile: str | None
    topology: Topology
    pool_bytes: int
    pool_source: str
    checks: list[Check]
    stack: dict[str, Any] | None = None  # the device software stack's versions, where the backend has one

    def exit_code(self) -> int:
        return 1 if any(c.status == "fail" for c in self.checks) else 0

    def to_dict(self) -> dict[str, Any]:
        t = self.topology
        return {
            "backend": self.backend,
            "profile": self.profile,
            "topology": {"source": t.source, "origin": t.origin, "devices": len(t.devices),
                         "numa_nodes": len(t.numa_nodes), "notes": list(t.notes)},
            "pool_bytes": self.pool_bytes,
            "pool_source": self.pool_source,
            "checks": [c._asdict() for c in self.checks],
            **({"stack": self.stack} if self.stack is not None else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_table(self) -> str:
        head = (f"hicache doctor: backend {self.backend}, profile {self.profile or '-'}, "
                f"topology {self.topology.describe()}, pool {fmt_bytes(self.pool_bytes)} ({self.pool_source})")
        width = max(len(c.name) for c in self.checks)
        lines = [head, "", f"{'CHECK'.ljust(width)}  STATUS   VALUE"]
        if self.stack is not None:
            lines[1:1] = ["stack: " + ", ".join(f"{k} {v if v is not None else '-'}" for k, v in self.stack.items())]
        for c in self.checks:
            lines.append(f"{c.name.ljust(width)}  {c.status.ljust(7)}  {c.value}")
            if c.status != "ok" and c.fix:
                lines.append(f"{''.ljust(width)}  {''.ljust(7)}  fix: {c.fix}")
        return "\n".join(lines)

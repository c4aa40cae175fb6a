"""`hicache backends [--json]`: every backend, whether it can run here and why not, its devices,
copy modes and the vendor kernels found (hal.backends.support.inventory)."""

from __future__ import annotations

import json

HELP = "list the backends: available here or why not, devices, copy modes, vendor kernels found"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print {\"backends\": [...]} as JSON")


def _line(row: dict) -> str:
    state = "available" if row["available"] else f"not available: {row['reason']}"
    dev = f"{row['device_count']} x {row['device_name']}" if row["device_name"] else "no device"
    modes = (f"copy modes {'/'.join(row['copy_modes'])} (this run: {row['copy_mode']})" if row["copy_modes"]
             else "one copy mode")
    vk = row["vendor_kernels"]
    vendor = (f"vendor kernels {vk['source']}: {len(vk['ops'])} ops" if vk["source"]
              else f"no vendor kernels ({vk['reason']})")
    return f"{row['name']:<6} {state}\n       {dev}; {modes}; {vendor}"


def run(a) -> int:
    from hal.backends.support.inventory import describe_backends

    rows = describe_backends()
    if a.json:
        print(json.dumps({"backends": rows}, indent=2))
    else:
        for row in rows:
            print(_line(row))
    return 0

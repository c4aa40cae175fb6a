"""What each backend is here, for `hicache backends`: available or why not, devices, copy modes, vendor kernels.

Asked of the backend classes (hal.registry), never by name: a backend says what it has through
`probe()`, `device_type`, `copy_modes` and, where it drives a device, `device_inventory()` and
`vendor_ops()`, and a backend with a vendor software stack its versions (`stack_versions()`). Nothing is constructed and no device is touched for an unavailable backend.
"""

from __future__ import annotations

from typing import Any

from hal.backends.support.copy_modes import resolve_copy_mode
from hal.registry import available_backends, backend_class


def describe_backend(name: str) -> dict[str, Any]:
    """One backend as `hicache backends --json` reports it."""
    row: dict[str, Any] = {"name": name, "available": False, "reason": "", "device_type": None,
                           "device_name": None, "device_count": 0, "copy_modes": [], "copy_mode": None,
                           "vendor_kernels": {"source": None, "ops": [], "reason": "not looked for", "schemas": {}},
                           "stack": None}
    try:
        cls = backend_class(name)
    except Exception as e:  # noqa: BLE001 - a backend that cannot import here is reported, not fatal
        row["reason"] = f"cannot be imported here: {type(e).__name__}: {e}"
        return row
    ok, why = cls.probe()
    row.update(available=bool(ok), reason=why, device_type=getattr(cls, "device_type", None))
    inventory = getattr(cls, "device_inventory", None)
    if inventory is not None:
        row["device_name"], row["device_count"] = inventory()
    elif ok and row["device_type"] == "cpu":
        row["device_name"], row["device_count"] = "cpu (emulated device)", 1
    row["copy_modes"] = list(getattr(cls, "copy_modes", ()))
    if row["copy_modes"]:
        row["copy_mode"] = resolve_copy_mode()  # a bad $HICACHE_COPY_MODE is refused, naming it
    find = getattr(cls, "vendor_ops", None)
    if find is None:
        row["vendor_kernels"]["reason"] = "this backend runs no vendor kernels"
    else:
        ops, why = find()
        row["vendor_kernels"] = {"source": ops.source if ops else None, "ops": sorted(ops.ops) if ops else [],
                                 "reason": why,
                                 # each op's declared arguments: what the adapter binds by name
                                 "schemas": {op: ops.schema(op) for op in sorted(ops.ops)} if ops else {}}
    versions = getattr(cls, "stack_versions", None)
    if ok and versions is not None:
        row["stack"] = versions()
    return row


def describe_backends() -> list[dict[str, Any]]:
    """Every registered backend (built-ins, registered classes, entry points), by name."""
    return [describe_backend(name) for name in available_backends()]

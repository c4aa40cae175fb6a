"""Preflight of the Kunlun software stack: what must hold before an XPU run is timed or accepted.

Each refusal is one line naming the variable or library at fault:
- XPU_DUMMY_EVENT set: the runtime then fakes events, and every wait and wall time the harness
  takes rests on events (the public P800 projects tell operators to unset it);
- XPU_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES differ: torch_xmlir and the Kunlun runtime would
  number the cards differently;
- torch's device i is not xpu-smi's device at the same visible position (compared by PCI bus id
  where torch exposes one): torch_xmlir orders by OAM id only when CUDA_VISIBLE_DEVICES is
  exactly 0,...,N-1, and the harness maps ordinals to xpu-smi's topology;
- no libxpurt mapped after torch_xmlir is imported, or two of them: a second runtime loaded beside
  the first fails with CUDA_ERROR_NOT_INITIALIZED, so the harness only ever uses the mapped one.
`stack_versions` is what the report logs: Python, torch, torch_xmlir, the vendor ops, driver, runtime.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping

DUMMY_EVENT = "XPU_DUMMY_EVENT"
VISIBLE = ("XPU_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
BUS_ID = re.compile(r"\b([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\b")
SMI_TIMEOUT_S = 20


def environment_refusals(environ: Mapping[str, str]) -> list[str]:
    """The refusals read from the environment alone (cheap: the backend's probe asks them)."""
    out = []
    if environ.get(DUMMY_EVENT, "") != "":
        out.append(f"{DUMMY_EVENT}: set to {environ[DUMMY_EVENT][:40]!r}; unset it: with dummy events no "
                   "wait or time the harness takes is real")
    xpu, cuda = (environ.get(name) for name in VISIBLE)
    if xpu != cuda:
        shown = ", ".join(f"{n}={v!r}" if v is not None else f"{n} unset" for n, v in zip(VISIBLE, (xpu, cuda), strict=True))
        out.append(f"XPU_VISIBLE_DEVICES: must equal CUDA_VISIBLE_DEVICES ({shown}); set both to the same list")
    return out


def bus_id(domain: int, bus: int, device: int, function: int = 0) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


def smi_bus_ids(text: str) -> list[str]:
    """PCI bus ids in the order xpu-smi lists its devices (one per device line, first on each)."""
    ids = []
    for line in text.splitlines():
        m = BUS_ID.search(line)
        if m:
            ident = bus_id(*(int(g, 16) for g in m.groups()))
            if ident not in ids:
                ids.append(ident)
    return ids


def torch_bus_ids() -> list[str] | None:
    """Bus id of each torch device in ordinal order; None where torch does not expose them."""
    import torch

    ids = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        if not all(hasattr(p, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
            return None
        ids.append(bus_id(p.pci_domain_id, p.pci_bus_id, p.pci_device_id))
    return ids


def device_order_refusal(environ: Mapping[str, str], torch_ids: list[str], smi_ids: list[str]) -> str | None:
    """Whether torch's device i is xpu-smi's device at visible position i, by bus id."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    try:
        order = [int(v) for v in visible.split(",")] if visible else list(range(len(smi_ids)))
    except ValueError:
        return f"CUDA_VISIBLE_DEVICES: {visible[:60]!r} is not a list of xpu-smi indices"
    for ordinal, tid in enumerate(torch_ids):
        index = order[ordinal] if ordinal < len(order) else None
        sid = smi_ids[index] if index is not None and index < len(smi_ids) else None
        if tid != sid:
            return (f"CUDA_DEVICE_ORDER: torch device {ordinal} is PCI {tid} but xpu-smi's device {index} is "
                    f"PCI {sid} (CUDA_VISIBLE_DEVICES={visible!r}); set CUDA_VISIBLE_DEVICES so the orders agree "
                    "(torch_xmlir orders by OAM id only for exactly 0,...,N-1)")
    return None


def runtime_refusal(mapped: list[str]) -> str | None:
    """The Kunlun runtime must be mapped exactly once: the harness never loads one of its own."""
    if not mapped:
        return "libxpurt: not mapped after importing torch_xmlir; the harness loads no runtime of its own"
    if len(set(mapped)) > 1:
        return f"libxpurt: {len(set(mapped))} copies mapped ({', '.join(sorted(set(mapped)))}); keep one"
    return None


def mapped_libraries(stem: str) -> list[str]:
    """Every distinct path of a shared library `stem`.so* mapped into this process."""
    paths: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.rsplit("/", 1)[-1].startswith(stem + ".so") and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    return paths


def smi_text(*args: str) -> str | None:
    """xpu-smi's output, None where it is absent or fails."""
    exe = shutil.which("xpu-smi")
    if exe is None:
        return None
    try:
        run = subprocess.run([exe, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout if run.returncode == 0 else None


def _version(module: str) -> str | None:
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return str(getattr(importlib.import_module(module), "__version__", "unknown"))
    except Exception:  # noqa: BLE001 - absent or broken: no version
        return None


def stack_versions(vendor_module: str, smi: str | None) -> dict[str, str | None]:
    """Python, torch, torch_xmlir, the vendor ops module, the driver (xpu-smi's "Driver Version")
    and the mapped runtime's path; None for what is not there."""
    import torch

    driver = re.search(r"Driver Version\s*:?\s*([0-9A-Za-z._-]+)", smi or "")
    mapped = mapped_libraries("libxpurt")
    return {"python": sys.version.split()[0], "torch": torch.__version__, "torch_xmlir": _version("torch_xmlir"),
            vendor_module: _version(vendor_module), "driver": driver.group(1) if driver else None,
            "libxpurt": mapped[0] if mapped else None}


def preflight(environ: Mapping[str, str], vendor_module: str,
              hardware: bool = True) -> tuple[list[str], dict[str, str | None]]:
    """(refusals, versions) on this node. The environment is always checked; with `hardware` (an
    XPU node) torch_xmlir is imported (it maps the runtime), the runtime must be mapped once and
    torch's device order must be xpu-smi's."""
    refusals = environment_refusals(environ)
    if not hardware:
        return refusals, stack_versions(vendor_module, smi_text())
    try:
        importlib.import_module("torch_xmlir")
    except Exception as e:  # noqa: BLE001 - reported as the refusal below
        refusals.append(f"torch_xmlir: not importable: {type(e).__name__}: {e}")
    else:
        if (why := runtime_refusal(mapped_libraries("libxpurt"))) is not None:
            refusals.append(why)
    smi = smi_text()
    torch_ids = torch_bus_ids()
    if smi is not None and torch_ids:
        if (why := device_order_refusal(environ, torch_ids, smi_bus_ids(smi))) is not None:
            refusals.append(why)
    return refusals, stack_versions(vendor_module, smi)

"""Kunlunxin P800/P900 XPUs through torch_xmlir, which presents them to torch as device "cuda".

Streams, events and copies are the shared CUDA-like code; this file probes for torch_xmlir and
registers host memory through the Kunlun runtime already mapped into the process (never a second
copy of it; cudaHostRegister as the fallback), one registration per host buffer up to the driver's
limit (`max_registration_bytes`: the profile's link.max_registration_bytes where it has one), since
the driver refuses a copy that crosses two registered ranges. Its probe refuses the environment
kunlun_stack refuses (XPU_DUMMY_EVENT, unequal visible-device lists). The runtime facts it relies
on, and their sources: docs/acceptance.md, "What the device code takes on trust".
"""

from __future__ import annotations

import ctypes
import os

import torch

from hal.backends.support import kunlun_stack
from hal.backends.support.cudalike import (
    CudaLikeBackend,
    CudartRegistrar,
    kunlun_runtime_sign,
    loaded_library,
)
from hal.backends.support.vendor_ops import VendorSearch
from hal.topology.discover import from_xpusmi_command, has_hardware
from hal.topology.topology_model import Topology


def _hardware_name() -> str:
    return "an AMD ROCm GPU" if getattr(torch.version, "hip", None) else "an NVIDIA GPU"


def _xpu_count(torch_xmlir) -> int | None:
    """XPUs torch_xmlir sees, or None when this torch_xmlir exposes no count."""
    xmlirc = getattr(torch_xmlir, "_XMLIRC", None)
    for count in (getattr(getattr(torch_xmlir, "xpu", None), "device_count", None),
                  getattr(xmlirc, "_xpu_get_devices_number", None)):
        if callable(count):
            try:
                return int(count())
            except Exception:  # noqa: BLE001 - try the next spelling
                continue
    return None


# One registration of a 512 GiB or larger range overflows the driver's 32-bit size (LMCache's
# Kunlun port registers at most 128 GiB at once); a profile may state its node's own limit.
DEFAULT_MAX_REGISTRATION_BYTES = 128 << 30


def max_registration_bytes(profile) -> int:
    """The largest host range one xpu_host_register may cover: the profile's
    link.max_registration_bytes where it gives one, else DEFAULT_MAX_REGISTRATION_BYTES."""
    value = getattr(getattr(profile, "link", None), "max_registration_bytes", None)
    return int(value) if value else DEFAULT_MAX_REGISTRATION_BYTES


def find_libxpurt() -> str | None:
    """Path of the Kunlun runtime library mapped into this process (torch_xmlir maps it), or None.

    Never a path to load afresh: a second runtime beside the mapped one breaks the first's
    context (CUDA_ERROR_NOT_INITIALIZED in the Kunlun notes)."""
    return loaded_library("libxpurt")


def vendor_module() -> str:
    """The module whose import registers torch.ops.xspeedgate_ops ($HICACHE_XPU_VENDOR_MODULE)."""
    return os.environ.get("HICACHE_XPU_VENDOR_MODULE", "").strip() or "xspeedgate_ops"


class XpurtRegistrar:
    """xpu_host_register / xpu_host_unregister from libxpurt.so via ctypes."""

    def __init__(self, path: str):
        lib = ctypes.CDLL(path)
        self._register = lib.xpu_host_register
        self._register.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint]
        self._register.restype = ctypes.c_int
        self._unregister = lib.xpu_host_unregister
        self._unregister.argtypes = [ctypes.c_void_p]
        self._unregister.restype = ctypes.c_int

    def register(self, address: int, nbytes: int) -> None:
        rc = self._register(address, nbytes, 0)
        if rc:
            raise RuntimeError(f"xpu_host_register({address:#x}, {nbytes}) failed: error {rc}")

    def unregister(self, address: int) -> None:
        rc = self._unregister(address)
        if rc:
            raise RuntimeError(f"xpu_host_unregister({address:#x}) failed: error {rc}")


class XpuBackend(CudaLikeBackend):
    name = "xpu"
    default_profile = "p800"
    max_registration_bytes = DEFAULT_MAX_REGISTRATION_BYTES  # per instance: the profile's (module docstring)

    def __init__(self, profile=None, copy_mode: str | None = None):
        super().__init__(profile, copy_mode)
        self.max_registration_bytes = max_registration_bytes(self.profile)

    @classmethod
    def probe(cls) -> tuple[bool, str]:
        refusals = kunlun_stack.environment_refusals(os.environ)
        if refusals:
            return False, "; ".join(refusals)
        # Importing torch_xmlir is the only way to ask; it patches torch, which this backend
        # needs anyway.
        try:
            import torch_xmlir
        except Exception as e:  # noqa: BLE001 - any failure to import means no XPU here
            why = f"torch_xmlir not importable: {type(e).__name__}: {e}"
            if torch.backends.cuda.is_built() and torch.cuda.is_available():
                return False, f"CUDA is present but it is {_hardware_name()}, not an XPU ({why})"
            return False, why
        count = _xpu_count(torch_xmlir)
        if count == 0:
            if torch.cuda.is_available():
                return False, (f"CUDA is present but it is {_hardware_name()}, not an XPU "
                               "(torch_xmlir is present and reports no XPU)")
            return False, "torch_xmlir present but no XPU (it reports 0 devices)"
        if not torch.cuda.is_available():
            return False, "torch_xmlir present but no XPU (torch.cuda, which it drives, sees no device)"
        return True, ""

    @classmethod
    def vendor_search(cls) -> VendorSearch:
        """The rebuilt Kunlun ops in torch.ops.xspeedgate_ops (see the module docstring)."""
        return VendorSearch(vendor_module(), torch_namespace="xspeedgate_ops")

    @classmethod
    def preflight(cls, hardware: bool | None = None) -> tuple[list[str], dict]:
        """(one line per refusal, the stack's versions and mapped runtime): hal.backends.support.kunlun_stack.
        Without `hardware` (default: where a Kunlun runtime is installed or loaded) only the
        environment is checked and no runtime is imported."""
        if hardware is None:
            hardware = bool(kunlun_runtime_sign())
        return kunlun_stack.preflight(os.environ, vendor_module(), hardware)

    @classmethod
    def stack_versions(cls) -> dict:
        """Python, torch, torch_xmlir, vendor ops, driver versions and the mapped runtime (for the inventory)."""
        return kunlun_stack.stack_versions(vendor_module(), kunlun_stack.smi_text())

    @classmethod
    def device_inventory(cls) -> tuple[str | None, int]:
        """(device name, XPU count): the count torch_xmlir reports where it has one."""
        name, count = super().device_inventory()
        if name is None and count == 0:
            return name, count
        import torch_xmlir

        return name, _xpu_count(torch_xmlir) or count

    def _registrar(self):
        import torch_xmlir  # noqa: F401 - importing it maps the runtime, the only one ever used

        path = find_libxpurt()
        if path:
            try:
                return XpurtRegistrar(path)
            except (OSError, AttributeError):
                pass  # library without the symbols: the shim's cudaHostRegister still works
        return CudartRegistrar()

    def topology(self) -> Topology:
        """On an XPU box, what `xpu-smi topo -m` reports (its source says "xpu-smi"), or sysfs
        with a note when the tool is absent or fails; elsewhere the profile's emulated box."""
        if not has_hardware(self.capabilities()):
            return super().topology()
        return from_xpusmi_command()


BACKEND = XpuBackend

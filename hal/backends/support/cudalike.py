"""What the cuda and xpu backends share: device buffers, plan execution, host registration.

torch_xmlir runs Kunlun XPUs as torch device "cuda", so one implementation serves both. A plan's
segments become one async copy each (`descriptor`, what users measure), or above a limit in
`gather` mode rows gathered, copied once and scattered. A host-side scatter runs after the device
copy, so a plan that reads host bytes another writes waits for that plan's event.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
import threading
from typing import Any, NamedTuple

import numpy as np
import torch

from hal.backend import Backend, Capabilities
from hal.backends.support.copy_modes import (
    COPY_MODES,
    DIRECT_SEGMENT_LIMIT,
    copies_each_segment,
    resolve_copy_mode,
)
from hal.backends.support.cuda_streams import CudaEvent, CudaStream
from hal.backends.support.vendor_ops import BoundVendorOps, StreamHooks, VendorOps, VendorSearch
from hal.transfer.plan import CopyGroup, Segments, TransferPlan
from hal.transfer.rows import flat_bytes, row_views

__all__ = ["DIRECT_SEGMENT_LIMIT", "CudaLikeBackend", "CudartRegistrar", "kunlun_runtime_sign", "loaded_library"]


def loaded_library(stem: str) -> str | None:
    """Path of a shared library whose file name starts with `stem` mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if path.rsplit("/", 1)[-1].startswith(stem + ".so"):
                    return path
    except OSError:
        pass
    return None


def kunlun_runtime_sign() -> str:
    """Why this process's "cuda" device would be a Kunlun XPU, or "" when nothing says so.

    Under torch_xmlir the shim reports a generic device name ("GPU") and an sm_86-like
    capability, so device properties cannot tell; the runtime's presence can. Nothing is
    imported here.
    """
    if "torch_xmlir" in sys.modules:
        return "torch_xmlir is imported"
    try:
        if importlib.util.find_spec("torch_xmlir") is not None:
            return "torch_xmlir is installed"
    except (ImportError, ValueError):
        pass
    lib = loaded_library("libxpurt")
    return f"{lib} is loaded" if lib else ""


# -- host registration ------------------------------------------------------------------------

class CudartRegistrar:
    """cudaHostRegister through torch's own libcudart bindings (on Kunlun: the runtime shim's)."""

    def __init__(self):
        rt = torch.cuda.cudart()
        if not hasattr(rt, "cudaHostRegister"):
            raise RuntimeError("torch.cuda.cudart() has no cudaHostRegister")
        self._rt = rt

    def _describe(self, rc: int) -> str:
        try:
            return f"error {rc} ({self._rt.cudaGetErrorString(self._rt.cudaError(rc))})"
        except Exception:  # noqa: BLE001 - an unnamed code is still reported
            return f"error {rc}"

    def register(self, address: int, nbytes: int) -> None:
        rc = int(self._rt.cudaHostRegister(address, nbytes, 0))  # 0: cudaHostRegisterDefault
        if rc:
            raise RuntimeError(f"cudaHostRegister({address:#x}, {nbytes}) failed: {self._describe(rc)}")

    def unregister(self, address: int) -> None:
        rc = int(self._rt.cudaHostUnregister(address))
        if rc:
            raise RuntimeError(f"cudaHostUnregister({address:#x}) failed: {self._describe(rc)}")


# -- the backend -------------------------------------------------------------------------------

class _Job(NamedTuple):
    src: torch.Tensor  # flat uint8 views
    dst: torch.Tensor
    seg: Segments
    src_dev: bool
    dst_dev: bool


class CudaLikeBackend(Backend):
    device_type = "cuda"
    stream_type = CudaStream
    copy_modes = COPY_MODES

    def __init__(self, profile: Any = None, copy_mode: str | None = None):
        # Checked before anything is set: a bad mode leaves no half-made backend.
        self.copy_mode = resolve_copy_mode(copy_mode)
        super().__init__(profile)
        # Nothing touches the device until it is used: capabilities() must work without one.
        self._device: torch.device | None = None
        self._default: CudaStream | None = None
        self._lock = threading.Lock()

    def with_copy_mode(self, copy_mode: str) -> CudaLikeBackend:
        """A sibling backend on the same profile and device whose plans run in `copy_mode`."""
        other = type(self)(self.profile, copy_mode)
        other._device = self._device
        return other

    @classmethod
    def vendor_search(cls) -> VendorSearch:
        """Hook: where this device's vendor kvcacheio kernels would be (None: it has none)."""
        return VendorSearch(None, "this backend names no vendor kernel module")

    @classmethod
    def vendor_ops(cls) -> tuple[VendorOps | None, str]:
        """(the vendor's kvcacheio kernels behind the harness's calling convention, "") when
        importable here, else (None, why not). Importing is the only probe; nothing runs."""
        return cls.vendor_search().find()

    def vendor_kv(self, stream: CudaStream | None = None) -> tuple[BoundVendorOps | None, str]:
        """(the vendor kernels running on `stream` (default: the default stream), "") or (None, why).

        Each call returns the event recorded on the stream after it, like hal.transfer.kvcacheio.
        """
        vendor, why = self.vendor_ops()
        if vendor is None:
            return None, why
        stream = stream or self.default_stream()

        def enter() -> contextlib.ExitStack:
            ctx = contextlib.ExitStack()
            ctx.enter_context(torch.cuda.device(self.device))
            ctx.enter_context(torch.cuda.stream(stream.torch_stream))
            return ctx

        return vendor.bind(StreamHooks(self.device, enter, stream.record_keeping)), ""

    @classmethod
    def device_inventory(cls) -> tuple[str | None, int]:
        """(name of device 0, number of devices) as torch.cuda reports them; (None, 0) when the
        backend is unavailable (torch.cuda is not asked then: on a machine without the runtime
        it would initialize nothing useful)."""
        ok, _ = cls.probe()
        if not ok:
            return None, 0
        count = torch.cuda.device_count()
        return (torch.cuda.get_device_name(0) if count else None), count

    @property
    def device(self) -> torch.device:
        if self._device is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        return self._device

    def device_memory_bytes(self) -> int | None:
        """torch.cuda's total memory of the device (torch_xmlir answers it for an XPU)."""
        try:
            return int(torch.cuda.get_device_properties(self.device).total_memory)
        except (RuntimeError, AssertionError, AttributeError):
            return None

    def capabilities(self) -> Capabilities:
        ok, why = self.probe()
        return Capabilities(name=self.name, available=ok, reason=why, device_type=self.device_type,
                            modeled_clock=False, host_registration=True)

    def is_device(self, tensor: torch.Tensor) -> bool:
        return isinstance(tensor, torch.Tensor) and tensor.is_cuda

    def alloc_device(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device=self.device)

    def new_stream(self) -> CudaStream:
        return CudaStream(torch.cuda.Stream(device=self.device))

    def default_stream(self) -> CudaStream:
        with self._lock:
            if self._default is None:
                self._default = CudaStream(torch.cuda.default_stream(self.device))
            return self._default

    # -- transfer ---------------------------------------------------------------------------
    def _check_buffers(self, op: str, i: int, g: CopyGroup) -> None:
        for name, t in (("src", g.src), ("dst", g.dst)):
            on_dev = self.is_device(t)
            if not on_dev and t.device.type != "cpu":
                raise ValueError(f"plan {op}: groups[{i}].{name} is on {t.device}; backend {self.name!r} takes cpu or cuda")
            if on_dev and t.device != self.device:
                raise ValueError(f"plan {op}: groups[{i}] has a buffer on {t.device}; this backend uses {self.device}")

    def _job(self, g: CopyGroup) -> _Job:
        return _Job(flat_bytes(g.src), flat_bytes(g.dst), g.segments, self.is_device(g.src), self.is_device(g.dst))

    def _execute(self, plan: TransferPlan, stream: CudaStream) -> CudaEvent:
        jobs = [self._job(g) for g in plan.groups if len(g.segments.nbytes)]
        keep: list = []
        tail: list = []
        with torch.cuda.device(self.device), torch.cuda.stream(stream.torch_stream):
            for job in jobs:
                if copies_each_segment(self.copy_mode, len(job.seg.nbytes)):
                    self._copy_segments(job)
                else:
                    self._copy_rows(job, keep, tail)
        return stream._record(keep, tail or None)

    @staticmethod
    def _copy_segments(job: _Job) -> None:
        """One async copy per segment: on the device, one DMA descriptor (cudaMemcpyAsync) each."""
        seg = job.seg
        for s, d, n in zip(seg.src_offsets.tolist(), seg.dst_offsets.tolist(), seg.nbytes.tolist(), strict=True):
            job.dst[d:d + n].copy_(job.src[s:s + n], non_blocking=True)

    def _index_on_device(self, idx: np.ndarray, keep: list) -> torch.Tensor:
        pinned = torch.from_numpy(idx).pin_memory()
        keep.append(pinned)
        return pinned.to(self.device, non_blocking=True)

    def _copy_rows(self, job: _Job, keep: list, tail: list) -> None:
        src_rows, dst_rows, src_idx, dst_idx = row_views(job.src, job.dst, job.seg)
        if job.src_dev:
            moved = src_rows.index_select(0, self._index_on_device(src_idx, keep))
        else:
            # Gathered on the CPU now, into pinned memory so the link copy is a real async DMA.
            moved = torch.empty((len(src_idx), src_rows.shape[1]), dtype=src_rows.dtype, pin_memory=True)
            torch.index_select(src_rows, 0, torch.from_numpy(src_idx), out=moved)
        keep.append(moved)
        if job.dst_dev:
            if not job.src_dev:
                moved = moved.to(self.device, non_blocking=True)
                keep.append(moved)
            dst_rows.index_copy_(0, self._index_on_device(dst_idx, keep), moved)
        elif job.src_dev:
            landed = torch.empty(moved.shape, dtype=moved.dtype, pin_memory=True)
            landed.copy_(moved, non_blocking=True)
            keep.append(landed)
            tail.append(lambda: dst_rows.index_copy_(0, torch.from_numpy(dst_idx), landed))
        else:  # host to host: nothing crosses the link
            dst_rows.index_copy_(0, torch.from_numpy(dst_idx), moved)

    # -- host memory registration -------------------------------------------------------------
    def _registrar(self):
        return CudartRegistrar()

    @functools.cached_property
    def _host_registrar(self):
        # One per backend: finding the runtime library (xpu) scans /proc and loads it.
        return self._registrar()

    def _register_range(self, address: int, nbytes: int) -> int:
        self._host_registrar.register(address, nbytes)
        return address

    def _unregister_range(self, address: int) -> None:
        self._host_registrar.unregister(address)

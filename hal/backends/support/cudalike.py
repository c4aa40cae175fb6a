"""What the cuda and xpu backends share: torch.cuda streams and events, host registration, plans.

Kunlunxin XPUs run under torch_xmlir as torch device type "cuda": stock torch.cuda streams,
events and copies run on a CUDA-compatible runtime shim over the Kunlun runtime. So one
implementation serves both; cuda.py and xpu.py differ in probe() and in how host memory is
registered.

How `execute` moves one CopyGroup:
- few segments (<= DIRECT_SEGMENT_LIMIT): one copy_(non_blocking=True) per segment, i.e. one
  DMA descriptor each -- the per-descriptor behaviour users measure;
- more: both buffers are viewed as rows of `unit` bytes (gcd of every offset and length),
  segments expand to row indices, and the bytes go gather -> one contiguous copy -> scatter.
  Device-side gathers and scatters are index ops on the stream. A host-side gather (H2D) runs
  on the CPU inside execute(); a host-side scatter (D2H) runs on the stream's completion thread
  once the device part is done, and the returned event covers it. Hence the rule: a plan that
  reads host bytes another plan writes is submitted after that plan's event completes (HiCache
  loads only after the backup is acknowledged).
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from hal.backend import Backend, Capabilities, Event, Stream
from hal.transfer.layouts import positive_int
from hal.transfer.plan import CopyGroup, Segments, TransferPlan, check_group
from hal.transfer.rows import flat_bytes, row_views

# Up to this many segments a group is copied descriptor by descriptor (layer_first runs are few).
DIRECT_SEGMENT_LIMIT = 64

def split_range(address: int, nbytes: int, limit: int | None) -> list[tuple[int, int]]:
    """[address, address + nbytes) as consecutive (start, length) pieces of at most `limit` bytes."""
    if limit is None or nbytes <= limit:
        return [(address, nbytes)]
    return [(address + o, min(limit, nbytes - o)) for o in range(0, nbytes, limit)]


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


# -- streams and events ---------------------------------------------------------------------

class CudaEvent(Event):
    """A torch.cuda.Event plus, for D2H gathers, the host-side scatter that follows it."""

    modeled_time = None

    def __init__(self, torch_event: torch.cuda.Event, keep: list, earlier: list[CudaEvent],
                 host_tail: list[Callable[[], Any]] | None):
        self.torch_event = torch_event
        self._keep = keep  # staging and index tensors the queued work still reads
        self._earlier = earlier  # host tails queued before this event on the same stream
        self._host_tail = host_tail
        self._host_done = threading.Event()
        self._error: BaseException | None = None
        if not host_tail:
            self._host_done.set()

    def host_pending(self) -> bool:
        return not self._host_done.is_set() or any(e.host_pending() for e in self._earlier)

    def _run_host_tail(self) -> None:  # on the stream's completion thread
        try:
            self.torch_event.synchronize()
            for step in self._host_tail:
                step()
        except BaseException as e:  # noqa: BLE001 - re-raised by wait()
            self._error = e
        finally:
            self._host_tail = None
            self._keep = []
            self._host_done.set()

    def query(self) -> bool:
        done = self.torch_event.query() and self._host_done.is_set() and all(e.query() for e in self._earlier)
        if done:
            self._keep = []
        return done

    def wait(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        if deadline is None:
            self.torch_event.synchronize()
        while deadline is not None and not self.torch_event.query():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"event not complete after {timeout} s")
            time.sleep(1e-4)
        if not self._host_done.wait(left()):
            raise TimeoutError(f"host-side scatter not complete after {timeout} s")
        for e in self._earlier:
            e.wait(left())
        self._keep = []
        if self._error is not None:
            raise RuntimeError(f"host-side scatter of a D2H plan failed: {self._error!r}") from self._error


class CudaStream(Stream):
    """A torch.cuda.Stream, plus a worker that finishes host-side scatters in submission order.

    The worker thread exists only while scatters are queued, so idle streams hold no thread.
    """

    def __init__(self, torch_stream: torch.cuda.Stream):
        self.torch_stream = torch_stream
        self._lock = threading.Lock()
        self._pending: list[CudaEvent] = []  # events whose host tail has not run yet
        self._queue: collections.deque[CudaEvent] = collections.deque()
        self._worker: threading.Thread | None = None

    def _tail_loop(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._worker = None
                    return
                ev = self._queue.popleft()
            ev._run_host_tail()

    def _record(self, keep: list, host_tail: list | None) -> CudaEvent:
        ev = torch.cuda.Event()
        ev.record(self.torch_stream)
        with self._lock:
            self._pending = [e for e in self._pending if not e._host_done.is_set()]
            out = CudaEvent(ev, keep, list(self._pending), host_tail)
            if host_tail:
                self._pending.append(out)
                self._queue.append(out)
                if self._worker is None:
                    self._worker = threading.Thread(target=self._tail_loop, name="cudalike-host-tail", daemon=True)
                    self._worker.start()
        return out

    def record(self) -> CudaEvent:
        return self._record([], None)

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, CudaEvent):
            raise ValueError(f"event: {event!r} is not a cuda/xpu event")
        # The device cannot order after a CPU-side scatter; only then does the caller block.
        if event.host_pending():
            event.wait()
        self.torch_stream.wait_event(event.torch_event)

    def synchronize(self) -> None:
        """Wait for the device and for queued host scatters; re-raise the first scatter failure."""
        self.torch_stream.synchronize()
        with self._lock:
            pending, self._pending = self._pending, []
        first: BaseException | None = None
        for e in pending:
            try:
                e.wait()
            except RuntimeError as err:
                first = first or err
        if first is not None:
            raise first


# -- host registration ------------------------------------------------------------------------

class CudartRegistrar:
    """cudaHostRegister through torch's own libcudart bindings (on Kunlun: the runtime shim's)."""

    name = "cudaHostRegister"

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


@dataclass(frozen=True)
class HostRegistration:
    """What register_host pinned, and through which API, so unregister_host can undo it."""

    address: int
    nbytes: int
    registrar: Any
    pieces: tuple[tuple[int, int], ...]

    @property
    def api(self) -> str:
        return self.registrar.name


# -- the backend -------------------------------------------------------------------------------

class _Job(NamedTuple):
    src: torch.Tensor  # flat uint8 views
    dst: torch.Tensor
    seg: Segments
    src_dev: bool
    dst_dev: bool


class CudaLikeBackend(Backend):
    device_type = "cuda"
    # Largest single host registration; None: no limit known.
    max_registration_bytes: int | None = None

    def __init__(self, profile: Any = None):
        super().__init__(profile)
        # Nothing touches the device until it is used: capabilities() must work without one.
        self._device: torch.device | None = None
        self._default: CudaStream | None = None
        self._lock = threading.Lock()

    @property
    def device(self) -> torch.device:
        if self._device is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        return self._device

    def capabilities(self) -> Capabilities:
        ok, why = self.probe()
        return Capabilities(self.name, ok, why, self.device_type, False, True)

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
    def _check_group(self, op: str, i: int, g: CopyGroup) -> _Job:
        check_group(op, i, g)
        sides = []
        for name, t in (("src", g.src), ("dst", g.dst)):
            on_dev = self.is_device(t)
            if not on_dev and t.device.type != "cpu":
                raise ValueError(f"plan {op}: groups[{i}].{name} is on {t.device}; backend {self.name!r} takes cpu or cuda")
            if on_dev and t.device != self.device:
                raise ValueError(f"plan {op}: groups[{i}] has a buffer on {t.device}; this backend uses {self.device}")
            sides.append((t, on_dev))
        (src, src_dev), (dst, dst_dev) = sides
        return _Job(flat_bytes(src), flat_bytes(dst), g.segments, src_dev, dst_dev)

    def execute(self, plan: TransferPlan, stream: Stream | None = None) -> CudaEvent:
        # Validate everything before any byte moves.
        jobs = [self._check_group(plan.op, i, g) for i, g in enumerate(plan.groups) if len(g.segments.nbytes)]
        if stream is not None and not isinstance(stream, CudaStream):
            raise ValueError(f"stream: {stream!r} is not a {self.name} stream")
        if jobs:
            plan.direction = f"{'d' if jobs[0].src_dev else 'h'}2{'d' if jobs[0].dst_dev else 'h'}"
        stream = stream or self.default_stream()
        keep: list = []
        tail: list = []
        with torch.cuda.device(self.device), torch.cuda.stream(stream.torch_stream):
            for job in jobs:
                if len(job.seg.nbytes) <= DIRECT_SEGMENT_LIMIT:
                    self._copy_segments(job)
                else:
                    self._copy_rows(job, keep, tail)
        return stream._record(keep, tail or None)

    @staticmethod
    def _copy_segments(job: _Job) -> None:
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

    def register_host(self, address: int, nbytes: int) -> HostRegistration:
        address, nbytes = positive_int("address", address), positive_int("nbytes", nbytes)
        registrar = self._host_registrar
        done: list[tuple[int, int]] = []
        try:
            for start, length in split_range(address, nbytes, self.max_registration_bytes):
                registrar.register(start, length)
                done.append((start, length))
        except BaseException:
            for start, _ in reversed(done):  # all or nothing
                try:
                    registrar.unregister(start)
                except Exception:  # noqa: BLE001 - the original failure is the one to report
                    pass
            raise
        return HostRegistration(address, nbytes, registrar, tuple(done))

    def unregister_host(self, handle: Any) -> None:
        if not isinstance(handle, HostRegistration):
            raise ValueError(f"handle: {handle!r} did not come from {self.name}.register_host")
        errors = []
        for start, _ in handle.pieces:
            try:
                handle.registrar.unregister(start)
            except RuntimeError as e:
                errors.append(str(e))
        if errors:
            raise RuntimeError("; ".join(errors))

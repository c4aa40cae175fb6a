"""The backend contract: what every device (emu, count, cuda, xpu, out-of-tree) implements.

A Backend is three contracts: `TransferEngine`, `HostRegistrar` and `TopologySource`.
The public methods validate and dispatch once; a backend fills only underscore hooks.
Nothing outside `hal/backends/` knows which backend runs: callers use `get_backend(name, profile)`.
What each contract and hook covers: docs/architecture.md, "Design notes".
"""

from __future__ import annotations

import abc
import dataclasses
import threading
from typing import Any

import torch

from hal.memory.cpu_device import CpuDeviceMemory
from hal.memory.registration import HostRegistrar, HostRegistration
from hal.registry import ENTRY_POINT_GROUP, available_backends, backend_class, get_backend, register
from hal.topology.discover import discover, has_hardware
from hal.topology.topology_model import Topology
from hal.transfer import kvcacheio
from hal.transfer.direction import Direction
from hal.transfer.plan import CopyGroup, TransferPlan, check_group

__all__ = [
    "ENTRY_POINT_GROUP", "Backend", "Capabilities", "Event", "HostRegistrar", "HostRegistration", "Stream",
    "TopologySource", "TransferEngine", "available_backends", "backend_class", "get_backend", "register",
]


_CPU_DEVICE_LOCK = threading.Lock()  # makes each backend's CpuDeviceMemory once


@dataclasses.dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What a backend can do here, every field named where it is made."""

    name: str
    available: bool
    reason: str  # why the backend cannot run here, "" when it can
    device_type: str  # torch device type of device buffers ("cpu" on emu, "meta" on count)
    modeled_clock: bool  # events carry modeled seconds from the profile's link model
    host_registration: bool  # register_host pins/maps memory for DMA
    moves_bytes: bool = True  # False: plans are priced, not run (the count backend)


class Event(abc.ABC):
    """Completion of everything submitted to a stream before it was recorded."""

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> None:
        """Block the caller; re-raise the failure of the work it covers."""

    @abc.abstractmethod
    def query(self) -> bool:
        """True when the covered work is complete (never blocks)."""

    # Seconds on the stream's modeled clock when the covered work ends (None: not modeled).
    modeled_time: float | None = None


class Stream(abc.ABC):
    """An in-order queue of work. Submissions return at once."""

    @abc.abstractmethod
    def record(self) -> Event:
        """An event completing when everything submitted so far has run."""

    @abc.abstractmethod
    def wait_event(self, event: Event) -> None:
        """Later work on this stream starts after `event` (the caller does not block)."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Block until everything submitted so far has run; re-raise its failure."""

    def close(self) -> None:
        """Let queued work finish, then release the stream (threads, handles)."""
        return None


class TransferEngine(abc.ABC):
    """Device buffers, streams, and plans executed on them."""

    name: str = "?"
    device_type: str = "cpu"  # torch device type of the buffers alloc_device returns
    stream_type: type[Stream] = Stream  # the streams execute accepts (this backend's own)
    # True: a plan naming its buffers by symbolic keys (built without memory) is priced and
    # queued instead of refused; its direction is the one the planner set.
    runs_symbolic_plans: bool = False
    # True: inline_stream() gives streams that run their work on the submitting thread (the
    # work is synchronous CPU work anyway: emu's copies, count's pricing).
    runs_inline: bool = False

    @abc.abstractmethod
    def alloc_device(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A buffer in this backend's device memory."""

    def is_device(self, tensor: torch.Tensor) -> bool:
        """True when `tensor` lives in this backend's device memory (decides d2h vs h2d): a
        tensor of the device's type, or on a CPU device one that alloc_cpu_device made."""
        if self.device_type == "cpu":
            return tensor in self._cpu_device_memory()
        return tensor.device.type == self.device_type

    def alloc_cpu_device(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A CPU buffer standing for device memory (a backend whose device is the CPU): its own
        mapping, which is_device recognises until it is freed (hal.memory.cpu_device)."""
        return self._cpu_device_memory().alloc(tuple(shape), dtype)

    def _cpu_device_memory(self) -> CpuDeviceMemory:
        with _CPU_DEVICE_LOCK:
            if "_cpu_device" not in self.__dict__:
                self._cpu_device = CpuDeviceMemory()
            return self._cpu_device

    def device_memory_bytes(self) -> int | None:
        """Total memory of this backend's device as its runtime reports it; None where device
        buffers live in host memory (emu, count) or the runtime does not say."""
        return None

    @abc.abstractmethod
    def new_stream(self) -> Stream:
        """A new in-order stream, independent of the others."""

    @abc.abstractmethod
    def default_stream(self) -> Stream:
        """The stream `execute` uses when given none."""

    def inline_stream(self) -> Stream:
        """A new stream whose submissions run on the calling thread before they return (its
        events are complete when recorded; it holds no thread). Only where `runs_inline`: on a
        device the work is asynchronous and a stream is the device's queue."""
        raise ValueError(f"backend {self.name!r}: has no inline streams (its transfers are asynchronous)")

    def execute(self, plan: TransferPlan, stream: Stream | None = None) -> Event:
        """Enqueue `plan` on `stream` (default stream if None); return its completion event.

        Every group is checked first (ValueError naming it: bounds, contiguity, buffers this
        backend can reach) and `plan.direction` is set from which side is device memory, so a
        bad plan fails here with nothing queued.
        """
        if stream is not None and not isinstance(stream, self.stream_type):
            raise ValueError(f"stream: {stream!r} is not a stream of backend {self.name!r}")
        if plan.totals is not None and not self.runs_symbolic_plans:
            raise ValueError(f"plan {plan.op}: a totals-only plan (no segments) cannot run on {self.name}, "
                             "which moves bytes")
        if binds_memory(plan) or not self.runs_symbolic_plans:
            for i, g in enumerate(plan.groups):
                check_group(plan.op, i, g)
                self._check_buffers(plan.op, i, g)
            if plan.groups:
                g = plan.groups[0]
                plan.direction = Direction.of(self._on_device(g.src), self._on_device(g.dst))
        return self._execute(plan, stream or self.default_stream())

    def _on_device(self, buffer: Any) -> bool:
        return isinstance(buffer, torch.Tensor) and self.is_device(buffer)

    def _check_buffers(self, op: str, i: int, group: CopyGroup) -> None:
        """Hook: refuse a group whose tensors this backend cannot reach (ValueError)."""
        return None

    @abc.abstractmethod
    def _execute(self, plan: TransferPlan, stream: Stream) -> Event:
        """Hook: queue a checked plan (direction set) on `stream`; return its completion event."""

    def model_seconds(self, plan: TransferPlan) -> float | None:
        """Seconds `plan` costs on this backend's modeled clock; None where there is no model
        (real devices) or the profile leaves a needed value unknown."""
        return None


def binds_memory(plan: TransferPlan) -> bool:
    """True when the plan's buffers are tensors, not the symbolic keys of a plan built without memory."""
    return bool(plan.groups) and isinstance(plan.groups[0].src, torch.Tensor)


class TopologySource:
    """The machine a backend runs on, as hal.topology models it (from the backend's
    `capabilities()` and `profile`, which Backend supplies)."""

    profile: Any = None

    def topology(self) -> Topology:
        """Real sysfs when this backend drives hardware here, else its profile's emulated box."""
        return discover(self.profile, hardware=has_hardware(self.capabilities()))


class Backend(TransferEngine, HostRegistrar, TopologySource):
    """A device: transfer engine + host registrar + topology source, bound to a hardware profile."""

    # Profile a run gets when none is named (`hicache conform`, the plugin); None: a profile
    # named like the backend if one ships, else none.
    default_profile: str | None = None
    # How plans become device copies, where a backend offers a choice (cuda/xpu: "descriptor",
    # "gather"); the instance's mode is `copy_mode`, and `with_copy_mode(mode)` gives a sibling
    # in another mode. Empty / None: one way only (emu, count).
    copy_modes: tuple[str, ...] = ()
    copy_mode: str | None = None

    def __init__(self, profile: Any = None):
        self.profile = profile

    @classmethod
    @abc.abstractmethod
    def probe(cls) -> tuple[bool, str]:
        """(available, reason) without side effects: used to skip with a stated reason."""

    def capabilities(self) -> Capabilities:
        """What this backend can do here; suites skip on these, never on the backend's name."""
        ok, why = self.probe()
        return Capabilities(name=self.name, available=ok, reason=why, device_type=self.device_type,
                            modeled_clock=False, host_registration=False)

    def close(self) -> None:
        """Release the streams this backend made; device buffers stay valid while referenced."""
        return None

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# The op set runs on emu unless a caller sets another backend (kvcacheio.set_backend / use).
kvcacheio.set_default_factory(lambda: get_backend("emu"))

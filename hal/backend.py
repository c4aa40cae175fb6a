"""The backend contract: what every device (emu, cuda, xpu, out-of-tree) implements.

A backend moves bytes described by a `TransferPlan` (hal.transfer.plan) on a `Stream`, and reports
completion through an `Event`. Nothing outside `hal/backends/` knows which backend runs;
callers get one from `get_backend(name, profile)`.

Out-of-tree backends register under the entry-point group ``hicache.backends``
(name = class path), like vLLM's platform plugins.
"""

from __future__ import annotations

import abc
import threading
from importlib import metadata
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

if TYPE_CHECKING:
    from hal.topology.model import Topology
    from hal.transfer.plan import TransferPlan

ENTRY_POINT_GROUP = "hicache.backends"


class Capabilities(NamedTuple):
    name: str
    available: bool
    reason: str  # why the backend cannot run here, "" when it can
    device_type: str  # torch device type of device buffers ("cpu" on emu)
    modeled_clock: bool  # events carry modeled seconds from the profile's link model
    host_registration: bool  # register_host pins/maps memory for DMA
    moves_bytes: bool = True  # False: plans are priced, not run (the count backend)


class Event(abc.ABC):
    """Completion of everything submitted to a stream before it was recorded."""

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> None:
        """Block the caller; re-raise the failure of the work it covers."""

    @abc.abstractmethod
    def query(self) -> bool: ...

    # Seconds on the stream's modeled clock when the covered work ends (None: not modeled).
    modeled_time: float | None = None


class Stream(abc.ABC):
    """An in-order queue of work. Submissions return at once."""

    @abc.abstractmethod
    def record(self) -> Event: ...

    @abc.abstractmethod
    def wait_event(self, event: Event) -> None:
        """Later work on this stream starts after `event` (the caller does not block)."""

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    def close(self) -> None:
        """Let queued work finish, then release the stream (threads, handles)."""
        return None


class Backend(abc.ABC):
    name: str = "?"

    def __init__(self, profile: Any = None):
        self.profile = profile

    @classmethod
    @abc.abstractmethod
    def probe(cls) -> tuple[bool, str]:
        """(available, reason) without side effects: used to skip with a stated reason."""

    def capabilities(self) -> Capabilities:
        ok, why = self.probe()
        return Capabilities(self.name, ok, why, self.device_type, False, False)

    device_type: str = "cpu"

    # -- device memory -------------------------------------------------------
    @abc.abstractmethod
    def alloc_device(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor: ...

    def is_device(self, tensor: torch.Tensor) -> bool:
        """True when `tensor` lives in this backend's device memory (decides d2h vs h2d)."""
        return tensor.device.type == self.device_type and self.device_type != "cpu"

    # -- transfer ------------------------------------------------------------
    @abc.abstractmethod
    def new_stream(self) -> Stream: ...

    @abc.abstractmethod
    def default_stream(self) -> Stream: ...

    @abc.abstractmethod
    def execute(self, plan: TransferPlan, stream: Stream | None = None) -> Event:
        """Enqueue `plan` on `stream` (default stream if None); return its completion event."""

    # -- host memory registration (pinning for DMA) -------------------------
    def register_host(self, address: int, nbytes: int) -> Any:
        """Register [address, address+nbytes) for DMA; returns a handle for unregister_host."""
        return None

    def unregister_host(self, handle: Any) -> None:
        return None

    def close(self) -> None:
        """Release the streams this backend made; device buffers stay valid while referenced."""
        return None

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- topology ------------------------------------------------------------
    def topology(self) -> Topology:
        from hal.topology.model import discover

        return discover(backend=self.name, profile=self.profile)


_BUILTIN = {
    "emu": "hal.backends.emu:EmuBackend",
    "cuda": "hal.backends.cuda:CudaBackend",
    "xpu": "hal.backends.xpu:XpuBackend",
    "count": "hal.backends.count:CountBackend",
}
_lock = threading.Lock()
_registry: dict[str, type[Backend]] = {}


def register(name: str, cls: type[Backend]) -> None:
    with _lock:
        _registry[name] = cls


def _load(spec: str) -> type[Backend]:
    mod, _, attr = spec.partition(":")
    module = __import__(mod, fromlist=[attr])
    return getattr(module, attr)


def available_backends() -> list[str]:
    names = set(_BUILTIN) | set(_registry)
    names |= {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names)


def backend_class(name: str) -> type[Backend]:
    with _lock:
        if name in _registry:
            return _registry[name]
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            cls = ep.load()
            register(name, cls)
            return cls
    if name in _BUILTIN:
        cls = _load(_BUILTIN[name])
        register(name, cls)
        return cls
    raise ValueError(f"backend: unknown backend {name!r}; known: {', '.join(available_backends())}")


def get_backend(name: str = "emu", profile: Any = None) -> Backend:
    """A backend instance bound to a hardware profile (name, path or loaded Profile)."""
    cls = backend_class(name)
    ok, why = cls.probe()
    if not ok:
        raise RuntimeError(f"backend {name!r} is not available here: {why}")
    if profile is not None and not hasattr(profile, "link"):
        from hardware_profiles.model import load_profile

        profile = load_profile(profile)
    return cls(profile)

"""Counting backend: prices plans on the modeled clock and moves no bytes (like tinygrad's NULL device).

Device buffers are torch "meta" tensors (shape and dtype, no storage); host buffers are CPU
tensors, and plans may also name buffers by symbolic keys (plans built without memory). A plan's
modeled seconds come from the profile's link model through the same code emu uses, so count and
emu agree to the bit on every plan. Streams are modeled clocks advanced in submission order:
there is no work to wait for, so events are complete when recorded.
"""

from __future__ import annotations

from typing import Any

import torch

from hal.backend import Backend, Capabilities, Event, Stream
from hal.backends.support.modeled_clock import (
    HostFactorsMixin,
    ModeledClock,
    modeled_profile,
    plan_seconds,
)
from hal.transfer.plan import TransferPlan


class CountEvent(Event):
    """Complete at once; carries the stream's modeled time when it was recorded."""

    def __init__(self, modeled_time: float | None):
        self.modeled_time = modeled_time

    def query(self) -> bool:
        return True

    def wait(self, timeout: float | None = None) -> None:
        return None


class CountStream(Stream):
    def __init__(self) -> None:
        self.clock = ModeledClock()

    def record(self) -> CountEvent:
        return CountEvent(self.clock.reading())

    def wait_event(self, event: Event) -> None:
        self.clock.wait_until(event.modeled_time)

    def synchronize(self) -> None:
        return None


class CountBackend(HostFactorsMixin, Backend):
    name = "count"
    device_type = "meta"
    default_profile = "emu"
    stream_type = CountStream
    runs_symbolic_plans = True
    runs_inline = True  # its streams are inline already: events are complete when recorded

    def __init__(self, profile: Any = None):
        super().__init__(modeled_profile(profile, self.default_profile))
        self._default: CountStream | None = None

    @classmethod
    def probe(cls) -> tuple[bool, str]:
        return True, ""  # needs nothing but torch

    def capabilities(self) -> Capabilities:
        return Capabilities(name=self.name, available=True, reason="", device_type=self.device_type, modeled_clock=True,
                            host_registration=False, moves_bytes=False)

    def alloc_device(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")

    def new_stream(self) -> CountStream:
        return CountStream()

    def inline_stream(self) -> CountStream:
        return CountStream()

    def default_stream(self) -> CountStream:
        if self._default is None:
            self._default = CountStream()
        return self._default

    def model_seconds(self, plan: TransferPlan) -> float | None:
        """Modeled cost of `plan` on the profile's link, or None when the profile can't say."""
        return plan_seconds(self.profile.link, plan, self.host_factors)

    def _execute(self, plan: TransferPlan, stream: CountStream) -> CountEvent:
        stream.clock.advance(self.model_seconds(plan))
        return stream.record()


BACKEND = CountBackend

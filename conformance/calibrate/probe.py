"""Timed transfers on any backend, nvbandwidth-style: warm-up, repeats, median and spread.

One probe moves `nbytes` between a device buffer from the backend and a host buffer (pinned
where the device is real) in `segments` equal segments spread over `launches` submissions, and
times it on the wall (submission to the last event) and, where the backend keeps one, on its
modeled clock. The peer is a plain memcpy of the same bytes in the same run (the copy engine called
directly), so a figure can be read as a ratio on any host. Used by the target suite (conformance.targets) and `hicache calibrate`.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import numpy as np
import torch

from hal.transfer import segcopy
from hal.transfer.direction import Direction
from hal.transfer.plan import CopyGroup, Segments, TransferPlan


@dataclass(frozen=True)
class Sample:
    """Seconds of one probe configuration over its repeats."""

    nbytes: int
    segments: int
    launches: int
    wall_s: tuple[float, ...]
    modeled_s: float | None  # the backend's modeled clock for one repeat; None: no model

    @property
    def median_s(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats: how much to trust the median."""
        return (max(self.wall_s) - min(self.wall_s)) / self.median_s if self.median_s > 0 else 0.0

    @property
    def gbps(self) -> float:
        return self.nbytes / self.median_s / 1e9

    @property
    def gbps_stderr(self) -> float | None:
        """Standard error of `gbps`: the median's (sqrt(pi/2) x the repeats' standard deviation /
        sqrt(n), its large-sample value) carried to bytes / median; None with fewer than 3 repeats."""
        return median_rate_stderr(self.nbytes, self.wall_s)

    @property
    def best_gbps(self) -> float:
        """From the fastest repeat: the least disturbed one on a shared host."""
        return self.nbytes / min(self.wall_s) / 1e9

    @property
    def modeled_gbps(self) -> float | None:
        return None if not self.modeled_s else self.nbytes / self.modeled_s / 1e9

    def to_json(self) -> dict:
        return {"bytes": self.nbytes, "segments": self.segments, "launches": self.launches,
                "median_s": self.median_s, "spread": self.spread, "gbps": self.gbps, "best_gbps": self.best_gbps,
                "modeled_s": self.modeled_s, "repeats": len(self.wall_s)}


def median_stderr(samples) -> float | None:
    """Standard error of the median of `samples`: sqrt(pi / 2) x standard deviation / sqrt(n); None
    below 3 samples (no spread worth the name)."""
    if len(samples) < 3:
        return None
    return math.sqrt(math.pi / 2) * statistics.stdev(samples) / math.sqrt(len(samples))


def median_rate_stderr(nbytes: int, seconds) -> float | None:
    """Standard error of nbytes / median(seconds) in GB/s (the median's, relative, carried over)."""
    se = median_stderr(seconds)
    med = statistics.median(seconds)
    return None if se is None or med <= 0 else nbytes / med / 1e9 * se / med


class Buffers:
    """One device buffer and one host buffer of `nbytes`, reused by every probe of that size."""

    def __init__(self, backend, nbytes: int):
        self.backend, self.nbytes = backend, int(nbytes)
        self.device = backend.alloc_device((self.nbytes,), torch.uint8)
        pin = backend.device_type not in ("cpu", "meta")
        self.host = torch.ones(self.nbytes, dtype=torch.uint8, pin_memory=pin)

    def plans(self, direction: Direction | str, segments: int, launches: int) -> list[TransferPlan]:
        """`launches` plans covering the buffer once, `segments` segments in all (at least one each)."""
        if launches < 1 or segments < launches:
            raise ValueError(f"segments: need segments >= launches >= 1, got {segments}, {launches}")
        src, dst = (self.host, self.device) if Direction(direction) == Direction.H2D else (self.device, self.host)
        bounds = np.linspace(0, self.nbytes, segments + 1).astype(np.int64)
        starts, sizes = bounds[:-1], np.diff(bounds)
        per_plan = np.array_split(np.arange(segments), launches)
        return [TransferPlan("probe", [CopyGroup(src, dst, Segments(starts[i], starts[i], sizes[i]))])
                for i in per_plan]


def run_once(backend, stream, plans: list[TransferPlan]) -> tuple[float, float | None]:
    """(wall seconds, modeled seconds or None) of executing `plans` on `stream` back to back."""
    start = stream.record()
    start.wait()
    t0 = time.perf_counter()
    event = None
    for plan in plans:
        event = backend.execute(plan, stream)
    event.wait()
    wall = time.perf_counter() - t0
    if start.modeled_time is None or event.modeled_time is None:
        return wall, None
    return wall, event.modeled_time - start.modeled_time


def probe(backend, buffers: Buffers, direction: Direction | str, *, segments: int = 1, launches: int = 1,
          repeat: int = 5, warmup: int = 1) -> Sample:
    stream = backend.new_stream()
    try:
        plans = buffers.plans(direction, segments, launches)
        for _ in range(warmup):
            run_once(backend, stream, plans)
        walls, modeled = [], None
        for _ in range(repeat):
            wall, modeled = run_once(backend, stream, plans)
            walls.append(wall)
    finally:
        stream.close()
    return Sample(buffers.nbytes, segments, launches, tuple(walls), modeled)


class Memcpy:
    """The peer: `nbytes` copied by this host's copy engine called directly (hal.transfer.segcopy:
    one contiguous memcpy split over the threads the engine would use; torch's copy where the
    native engine is absent), with no backend, stream or event around it. Between the probe's own
    buffers when both are host-addressable (emu), so only what the backend adds differs; else
    between two host buffers."""

    def __init__(self, nbytes: int, src: torch.Tensor | None = None, dst: torch.Tensor | None = None):
        self.nbytes = int(nbytes)
        if src is None or dst is None:
            src, dst = torch.ones(self.nbytes, dtype=torch.uint8), torch.zeros(self.nbytes, dtype=torch.uint8)
        self.src, self.dst = src, dst
        self.native = segcopy.engine() == "native"
        self.args = (np.array([src.data_ptr()], dtype=np.uint64), np.array([dst.data_ptr()], dtype=np.uint64),
                     np.array([self.nbytes], dtype=np.uint64))

    def __call__(self) -> float:
        t0 = time.perf_counter()
        if self.native:
            segcopy.copy_segments(*self.args)
        else:
            self.dst.copy_(self.src)
        return time.perf_counter() - t0


def memcpy_sample(nbytes: int, repeat: int = 5, warmup: int = 1) -> Sample:
    copy = Memcpy(nbytes)
    for _ in range(warmup):
        copy()
    return Sample(int(nbytes), 1, 1, tuple(copy() for _ in range(repeat)), None)


def paired(backend, buffers: Buffers, direction: Direction | str, rounds: int = 7,
           segments: int = 1) -> tuple[Sample, Sample]:
    """(transfer, memcpy) samples taken in alternation, one of each per round after a warm-up
    of both, so load on a shared host hits the two alike."""
    same = buffers.device.device.type == "cpu"  # emu: "device" memory is host memory
    if same:
        src, dst = (buffers.host, buffers.device) if Direction(direction) == Direction.H2D else (buffers.device,
                                                                                                  buffers.host)
        copy = Memcpy(buffers.nbytes, src, dst)
    else:
        copy = Memcpy(buffers.nbytes)
    stream = backend.new_stream()
    try:
        plans = buffers.plans(direction, segments, 1)
        run_once(backend, stream, plans)
        copy()
        walls, copies, modeled = [], [], None
        for _ in range(rounds):
            wall, modeled = run_once(backend, stream, plans)
            walls.append(wall)
            copies.append(copy())
    finally:
        stream.close()
    return (Sample(buffers.nbytes, segments, 1, tuple(walls), modeled),
            Sample(buffers.nbytes, 1, 1, tuple(copies), None))


def paired_ratio(transfer: Sample, peer: Sample) -> float:
    """Median over rounds of peer time / transfer time: each round's two timings are adjacent, so
    load on a shared host moves both, and the median drops the rounds where it hit only one."""
    return statistics.median(p / t for p, t in zip(peer.wall_s, transfer.wall_s, strict=True))

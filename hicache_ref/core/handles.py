"""What the cache controller hands to the scheduler thread: transfer handles, acks, counters.

A handle stands for one queued transfer. Its backend events appear when the controller's
submitter thread reaches it, so waiting first waits for the submission, then for the
event; a failure seen here also makes the controller fail-stop, through the controller's
shared state (hicache_ref.core.controller_state), which each handle is given.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from hal.transfer.direction import Direction
from hicache_ref.core.controller_state import ControllerState, TransferCancelled


class Ack(NamedTuple):
    direction: Direction  # D2H (a backup) or H2D (a load); compares equal to "d2h" / "h2d"
    tag: Any
    num_tokens: int
    modeled_time: float | None  # the stream's modeled clock when the transfer ended


@dataclass
class DirectionStats:
    transfers: int = 0
    tokens: int = 0
    bytes: int = 0
    segments: int = 0
    launches: int = 0  # copy submissions: one per backup, one per layer per load (merged loads: once)
    modeled_seconds: float | None = 0.0
    submit_seconds: float = 0.0  # submitter-thread wall time inside pool_ops calls
    max_enqueue_seconds: float = 0.0  # longest the scheduler thread spent in write()/load()


@dataclass
class ControllerStats:
    d2h: DirectionStats = field(default_factory=DirectionStats)
    h2d: DirectionStats = field(default_factory=DirectionStats)
    wall_seconds: float = 0.0  # from construction to the last completion seen

    @property
    def modeled_seconds(self) -> float | None:
        a, b = self.d2h.modeled_seconds, self.h2d.modeled_seconds
        return None if a is None or b is None else a + b


class TransferHandle:
    """One queued transfer: its per-submission backend events appear as the submitter runs."""

    def __init__(self, state: ControllerState, direction: Direction, tag: Any, num_tokens: int, n_events: int):
        self.direction, self.tag, self.num_tokens = direction, tag, num_tokens
        self.modeled_cost: float | None = 0.0  # this transfer's own modeled seconds (set at submission)
        self._state = state
        self._cond = threading.Condition()
        self._events: list = []
        self._n_events = n_events
        self._error: BaseException | None = None
        # Set while the transfer is held for a merged submission (CacheController.merged_loads):
        # called before any wait, it submits what is held, so a wait never waits on nothing.
        self._submit_held = None

    # -- submitter side ---------------------------------------------------------------
    def _add_events(self, events: list) -> None:
        with self._cond:
            self._events.extend(events)
            self._cond.notify_all()

    def _fail(self, error: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    def acked(self) -> list[TransferHandle]:
        """The handles whose acks this submission's completion gives (itself)."""
        return [self]

    # -- scheduler side -----------------------------------------------------------------
    def _event(self, i: int, timeout: float | None):
        if self._submit_held is not None:
            self._submit_held()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self._events) <= i and self._error is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{self.direction} transfer {self.tag!r}: not submitted after {timeout} s")
                self._cond.wait(left)
            if len(self._events) > i:
                return self._events[i]
            err = self._error
        if isinstance(err, TransferCancelled):
            raise err
        raise self._state.note_error(self, err, reported=True)

    def _wait_event(self, i: int, timeout: float | None) -> None:
        with self._state.waiting():
            self._wait_event_now(i, timeout)

    def _wait_event_now(self, i: int, timeout: float | None) -> None:
        t0 = time.monotonic()
        ev = self._event(i, timeout)
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - t0))
        try:
            ev.wait(left)
        except TimeoutError:
            if not ev.query():
                raise
        except Exception as e:  # noqa: BLE001 - the stream's failure, with our context
            # The watcher may not have seen it yet: make the controller fail-stop now, so the
            # next poll() raises it too, whatever the threads' timing.
            raise self._state.note_error(self, e, reported=True) from e

    def wait(self, timeout: float | None = None) -> None:
        """Block until every submission of this transfer completed; TransferError if one failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for i in range(self._n_events):
            self._wait_event(i, None if deadline is None else max(0.0, deadline - time.monotonic()))

    def done(self) -> bool:
        with self._cond:
            events = list(self._events)
            if self._error is not None:
                return True
        return len(events) == self._n_events and all(e.query() for e in events)


class WriteHandle(TransferHandle):
    """A queued D2H backup (one all-layer submission)."""


class LoadHandle(TransferHandle):
    """A queued H2D load: one event per layer, so layer i can be waited on alone."""

    @property
    def layers(self) -> int:
        return self._n_events

    def layer_event(self, layer: int, timeout: float | None = None):
        """The backend Event of `layer`'s load (blocks only until the submitter reached it):
        a compute stream can `wait_event` on it without blocking the host."""
        layer = self._layer(layer)
        with self._state.waiting():
            return self._event(layer, timeout)

    def wait_layer(self, layer: int, timeout: float | None = None) -> None:
        """Block until `layer`'s load completed (ValueError at once for a layer not in [0, layers))."""
        self._wait_event(self._layer(layer), timeout)

    def _layer(self, layer) -> int:
        """`layer` as an index of this load's layers; ValueError naming it otherwise, before any
        wait (a layer past the end would otherwise wait for an event that never comes)."""
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)):
            raise ValueError(f"layer: expected an integer layer index, got {layer!r}")
        if not 0 <= layer < self._n_events:
            raise ValueError(f"layer: {int(layer)} is outside [0, {self._n_events})")
        return int(layer)

    def wait_all(self, timeout: float | None = None) -> None:
        self.wait(timeout)


class MergedLoadHandle(LoadHandle):
    """One submission standing for several held loads (CacheController.merged_loads): its
    events and failure are theirs too, and its completion acknowledges each of them."""

    def __init__(self, state: ControllerState, members: list[LoadHandle], layers: int):
        super().__init__(state, Direction.H2D, ("merged_loads", len(members)), sum(m.num_tokens for m in members),
                         layers)
        self.members = members

    def _add_events(self, events: list) -> None:
        super()._add_events(events)
        for m in self.members:
            m._add_events(events)

    def _fail(self, error: BaseException) -> None:
        super()._fail(error)
        for m in self.members:
            m._fail(error)

    def acked(self) -> list[TransferHandle]:
        return list(self.members)


__all__ = ["Ack", "ControllerStats", "DirectionStats", "LoadHandle", "MergedLoadHandle", "TransferHandle",
           "WriteHandle"]

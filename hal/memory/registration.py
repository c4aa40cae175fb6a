"""Host-memory registration in pieces, all or nothing: written once, used by every caller.

A backend registers [address, address + nbytes) by registering consecutive ranges through its
per-range hook (some runtimes cap one registration's size); `hal.memory.host` registers a pool
in chunks through the backend. Both go through `register_ranges`, so a failure part way always
undoes the ranges already registered, newest first, and reports the original failure.
A host buffer is registered whole unless its caller asks for pieces (`check_registration`,
`register_buffer`): a copy across two registrations is one some drivers refuse.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hal.common.arg_checks import positive_int
from hal.memory.vm import PAGE


def split_range(address: int, nbytes: int, limit: int | None) -> list[tuple[int, int]]:
    """[address, address + nbytes) as consecutive (start, length) pieces of at most `limit` bytes."""
    if limit is None or nbytes <= limit:
        return [(address, nbytes)]
    return [(address + o, min(limit, nbytes - o)) for o in range(0, nbytes, limit)]


def register_ranges(register: Callable[[int, int], Any], unregister: Callable[[Any], None],
                    address: int, nbytes: int, limit: int | None) -> list[Any]:
    """Register every piece of split_range(address, nbytes, limit); returns their handles in order.

    On a failure the pieces already registered are unregistered (newest first) and the failure
    is re-raised with a note saying how far it got.
    """
    handles: list[Any] = []
    try:
        for start, length in split_range(address, nbytes, limit):
            handles.append(register(start, length))
    except BaseException as e:
        # What add_note does, spelled so Python 3.10 (which lacks it) keeps the note too.
        e.__notes__ = [*getattr(e, "__notes__", ()), f"host registration failed at chunk {len(handles)}; "
                       f"chunks 0..{len(handles) - 1} rolled back"]
        release(unregister, handles)
        raise
    return handles


def release(unregister: Callable[[Any], None], handles: list[Any]) -> list[BaseException]:
    """Unregister and remove every handle of `handles`, newest first; keep going past failures
    (every other range must still be released) and return them."""
    errors: list[BaseException] = []
    while handles:
        try:
            unregister(handles.pop())
        except Exception as e:  # noqa: BLE001 - reported to the caller, after the rest are released
            errors.append(e)
    return errors


@dataclass(eq=False)
class HostRegistration:
    """What Backend.register_host registered: the range and the per-range handles still held
    (emptied by unregister_host, so unregistering twice releases nothing twice)."""

    address: int
    nbytes: int
    ranges: list[Any] = field(default_factory=list)


class HostRegistrar:
    """Host memory made ready for DMA (pinned, mapped), range by range."""

    name: str = "?"
    # Largest range one `_register_range` call may get; None: no limit known.
    max_registration_bytes: int | None = None

    def register_host(self, address: int, nbytes: int) -> HostRegistration:
        """Register [address, address+nbytes) for DMA; returns the handle for unregister_host.

        The range is split at max_registration_bytes; if one piece fails, the pieces before it
        are unregistered and the failure is raised: all or nothing.
        """
        address, nbytes = positive_int("address", address), positive_int("nbytes", nbytes)
        ranges = register_ranges(self._register_range, self._unregister_range, address, nbytes,
                                 self.max_registration_bytes)
        return HostRegistration(address, nbytes, ranges)

    def unregister_host(self, handle: HostRegistration) -> None:
        """Undo register_host; every piece is released even if one fails (then RuntimeError)."""
        if not isinstance(handle, HostRegistration):
            raise ValueError(f"handle: {handle!r} did not come from {self.name}.register_host")
        errors = release(self._unregister_range, handle.ranges)
        if errors:
            raise RuntimeError("; ".join(str(e) for e in errors))

    def _register_range(self, address: int, nbytes: int) -> Any:
        """Hook: register one range; returns what `_unregister_range` needs. Default: nothing to do."""
        return None

    def _unregister_range(self, handle: Any) -> None:
        """Hook: undo one `_register_range`."""
        return None


def check_registration(backend, chunk: int | None, nbytes: int, arg: str) -> int | None:
    """`chunk` checked (None or a positive int); with None, `nbytes` must fit one registration."""
    if chunk is not None:
        return positive_int("register_chunk_bytes", chunk)
    limit = getattr(backend, "max_registration_bytes", None)
    if backend is not None and limit is not None and nbytes > limit:
        raise ValueError(f"{arg}: {nbytes} bytes is over backend {backend.name!r}'s one-registration limit of "
                         f"{limit} bytes; a copy may not cross two registrations, so use several buffers")
    return None


def register_buffer(backend: HostRegistrar, address: int, length: int, chunk: int | None) -> tuple[list[Any], float]:
    """Register in chunks of `chunk` bytes (None: the whole range at once), all or nothing
    (register_ranges)."""
    chunk = length if chunk is None else -(-chunk // PAGE) * PAGE  # pinning is per page: no boundary inside one
    t0 = time.perf_counter()
    handles = register_ranges(backend.register_host, backend.unregister_host, address, length, chunk)
    return handles, time.perf_counter() - t0

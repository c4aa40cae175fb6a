"""Hardware-abstraction layer: transfer op set and planner, host memory, topology, backends."""

from hal.backend import Backend, Capabilities, Event, Stream, available_backends, get_backend

__all__ = ["Backend", "Capabilities", "Event", "Stream", "available_backends", "get_backend"]

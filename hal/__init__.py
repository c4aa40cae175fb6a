"""Hardware-abstraction layer: the backend contract and what it is built from.

`backend` (the contract: TransferEngine + HostRegistrar + TopologySource), `registry` (backend
names -> classes, get_backend), `common/` (argument checks, command-line sizes, the lookup-by-name
rule; imports nothing else of hal), `transfer/` (layouts, planner, op set,
CPU copy engine, seed transfer, Direction), `memory/` (host buffers and registration),
`topology/` (NUMA/PCIe model and sources, binding planner), `backends/` (emu, count, cuda, xpu),
`children` (child processes that die with their parent).
"""

from hal.backend import Backend, Capabilities, Event, Stream, available_backends, get_backend

__all__ = ["Backend", "Capabilities", "Event", "Stream", "available_backends", "get_backend"]

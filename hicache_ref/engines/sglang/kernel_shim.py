"""`sgl_kernel.kvcacheio` for SGLang's host pools, served by the HAL's kvcacheio op set.

SGLang imports its transfer ops from `sgl_kernel.kvcacheio` behind a CUDA/ROCm gate, so on a
CPU box the names are never bound. `install` puts a module of that name, whose ops are
hal.transfer.kvcacheio's, in sys.modules and binds in each pool module the names its own
`from sgl_kernel.kvcacheio import ...` statements list (read from the module's source, so the
set follows the installed SGLang). Each op waits for its HAL event: upstream's CPU streams and
events (torch.cpu) are no-ops, so a copy must be complete when the call returns.
sgl-kernel's all-layer ops take pointer tables (uint64 tensors of data_ptr()s); the HAL's take
the per-layer tensors, so each table is read back through the buffers registered with
`register_buffers` (the device pool's layers and the host pool's per-layer views).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import types

import torch

from hal.transfer import kvcacheio as hal_kvcacheio

SHIM_NAME = "sgl_kernel.kvcacheio"
# SGLang's modules that call kvcacheio ops on the HiCache path.
POOL_MODULES = ("sglang.srt.mem_cache.pool_host.mha", "sglang.srt.mem_cache.pool_host.mla",
                "sglang.srt.mem_cache.memory_pool_host")


class TransferTally:
    """What the shim moved: per op name, calls and modeled seconds (the profile's clock)."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.modeled_seconds = 0.0

    def add(self, op: str, event) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1
        if getattr(event, "modeled_time", None) is not None:
            self.modeled_seconds = max(self.modeled_seconds, event.modeled_time)


TALLY = TransferTally()
# Called as PRICER(name, op, args, kwargs) after every op when set (pricing.FullGeometryPricer).
PRICER = None
_BUFFERS: dict[int, torch.Tensor] = {}  # data_ptr() -> the per-layer tensor a pointer table names


def register_buffers(tensors) -> None:
    """Make `tensors` nameable by their data_ptr() in the pointer tables upstream passes."""
    for t in tensors:
        _BUFFERS[t.data_ptr()] = t


def clear_buffers() -> None:
    """Forget every registered buffer (a replay's pools are gone)."""
    _BUFFERS.clear()


def _tensors_of(arg):
    """A pointer table (uint64 tensor) as the registered tensors it names; anything else as is."""
    if not (isinstance(arg, torch.Tensor) and arg.dtype == torch.uint64):
        return arg
    try:
        return [_BUFFERS[p] for p in arg.tolist()]
    except KeyError as e:
        raise ValueError(f"pointer table names {e.args[0]:#x}, which no registered pool buffer starts at") from None


def _waiting(name: str, op):
    def run(*args, **kwargs):
        args = [_tensors_of(a) for a in args]
        kwargs = {k: _tensors_of(v) for k, v in kwargs.items()}
        event = op(*args, **kwargs)
        if event is not None:
            event.wait()
        TALLY.add(name, event)
        if PRICER is not None:
            PRICER(name, op, args, kwargs)

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"hal.transfer.kvcacheio.{name}, waited for."
    return run


def shim_module() -> types.ModuleType:
    """The `sgl_kernel.kvcacheio` module (made once): every public HAL kvcacheio op, waited for."""
    if SHIM_NAME in sys.modules and getattr(sys.modules[SHIM_NAME], "__hal__", False):
        return sys.modules[SHIM_NAME]
    mod = types.ModuleType(SHIM_NAME, "sgl_kernel.kvcacheio served by hal.transfer.kvcacheio")
    mod.__hal__ = True
    for name, op in vars(hal_kvcacheio).items():
        if name.startswith("transfer_") and callable(op):
            setattr(mod, name, _waiting(name, op))
    parent = sys.modules.get("sgl_kernel") or types.ModuleType("sgl_kernel", "HAL stand-in for sgl_kernel")
    parent.kvcacheio = mod
    sys.modules.setdefault("sgl_kernel", parent)
    sys.modules[SHIM_NAME] = mod
    return mod


def imported_names(module) -> list[str]:
    """The names `module`'s source imports from sgl_kernel.kvcacheio (every such statement)."""
    tree = ast.parse(inspect.getsource(module))
    return [a.asname or a.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == SHIM_NAME for a in node.names]


def install() -> list[str]:
    """Install the shim and bind it into SGLang's pool modules; returns the ops the HAL lacks
    (an upstream pool calling one would fail at the call, naming it)."""
    mod = shim_module()
    missing = []
    for modname in POOL_MODULES:
        pool_mod = importlib.import_module(modname)
        for name in imported_names(pool_mod):
            op = getattr(mod, name, None)
            if op is None:
                missing.append(name)
            elif not hasattr(pool_mod, name):
                setattr(pool_mod, name, op)
    return sorted(set(missing))

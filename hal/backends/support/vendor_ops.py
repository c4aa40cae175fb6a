"""The vendor's kvcacheio kernels behind the harness's calling convention (hal.transfer.kvcacheio).

The conformance suite runs its cases through sgl-kernel on CUDA and xspeedgate_ops on Kunlun with
this adapter, so the vendor's bytes are compared with the reference. It maps layer lists to pointer
tables, puts indices where each op reads them, and returns an event for the queued work. What it
takes on trust about xspeedgate_ops: docs/acceptance.md, "What the device code takes on trust".
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from hal.transfer import kvcacheio

# Harness arguments that upstream passes as a device tensor of per-layer data pointers.
POINTER_TABLES = {
    "transfer_kv_all_layer": ("src_k_layers", "dst_k_layers", "src_v_layers", "dst_v_layers"),
    "transfer_kv_all_layer_lf_pf": ("src_k_layers", "src_v_layers"),
    "transfer_kv_all_layer_lf_ph": ("src_k_layers", "src_v_layers"),
    "transfer_kv_all_layer_mla": ("src_layers", "dst_layers"),
    "transfer_kv_all_layer_mla_lf_pf": ("src_layers",),
}
DIRECT_OPS = ("transfer_kv_direct", "transfer_kv_per_layer_direct_pf_lf", "transfer_kv_all_layer_direct_lf_pf")
INDEX_ARGS = ("src_indices", "dst_indices")
TUNING_DEFAULTS = {"block_quota": 2, "num_warps_per_block": 32}


def pointer_table(tensors, device) -> torch.Tensor:
    """uint64 tensor of each tensor's data pointer, on `device` (what upstream's all-layer kernels read)."""
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.uint64, device=device)


class VendorParam(NamedTuple):
    """One argument a vendor op declares: its name and whether it may be left out."""

    name: str
    has_default: bool


def vendor_params(fn: Callable) -> list[VendorParam]:
    """The arguments `fn` declares, in its order: a torch op's schema, else the Python signature."""
    schema = op_schema(fn)
    if schema is not None:
        return [VendorParam(a.name, a.has_default_value()) for a in schema.arguments]
    return [VendorParam(n, p.default is not inspect.Parameter.empty)
            for n, p in inspect.signature(fn).parameters.items()]


def op_schema(fn: Callable):
    """The torch.FunctionSchema of a torch op (its default overload), None for a Python function."""
    return getattr(getattr(fn, "default", fn), "_schema", None)


class StreamHooks(NamedTuple):
    """How a backend runs vendor calls on one of its streams: where index and pointer tensors go
    (`device`), the context making the stream current, and the event recorded after the call,
    given the tensors the queued work still reads."""

    device: Any
    enter: Callable[[], contextlib.AbstractContextManager]
    record: Callable[[list], Any]


class VendorOps:
    """A vendor's kvcacheio callables (by upstream name), called the harness's way on a stream."""

    def __init__(self, source: str, ops: dict[str, Callable]):
        unknown = sorted(set(ops) - set(kvcacheio.OPS))
        if unknown:
            raise ValueError(f"ops: {', '.join(unknown)} are not kvcacheio ops")
        self.source = source  # e.g. "sgl_kernel.kvcacheio", "torch.ops.xspeedgate_ops"
        self.ops = dict(ops)

    def has(self, op: str) -> bool:
        return op in self.ops

    def schema(self, op: str) -> str:
        """The op's declaration as the vendor module states it (for `hicache backends --json`)."""
        fn = self.ops[op]
        schema = op_schema(fn)
        return str(schema) if schema is not None else f"{op}{inspect.signature(fn)}"

    def upstream_args(self, op: str, args: tuple, kwargs: dict, device) -> tuple[dict, list]:
        """(keyword arguments for the vendor op, tensors made for it that must outlive the call).

        Every argument goes by the name the vendor's own schema declares, as the public Kunlun
        caller passes them, so an installed build whose positional order differs still gets each
        value where it belongs. A declared name kvcacheio has no value for is refused, naming it.
        """
        if op not in self.ops:
            raise ValueError(f"op: {self.source} has no {op}")
        given = inspect.signature(getattr(kvcacheio, op)).bind(*args, **kwargs).arguments
        out, made = {}, []
        for name, has_default in vendor_params(self.ops[op]):
            if name not in given:
                if name in TUNING_DEFAULTS and not has_default:
                    out[name] = TUNING_DEFAULTS[name]  # the values the public caller passes
                elif not has_default:
                    raise ValueError(f"op: {self.source}.{op} takes {name!r}, which kvcacheio.{op} "
                                     "has no argument for")
                continue
            value = given[name]
            if name in POINTER_TABLES.get(op, ()):
                value = pointer_table(value, device)
                made.append(value)
            elif name in INDEX_ARGS:
                target = "cpu" if op in DIRECT_OPS else device
                moved = torch.as_tensor(value, dtype=torch.int64).to(target, non_blocking=True)
                if moved is not value:
                    made.append(moved)
                value = moved
            out[name] = value
        return out, made

    def call(self, hooks: StreamHooks, op: str, *args, **kwargs):
        """Queue the vendor's `op` on the hooked stream; return the event recorded after it."""
        with hooks.enter():
            upstream, made = self.upstream_args(op, args, kwargs, hooks.device)
            self.ops[op](**upstream)
            return hooks.record(made)

    def bind(self, hooks: StreamHooks) -> BoundVendorOps:
        return BoundVendorOps(self, hooks)


class MissingVendorOp(AttributeError):
    """The vendor module has no kernel for this kvcacheio op (its cases skip, saying which)."""


class BoundVendorOps:
    """The vendor ops as a module-like object: `bound.transfer_kv_per_layer(...)` like kvcacheio's."""

    def __init__(self, vendor: VendorOps, hooks: StreamHooks):
        self.vendor, self.hooks = vendor, hooks

    def __getattr__(self, op: str):
        if op not in kvcacheio.OPS:
            raise AttributeError(op)
        if not self.vendor.has(op):
            raise MissingVendorOp(f"{self.vendor.source} has no {op}")
        return lambda *args, **kwargs: self.vendor.call(self.hooks, op, *args, **kwargs)


class VendorSearch(NamedTuple):
    """Where a device's vendor kernels are: a Python module holding upstream-named functions, or
    a module whose import registers them in a torch.ops namespace."""

    module: str | None  # what to import; None: this device has no vendor kernels
    why_none: str = ""
    torch_namespace: str | None = None  # the ops live in torch.ops.<namespace> once imported

    def find(self) -> tuple[VendorOps | None, str]:
        """(VendorOps with every op found, "") or (None, why none is usable here)."""
        if self.module is None:
            return None, self.why_none
        try:
            mod = importlib.import_module(self.module)
        except Exception as e:  # noqa: BLE001 - a broken build is as absent as a missing one
            return None, f"{self.module} not importable: {type(e).__name__}: {e}"
        if self.torch_namespace is not None:
            space, source = getattr(torch.ops, self.torch_namespace), f"torch.ops.{self.torch_namespace}"
        else:
            space, source = mod, self.module
        ops = {}
        for name in kvcacheio.OPS:
            try:
                fn = getattr(space, name)
            except (AttributeError, RuntimeError):  # torch.ops raises for an op not registered
                continue
            if callable(fn):
                ops[name] = fn
        if not ops:
            return None, f"{source} has none of the kvcacheio ops ({', '.join(kvcacheio.OPS[:2])}, ...)"
        return VendorOps(source, ops), ""

"""A STAND-IN "vendor" for tests: hal.transfer.kvcacheio behind upstream sgl-kernel's calling convention.

It is not a vendor kernel. It takes arguments the way sgl-kernel's kvcacheio does (uint64 device
tensors of per-layer data pointers for the all-layer ops, returns None) and answers by resolving
the pointers back to the tensors the test registered and calling the harness's own op on emu. So
a test proves the adapter (hal.backends.support.vendor_ops) maps the harness's arguments onto
upstream's correctly, on a machine with no vendor kernel.
"""

from __future__ import annotations

import torch

from hal.backends.support.vendor_ops import DIRECT_OPS, POINTER_TABLES, StreamHooks, VendorOps
from hal.transfer import kvcacheio


class StandInVendor:
    def __init__(self, backend, stream):
        self.backend, self.stream = backend, stream
        self.by_pointer: dict[int, torch.Tensor] = {}
        self.calls: list[tuple[str, tuple]] = []  # what the "vendor" received, for argument checks

    def know(self, *tensors) -> None:
        """Whole buffers into which pointer tables may point."""
        for t in tensors:
            self.by_pointer[t.data_ptr()] = t

    def _at(self, address: int, item_size: int) -> torch.Tensor:
        """What a kernel sees at `address`: rows of item_size bytes up to the end of its buffer."""
        for start, base in self.by_pointer.items():
            if start <= address < start + base.numel() * base.element_size():
                tail = base.view(-1).view(torch.uint8)[address - start:].view(base.dtype)
                return tail.view(-1, item_size // base.element_size())
        raise AssertionError(f"pointer {address:#x} is in no buffer the test made")

    def _layers(self, table: torch.Tensor, item_size: int) -> list[torch.Tensor]:
        assert table.dtype == torch.uint64 and table.dim() == 1, f"pointer table {table.dtype} {tuple(table.shape)}"
        return [self._at(int(p), item_size) for p in table.tolist()]

    def op(self, name: str):
        def call(*args):
            self.calls.append((name, args))
            harness = list(args)
            params = kvcacheio_params(name)
            for pos, arg in enumerate(params[:len(args)]):
                if arg in POINTER_TABLES.get(name, ()):
                    harness[pos] = self._layers(harness[pos], args[params.index("item_size")])
                if arg in ("src_indices", "dst_indices"):
                    want = "cpu" if name in DIRECT_OPS else self.backend.device_type
                    assert harness[pos].device.type == want and harness[pos].dtype == torch.int64
            with kvcacheio.use(self.backend, self.stream):
                getattr(kvcacheio, name)(*harness)
            return None  # upstream returns nothing: the work is on the current stream
        return call

    def vendor_ops(self, names=kvcacheio.OPS) -> VendorOps:
        return VendorOps("stand-in (hal.transfer.kvcacheio)", {n: self.op(n) for n in names})

    def hooks(self) -> StreamHooks:
        import contextlib

        return StreamHooks("cpu", contextlib.nullcontext, lambda keep: self.stream.record())


def kvcacheio_params(name: str) -> list[str]:
    import inspect

    return list(inspect.signature(getattr(kvcacheio, name)).parameters)

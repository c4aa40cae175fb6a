"""The vendor-kernel adapter's argument mapping, checked against a STAND-IN vendor (the harness's own
kvcacheio behind upstream's calling convention, defined below) on emu: no vendor kernel here."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from conformance.suites import reference as ref
from conformance.suites import test_layout_equivalence as le
from hal.backend import get_backend
from hal.backends.cuda import CudaBackend
from hal.backends.support.vendor_ops import (
    DIRECT_OPS,
    POINTER_TABLES,
    TUNING_DEFAULTS,
    StreamHooks,
    VendorOps,
    VendorSearch,
    pointer_table,
)
from hal.backends.xpu import XpuBackend
from hal.transfer import kvcacheio

# -- the STAND-IN vendor: hal.transfer.kvcacheio behind upstream sgl-kernel's calling convention. It is
# not a vendor kernel: it takes uint64 pointer tables and returns None like sgl-kernel, resolves the
# pointers to the buffers the test made and runs the harness's own op on emu, so the adapter's
# argument mapping is checked on a machine without any vendor kernel.

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
        def call(**kwargs):
            self.calls.append((name, kwargs))
            harness = dict(kwargs)
            for arg in harness:
                if arg in POINTER_TABLES.get(name, ()):
                    harness[arg] = self._layers(harness[arg], kwargs["item_size"])
                if arg in ("src_indices", "dst_indices"):
                    want = "cpu" if name in DIRECT_OPS else self.backend.device_type
                    assert harness[arg].device.type == want and harness[arg].dtype == torch.int64
            with kvcacheio.use(self.backend, self.stream):
                getattr(kvcacheio, name)(**harness)
            return None  # upstream returns nothing: the work is on the current stream
        # Declares kvcacheio's (upstream's) argument names, as a vendor's Python wrapper would.
        call.__signature__ = inspect.signature(getattr(kvcacheio, name))
        return call

    def vendor_ops(self, names=kvcacheio.OPS) -> VendorOps:
        return VendorOps("stand-in (hal.transfer.kvcacheio)", {n: self.op(n) for n in names})

    def hooks(self) -> StreamHooks:
        import contextlib

        return StreamHooks("cpu", contextlib.nullcontext, lambda keep: self.stream.record())


class Memory:
    """kv_memory for emu, remembering every buffer so the stand-in can resolve pointers."""

    def __init__(self, backend, vendor):
        self.backend, self.vendor = backend, vendor

    def _know(self, t):
        self.vendor.know(t)
        return t

    def device(self, shape, dtype):
        return self._know(self.backend.alloc_device(tuple(shape), dtype))

    def host(self, shape, dtype):
        return self._know(torch.empty(tuple(shape), dtype=dtype))


@pytest.fixture
def standin():
    with get_backend("emu", "emu") as emu:
        stream = emu.new_stream()
        vendor = StandInVendor(emu, stream)
        yield vendor, vendor.vendor_ops().bind(vendor.hooks()), Memory(emu, vendor)


CASES = [le.Case(a, ps, torch.bfloat16, 128) for a in ("mha", "mla") for ps in (1, 16)]


@pytest.mark.parametrize("c", CASES, ids=lambda c: f"{c.attention}-ps{c.page_size}")
@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct", "page_head"])
def test_standin_vendor_round_trip_matches_reference(standin, layout, c):
    vendor, bound, mem = standin
    if layout not in ref.layouts_for(c.attention):
        pytest.skip(f"{layout} is not an {c.attention} layout")
    seed = le.seed_of("vendor", layout, c)
    dev, host = le.device_pool(mem, c, np.random.default_rng(seed)), le.host_pool(mem, c, layout, None)
    back = le.device_pool(mem, c, None)
    dev_idx, host_idx = le.index_pair(c, seed)
    before = le.host_logical(c, layout, host)
    le.backup(bound, c, layout, dev, host, dev_idx, host_idx).wait(le.WAIT_S)
    expected = ref.scatter(before, ref.device_to_logical(dev), dev_idx, host_idx, range(le.LAYERS))
    ref.assert_same_bits(le.host_logical(c, layout, host), expected, f"host {layout} after stand-in vendor backup")
    poisoned = ref.device_to_logical(back)
    le.wait_all([le.load_layer(bound, c, layout, host, back, host_idx, dev_idx, layer) for layer in range(le.LAYERS)])
    expected = ref.scatter(poisoned, ref.device_to_logical(dev), dev_idx, dev_idx, range(le.LAYERS))
    ref.assert_same_bits(ref.device_to_logical(back), expected, f"device after stand-in vendor load from {layout}")
    assert vendor.calls, "the stand-in vendor was never called"


def test_all_layer_ops_get_pointer_tables_in_upstream_order(standin):
    vendor, bound, mem = standin
    src = [mem.device((8, 1, 8), torch.bfloat16) for _ in range(3)]
    dst = [mem.device((8, 1, 8), torch.bfloat16) for _ in range(3)]
    idx = torch.arange(4)
    bound.transfer_kv_all_layer_mla(src, dst, idx, idx + 2, 16, 3).wait(le.WAIT_S)
    name, args = vendor.calls[-1]
    assert name == "transfer_kv_all_layer_mla" and len(args) == 6  # tuning arguments left to the vendor
    assert args["src_layers"].tolist() == [t.data_ptr() for t in src]
    assert args["dst_layers"].tolist() == [t.data_ptr() for t in dst]
    assert args["src_indices"].tolist() == [0, 1, 2, 3] and args["dst_indices"].tolist() == [2, 3, 4, 5]
    assert (args["item_size"], args["num_layers"]) == (16, 3)


def test_direct_ops_keep_lists_and_take_cpu_indices(standin):
    vendor, bound, mem = standin
    src = [mem.device((8, 1, 8), torch.bfloat16) for _ in range(2)]
    dst = [mem.device((8, 1, 8), torch.bfloat16) for _ in range(2)]
    bound.transfer_kv_direct(src, dst, [0, 1, 2, 3], [4, 5, 6, 7], 4).wait(le.WAIT_S)
    name, args = vendor.calls[-1]
    assert name == "transfer_kv_direct" and args["src_layers"] is src and args["dst_layers"] is dst
    assert args["src_indices"].device.type == "cpu" and args["src_indices"].dtype == torch.int64
    assert args["page_size"] == 4


def test_tuning_arguments_pass_through_when_given(standin):
    vendor, bound, mem = standin
    src, dst = mem.device((8, 1, 8), torch.bfloat16), mem.device((8, 1, 8), torch.bfloat16)
    bound.transfer_kv_per_layer_mla(src, dst, [0], [1], 16, block_quota=4, num_warps_per_block=8).wait(le.WAIT_S)
    got = vendor.calls[-1][1]
    assert (got["block_quota"], got["num_warps_per_block"]) == (4, 8)


class _SchemaOp:
    """Looks like a torch op whose schema declares `names` (none with a default)."""

    def __init__(self, *names):
        arg = type("Arg", (), {"has_default_value": lambda self: False})
        args = [type("A", (arg,), {"name": n})() for n in names]
        self.default = type("Overload", (), {"_schema": type("S", (), {"arguments": args})()})()
        self.got = None

    def __call__(self, **kwargs):
        self.got = kwargs


MLA_PER_LAYER = ("src", "dst", "src_indices", "dst_indices", "item_size")
MLA_ARGS = (torch.zeros(2), torch.zeros(2), [0], [1], 16)


def test_schema_ops_without_defaults_get_upstreams_tuning_values():
    vendor = VendorOps("schema", {"transfer_kv_per_layer_mla": _SchemaOp(*MLA_PER_LAYER, *TUNING_DEFAULTS)})
    args, _ = vendor.upstream_args("transfer_kv_per_layer_mla", MLA_ARGS, {}, "cpu")
    assert args["item_size"] == 16 and {k: args[k] for k in TUNING_DEFAULTS} == TUNING_DEFAULTS
    vendor = VendorOps("schema", {"transfer_kv_per_layer_mla": _SchemaOp(*MLA_PER_LAYER)})
    args, _ = vendor.upstream_args("transfer_kv_per_layer_mla", MLA_ARGS, {}, "cpu")
    assert sorted(args) == sorted(MLA_PER_LAYER)


def test_arguments_go_by_the_schemas_names_in_any_order():
    op = _SchemaOp("item_size", "dst_indices", "dst", "src_indices", "src")
    vendor = VendorOps("permuted", {"transfer_kv_per_layer_mla": op})
    args, _ = vendor.upstream_args("transfer_kv_per_layer_mla", MLA_ARGS, {}, "cpu")
    assert args["src"] is MLA_ARGS[0] and args["dst"] is MLA_ARGS[1] and args["item_size"] == 16
    assert args["src_indices"].tolist() == [0] and args["dst_indices"].tolist() == [1]


def test_a_schema_name_kvcacheio_lacks_is_refused_naming_it():
    vendor = VendorOps("odd", {"transfer_kv_per_layer_mla": _SchemaOp(*MLA_PER_LAYER, "stream_id")})
    with pytest.raises(ValueError, match="odd.transfer_kv_per_layer_mla takes 'stream_id'"):
        vendor.upstream_args("transfer_kv_per_layer_mla", MLA_ARGS, {}, "cpu")


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="ops: not_an_op"):
        VendorOps("x", {"not_an_op": print})
    vendor = VendorOps("x", {"transfer_kv_direct": print})
    with pytest.raises(ValueError, match="op: x has no transfer_kv_per_layer"):
        vendor.upstream_args("transfer_kv_per_layer", (), {}, "cpu")
    with pytest.raises(AttributeError, match="x has no transfer_kv_per_layer"):
        vendor.bind(None).transfer_kv_per_layer  # noqa: B018


def test_pointer_table_is_uint64_data_pointers():
    ts = [torch.zeros(4), torch.zeros(2)]
    t = pointer_table(ts, "cpu")
    assert t.dtype == torch.uint64 and t.tolist() == [x.data_ptr() for x in ts]


def test_search_reports_why_nothing_is_found():
    assert VendorSearch(None, "none here").find() == (None, "none here")
    vendor, why = VendorSearch("hicache_no_such_vendor_module").find()
    assert vendor is None and why.startswith("hicache_no_such_vendor_module not importable: ModuleNotFoundError")
    # a module that imports but holds no kvcacheio op
    vendor, why = VendorSearch("json").find()
    assert vendor is None and why.startswith("json has none of the kvcacheio ops")
    # the harness's own module holds every op: found as a full set
    vendor, why = VendorSearch("hal.transfer.kvcacheio").find()
    assert why == "" and sorted(vendor.ops) == sorted(kvcacheio.OPS)


@pytest.mark.parametrize("cls, module", [(CudaBackend, "sgl_kernel"), (XpuBackend, "xspeedgate_ops")])
def test_device_backends_say_why_their_vendor_kernels_are_absent(cls, module):
    vendor, why = cls.vendor_ops()
    if vendor is not None:
        pytest.skip(f"{vendor.source} is importable here")
    assert why.startswith(module) and "not importable" in why


def test_xpu_vendor_module_can_be_named(monkeypatch):
    monkeypatch.setenv("HICACHE_XPU_VENDOR_MODULE", "kunlun_ops_build")
    assert XpuBackend.vendor_search().module == "kunlun_ops_build"
    assert XpuBackend.vendor_search().torch_namespace == "xspeedgate_ops"

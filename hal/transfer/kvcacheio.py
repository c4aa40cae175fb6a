"""SGLang sgl-kernel's kvcacheio op set, on any backend: validate -> plan -> backend.execute.

Names, argument order and semantics are upstream's (sgl-kernel's kvcacheio ops).
Per layer, dst[dst_indices] = src[src_indices], one item at a time.
Unlike upstream, every op validates first and returns its plan's completion Event.
The op semantics and every difference: docs/architecture.md, "Design notes".
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from hal.common.arg_checks import is_int, positive_int
from hal.transfer.geometry import KVGeometry
from hal.transfer.kvcheck import Checked, geometry, indices, min_slots, page_tokens, slots_of
from hal.transfer.plan import LAYER_BUFFERS, Side, TransferPlan, plan_copy

_state = threading.local()
_default_lock = threading.Lock()
_default_backend = None
_default_factory = None  # makes the default on first use; hal.backend sets it (emu)


def set_default_factory(factory) -> None:
    """`factory() -> backend` makes the process-wide default when none was set (hal.backend
    names emu, so this module needs no backend registry)."""
    global _default_factory
    _default_factory = factory


def set_backend(backend) -> None:
    """Make `backend` the process-wide default (threads may override with `use`)."""
    global _default_backend
    with _default_lock:
        _default_backend = backend


def active_backend():
    b = getattr(_state, "backend", None)
    if b is not None:
        return b
    global _default_backend
    with _default_lock:
        if _default_backend is None:
            if _default_factory is None:
                raise RuntimeError("hal.transfer.kvcacheio: no backend: call set_backend(b) or run in use(b)")
            _default_backend = _default_factory()
        return _default_backend


def current_stream():
    return getattr(_state, "stream", None)


@contextmanager
def use(backend=None, stream=None):
    """Run ops in this thread on `backend` / `stream` (like torch.cuda.stream)."""
    prev = (getattr(_state, "backend", None), getattr(_state, "stream", None))
    _state.backend = backend if backend is not None else prev[0]
    _state.stream = stream
    try:
        yield
    finally:
        _state.backend, _state.stream = prev


def _submit(plan: TransferPlan, checked: Checked):
    backend = active_backend()
    checked.check_devices(backend)
    return backend.execute(plan, current_stream())


def _run(op, geom, src: Side, dst: Side, src_tok, dst_tok, layers, checked):
    return _submit(plan_copy(op, geom, src, dst, src_tok, dst_tok, layers), checked)


# -- layer-first <-> layer-first ---------------------------------------------------------

def transfer_kv_per_layer(src_k, dst_k, src_v, dst_v, src_indices, dst_indices, item_size,
                          block_quota=2, num_warps_per_block=32):
    c = Checked(src_k=src_k, dst_k=dst_k, src_v=src_v, dst_v=dst_v)
    geom = geometry("mha", 1, item_size, src_k)
    sizes = [slots_of(n, t, item_size) for n, t in c.items()]
    si, di = indices(src_indices, dst_indices, min(sizes[0], sizes[2]), min(sizes[1], sizes[3]))
    src = Side(LAYER_BUFFERS, [{0: src_k}, {0: src_v}], 0)
    dst = Side(LAYER_BUFFERS, [{0: dst_k}, {0: dst_v}], 0)
    return _run("transfer_kv_per_layer", geom, src, dst, si, di, [0], c)


def transfer_kv_per_layer_mla(src, dst, src_indices, dst_indices, item_size, block_quota=2, num_warps_per_block=32):
    c = Checked(src=src, dst=dst)
    geom = geometry("mla", 1, item_size, src)
    si, di = indices(src_indices, dst_indices, slots_of("src", src, item_size), slots_of("dst", dst, item_size))
    return _run("transfer_kv_per_layer_mla", geom, Side(LAYER_BUFFERS, [{0: src}], 0),
                Side(LAYER_BUFFERS, [{0: dst}], 0), si, di, [0], c)


def transfer_kv_all_layer(src_k_layers, dst_k_layers, src_v_layers, dst_v_layers, src_indices, dst_indices,
                          item_size, num_layers, block_quota=2, num_warps_per_block=32):
    lists = dict(src_k_layers=src_k_layers, dst_k_layers=dst_k_layers,
                 src_v_layers=src_v_layers, dst_v_layers=dst_v_layers)
    c = Checked.layer_lists(num_layers, **lists)
    geom = geometry("mha", num_layers, item_size, src_k_layers[0])
    ss = min(min_slots(n, ts, item_size) for n, ts in lists.items() if n.startswith("src"))
    ds = min(min_slots(n, ts, item_size) for n, ts in lists.items() if n.startswith("dst"))
    si, di = indices(src_indices, dst_indices, ss, ds)
    layers = range(num_layers)
    src = Side(LAYER_BUFFERS, [dict(enumerate(src_k_layers)), dict(enumerate(src_v_layers))], 0)
    dst = Side(LAYER_BUFFERS, [dict(enumerate(dst_k_layers)), dict(enumerate(dst_v_layers))], 0)
    return _run("transfer_kv_all_layer", geom, src, dst, si, di, layers, c)


def transfer_kv_all_layer_mla(src_layers, dst_layers, src_indices, dst_indices, item_size, num_layers,
                              block_quota=2, num_warps_per_block=32):
    c = Checked.layer_lists(num_layers, src_layers=src_layers, dst_layers=dst_layers)
    geom = geometry("mla", num_layers, item_size, src_layers[0])
    ss, ds = min_slots("src_layers", src_layers, item_size), min_slots("dst_layers", dst_layers, item_size)
    si, di = indices(src_indices, dst_indices, ss, ds)
    return _run("transfer_kv_all_layer_mla", geom, Side(LAYER_BUFFERS, [dict(enumerate(src_layers))], 0),
                Side(LAYER_BUFFERS, [dict(enumerate(dst_layers))], 0), si, di, range(num_layers), c)


# -- page-first host <-> layer-first device ---------------------------------------------

def _host_geom(attention, layout_dim_name, layout_dim, item_size, ref, page_size=1, head_num=1):
    item_size = positive_int("item_size", item_size)
    if not is_int(layout_dim) or layout_dim <= 0 or layout_dim % item_size:
        raise ValueError(f"{layout_dim_name}: {layout_dim!r} is not a positive multiple of item_size {item_size}")
    layout_dim = int(layout_dim)
    return geometry(attention, layout_dim // item_size, item_size, ref, page_size=page_size, head_num=head_num)


def _item(item_size) -> int:
    return positive_int("item_size", item_size)


def _page_head_host(page_size, head_num, **host) -> None:
    """page_head parts are (pages, heads, page_size, layers, head_dim): the shape must agree."""
    for name, t in host.items():
        if t.dim() != 5:
            raise ValueError(f"{name}: expected a page_head part (pages, heads, page_size, layers, head_dim), "
                             f"got shape {tuple(t.shape)}")
        if t.shape[2] != page_size:
            raise ValueError(f"page_size: {page_size!r} does not match {name}'s page dimension {t.shape[2]}")
        if t.shape[1] != head_num:
            raise ValueError(f"head_num: {head_num!r} does not match {name}'s head dimension {t.shape[1]}")


def _layer(layer_id, geom: KVGeometry) -> int:
    """`layer_id` as a plain int: numpy ints are layers, bools are not (True is no layer 1)."""
    if not is_int(layer_id):
        raise ValueError(f"layer_id: {layer_id!r} is not a layer index (an integer, not a bool)")
    if not 0 <= layer_id < geom.layers:
        raise ValueError(f"layer_id: {layer_id!r} is outside [0, {geom.layers})")
    return int(layer_id)


def transfer_kv_per_layer_pf_lf(src_k, dst_k, src_v, dst_v, src_indices, dst_indices, layer_id, item_size,
                                src_layout_dim, block_quota=2, num_warps_per_block=32):
    c = Checked(src_k=src_k, dst_k=dst_k, src_v=src_v, dst_v=dst_v)
    ds = min_slots(("dst_k", "dst_v"), (dst_k, dst_v), _item(item_size))
    geom = _host_geom("mha", "src_layout_dim", src_layout_dim, item_size, src_k)
    layer_id = _layer(layer_id, geom)
    layers = [layer_id]
    hs = min_slots(("src_k", "src_v"), (src_k, src_v), src_layout_dim)
    si, di = indices(src_indices, dst_indices, hs, ds)
    src = Side("page_first", [src_k, src_v], hs)
    dst = Side(LAYER_BUFFERS, [{layer_id: dst_k}, {layer_id: dst_v}], 0)
    return _run("transfer_kv_per_layer_pf_lf", geom, src, dst, si, di, layers, c)


def transfer_kv_per_layer_mla_pf_lf(src, dst, src_indices, dst_indices, layer_id, item_size, src_layout_dim,
                                    block_quota=2, num_warps_per_block=32):
    c = Checked(src=src, dst=dst)
    ds = slots_of("dst", dst, _item(item_size))
    geom = _host_geom("mla", "src_layout_dim", src_layout_dim, item_size, src)
    layer_id = _layer(layer_id, geom)
    layers = [layer_id]
    hs = slots_of("src", src, src_layout_dim)
    si, di = indices(src_indices, dst_indices, hs, ds)
    return _run("transfer_kv_per_layer_mla_pf_lf", geom, Side("page_first", [src], hs),
                Side(LAYER_BUFFERS, [{layer_id: dst}], 0), si, di, layers, c)


def transfer_kv_all_layer_lf_pf(src_k_layers, dst_k, src_v_layers, dst_v, src_indices, dst_indices, item_size,
                                dst_layout_dim, num_layers, block_quota=2, num_warps_per_block=32):
    c = Checked.layer_lists(num_layers, src_k_layers=src_k_layers, src_v_layers=src_v_layers)
    c.add(dst_k=dst_k, dst_v=dst_v)
    geom = _host_geom("mha", "dst_layout_dim", dst_layout_dim, item_size, src_k_layers[0])
    _layers_match(num_layers, geom)
    ss = min(min_slots("src_k_layers", src_k_layers, item_size), min_slots("src_v_layers", src_v_layers, item_size))
    hs = min_slots(("dst_k", "dst_v"), (dst_k, dst_v), dst_layout_dim)
    si, di = indices(src_indices, dst_indices, ss, hs)
    src = Side(LAYER_BUFFERS, [dict(enumerate(src_k_layers)), dict(enumerate(src_v_layers))], 0)
    return _run("transfer_kv_all_layer_lf_pf", geom, src, Side("page_first", [dst_k, dst_v], hs), si, di,
                range(num_layers), c)


def transfer_kv_all_layer_mla_lf_pf(src_layers, dst, src_indices, dst_indices, item_size, dst_layout_dim,
                                    num_layers, block_quota=2, num_warps_per_block=32):
    c = Checked.layer_lists(num_layers, src_layers=src_layers)
    c.add(dst=dst)
    geom = _host_geom("mla", "dst_layout_dim", dst_layout_dim, item_size, src_layers[0])
    _layers_match(num_layers, geom)
    ss = min_slots("src_layers", src_layers, item_size)
    hs = slots_of("dst", dst, dst_layout_dim)
    si, di = indices(src_indices, dst_indices, ss, hs)
    return _run("transfer_kv_all_layer_mla_lf_pf", geom, Side(LAYER_BUFFERS, [dict(enumerate(src_layers))], 0),
                Side("page_first", [dst], hs), si, di, range(num_layers), c)


def _layers_match(num_layers: int, geom: KVGeometry) -> None:
    if num_layers != geom.layers:
        raise ValueError(f"num_layers: {num_layers} does not match layout_dim / item_size = {geom.layers}")


# -- page-head host <-> layer-first device ----------------------------------------------

def transfer_kv_per_layer_ph_lf(src_k, dst_k, src_v, dst_v, src_indices, dst_indices, layer_id, item_size,
                                src_layout_dim, page_size, head_num, block_quota=2, num_warps_per_block=32):
    c = Checked(src_k=src_k, dst_k=dst_k, src_v=src_v, dst_v=dst_v)
    ds = min_slots(("dst_k", "dst_v"), (dst_k, dst_v), _item(item_size))
    _page_head_host(page_size, head_num, src_k=src_k, src_v=src_v)
    geom = _host_geom("mha", "src_layout_dim", src_layout_dim, item_size, src_k, page_size, head_num)
    layer_id = _layer(layer_id, geom)
    layers = [layer_id]
    hs = min_slots(("src_k", "src_v"), (src_k, src_v), src_layout_dim, page_size)
    si, di = indices(src_indices, dst_indices, hs, ds, page_size=page_size)
    dst = Side(LAYER_BUFFERS, [{layer_id: dst_k}, {layer_id: dst_v}], 0)
    return _run("transfer_kv_per_layer_ph_lf", geom, Side("page_head", [src_k, src_v], hs), dst, si, di, layers, c)


def transfer_kv_all_layer_lf_ph(src_k_layers, dst_k, src_v_layers, dst_v, src_indices, dst_indices, item_size,
                                dst_layout_dim, num_layers, page_size, head_num, block_quota=2,
                                num_warps_per_block=32):
    c = Checked.layer_lists(num_layers, src_k_layers=src_k_layers, src_v_layers=src_v_layers)
    c.add(dst_k=dst_k, dst_v=dst_v)
    _page_head_host(page_size, head_num, dst_k=dst_k, dst_v=dst_v)
    geom = _host_geom("mha", "dst_layout_dim", dst_layout_dim, item_size, src_k_layers[0], page_size, head_num)
    _layers_match(num_layers, geom)
    ss = min(min_slots("src_k_layers", src_k_layers, item_size), min_slots("src_v_layers", src_v_layers, item_size))
    hs = min_slots(("dst_k", "dst_v"), (dst_k, dst_v), dst_layout_dim, page_size)
    si, di = indices(src_indices, dst_indices, ss, hs, page_size=page_size)
    src = Side(LAYER_BUFFERS, [dict(enumerate(src_k_layers)), dict(enumerate(src_v_layers))], 0)
    return _run("transfer_kv_all_layer_lf_ph", geom, src, Side("page_head", [dst_k, dst_v], hs), si, di,
                range(num_layers), c)


# -- direct (page-granular) ops ---------------------------------------------------------

def transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size):
    """Per layer j: dst_layers[j][dst_indices] = src_layers[j][src_indices] (rows along dim 0)."""
    c = Checked.layer_lists(None, src_layers=src_layers, dst_layers=dst_layers)
    if len(src_layers) != len(dst_layers):
        raise ValueError(f"dst_layers: {len(dst_layers)} tensors, src_layers has {len(src_layers)}")
    row = c.row_bytes("src_layers", [*src_layers, *dst_layers])
    geom = geometry("mla", len(src_layers), row, src_layers[0], page_size=_page_size(page_size))
    ss, ds = min_slots("src_layers", src_layers, row), min_slots("dst_layers", dst_layers, row)
    si, di = indices(src_indices, dst_indices, ss, ds, page_size=page_size)
    return _run("transfer_kv_direct", geom, Side(LAYER_BUFFERS, [dict(enumerate(src_layers))], 0),
                Side(LAYER_BUFFERS, [dict(enumerate(dst_layers))], 0), si, di, range(len(src_layers)), c)


def _page_size(page_size) -> int:
    return positive_int("page_size", page_size)


def _direct_host(name: str, host: list, device_rows: int, page_size: int, ref) -> tuple[KVGeometry, int]:
    """Geometry of a page_first_direct host pool: parts of shape (pages, L, page_size, ...)."""
    if not isinstance(host, (list, tuple)) or len(host) not in (1, 2):
        raise ValueError(f"{name}: expected [kv] (MLA) or [k, v] (MHA) host tensors, got {type(host).__name__}")
    for i, t in enumerate(host):
        if t.dim() < 4 or t.shape[2] != page_size or t.shape[0] < 1:
            raise ValueError(f"{name}[{i}]: expected shape (pages >= 1, layers, page_size={page_size}, ...), "
                             f"got {tuple(t.shape)}")
        if t.shape != host[0].shape:
            raise ValueError(f"{name}[{i}]: shape {tuple(t.shape)} differs from {name}[0] {tuple(host[0].shape)}")
    item = host[0][0, 0, 0].numel() * host[0].element_size()
    if item != device_rows:
        raise ValueError(f"{name}: host item is {item} bytes per token, device rows are {device_rows}")
    geom = geometry("mla" if len(host) == 1 else "mha", host[0].shape[1], item, ref, page_size=page_size)
    return geom, host[0].shape[0] * page_size


def transfer_kv_per_layer_direct_pf_lf(src_ptrs, dst_ptrs, src_indices, dst_indices, layer_id, page_size):
    c = Checked.layer_lists(None, src_ptrs=src_ptrs, dst_ptrs=dst_ptrs)
    ps = _page_size(page_size)
    row = c.row_bytes("dst_ptrs", dst_ptrs)
    geom, hs = _direct_host("src_ptrs", src_ptrs, row, ps, dst_ptrs[0])
    if len(dst_ptrs) != len(src_ptrs):
        raise ValueError(f"dst_ptrs: expected {len(src_ptrs)} per-layer device tensors (one per part), got {len(dst_ptrs)}")
    layer_id = _layer(layer_id, geom)
    layers = [layer_id]
    ds = min_slots("dst_ptrs", dst_ptrs, row)
    si, di = page_tokens(src_indices, dst_indices, ps, hs, ds, host_side="src")
    dst = Side(LAYER_BUFFERS, [{layer_id: t} for t in dst_ptrs], 0)
    return _run("transfer_kv_per_layer_direct_pf_lf", geom, Side("page_first_direct", list(src_ptrs), hs), dst,
                si, di, layers, c)


def transfer_kv_all_layer_direct_lf_pf(src_ptrs, dst_ptrs, src_indices, dst_indices, page_size):
    c = Checked.layer_lists(None, src_ptrs=src_ptrs, dst_ptrs=dst_ptrs)
    ps = _page_size(page_size)
    row = c.row_bytes("src_ptrs", src_ptrs)
    geom, hs = _direct_host("dst_ptrs", dst_ptrs, row, ps, src_ptrs[0])
    if len(src_ptrs) != geom.parts * geom.layers:
        raise ValueError(f"src_ptrs: expected {geom.parts * geom.layers} per-layer device tensors "
                         f"({geom.parts} part(s) x {geom.layers} layers), got {len(src_ptrs)}")
    L = geom.layers
    ss = min_slots("src_ptrs", src_ptrs, row)
    si, di = page_tokens(src_indices, dst_indices, ps, ss, hs, host_side="dst")
    src = Side(LAYER_BUFFERS, [dict(enumerate(src_ptrs[p * L:(p + 1) * L])) for p in range(geom.parts)], 0)
    return _run("transfer_kv_all_layer_direct_lf_pf", geom, src, Side("page_first_direct", list(dst_ptrs), hs),
                si, di, range(L), c)


OPS = (
    "transfer_kv_per_layer", "transfer_kv_per_layer_pf_lf", "transfer_kv_per_layer_ph_lf",
    "transfer_kv_all_layer", "transfer_kv_all_layer_lf_pf", "transfer_kv_all_layer_lf_ph",
    "transfer_kv_per_layer_mla", "transfer_kv_per_layer_mla_pf_lf", "transfer_kv_all_layer_mla",
    "transfer_kv_all_layer_mla_lf_pf", "transfer_kv_direct", "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_all_layer_direct_lf_pf",
)

__all__ = [*OPS, "set_backend", "active_backend", "current_stream", "use"]

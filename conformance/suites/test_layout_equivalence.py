"""Layout equivalence: every kvcacheio op, on the backend under test, equals the reference scatter bit for bit."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from conformance.suites import transfer_reference as ref

# Small geometry so the 8192-token cases stay cheap; item_size is 16 B (bf16/fp16) or 32 B
# (fp32), a multiple of 8 as upstream requires, and page_head splits it over 2 heads.
LAYERS = 3
MHA_HEADS, MHA_HEAD_DIM = 2, 4
MLA_KV_DIM = 8
PAGE_SIZES = (1, 16, 64, 128)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOKEN_COUNTS = (128, 1024, 8192)
# Per-layer ops load these layers only: layer 1 must come out as poisoned as it went in.
LOADED_LAYERS = (0, 2)
WAIT_S = 120


@dataclass(frozen=True)
class Case:
    """One geometry and transfer: attention kind, page size, dtype, tokens moved. With
    row_tokens > 1 each row (item) holds that many tokens: a whole page moved as one item."""

    attention: str
    page_size: int
    dtype: torch.dtype
    tokens: int
    row_tokens: int = 1

    @property
    def heads(self) -> int:
        return MHA_HEADS if self.attention == "mha" else 1

    @property
    def dim(self) -> int:
        return (MHA_HEAD_DIM if self.attention == "mha" else MLA_KV_DIM) * self.row_tokens

    @property
    def parts(self) -> int:
        return ref.parts_for(self.attention)

    @property
    def item_size(self) -> int:
        return self.heads * self.dim * torch.empty(0, dtype=self.dtype).element_size()

    @property
    def layout_dim(self) -> int:
        return LAYERS * self.item_size

    @property
    def pages(self) -> int:
        return self.tokens // self.page_size

    # Pools a little larger than the transfer, and of different sizes on the two sides, so
    # the pages are a real scattered subset and a size mix-up between sides shows.
    @property
    def device_size(self) -> int:
        return (self.pages + self.pages // 2 + 1) * self.page_size

    @property
    def host_size(self) -> int:
        return (self.pages + self.pages // 3 + 2) * self.page_size


def transfer_sizes(page_size: int) -> list[tuple[str, int]]:
    """One page, then 128, 1024 and 8192 tokens; with 128-token pages "one page" is the 128 case.

    No count is below one page, so the page ops never see a partial page here (a partial
    page is bad input, covered by test_bad_input).
    """
    sizes = {page_size: "1page"}
    for n in TOKEN_COUNTS:
        sizes.setdefault(n, str(n))
    return [(name, n) for n, name in sizes.items()]


def cases(attention: str) -> list:
    return [
        pytest.param(Case(attention, ps, dtype, n), id=f"{attention}-ps{ps}-{dname}-{name}")
        for ps in PAGE_SIZES for dname, dtype in DTYPES.items() for name, n in transfer_sizes(ps)
    ]


ALL_CASES = cases("mha") + cases("mla")


def seed_of(*parts) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def scattered_slots(rng: np.random.Generator, pool_pages: int, c: Case) -> torch.Tensor:
    """Token slots of c.pages random pages out of pool_pages, page_size consecutive slots each.

    The first half of the pages is in ascending order, so runs of adjacent pages occur and
    the planner's run merging is exercised too; the second half is in random order.
    """
    pages = rng.choice(pool_pages, size=c.pages, replace=False)
    pages[: c.pages // 2].sort()
    slots = (pages[:, None] * c.page_size + np.arange(c.page_size)).reshape(-1)
    return torch.from_numpy(slots.astype(np.int64))


def index_pair(c: Case, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(device slots, host slots) for one transfer."""
    rng = np.random.default_rng(seed)
    dev = scattered_slots(rng, c.device_size // c.page_size, c)
    host = scattered_slots(rng, c.host_size // c.page_size, c)
    return dev, host


def device_pool(kv_memory, c: Case, gen: np.random.Generator | None) -> list[list[torch.Tensor]]:
    """pool[part][layer], each (device_size, heads, dim); random bits, or poison when gen is None."""
    pool = [[kv_memory.device((c.device_size, c.heads, c.dim), c.dtype) for _ in range(LAYERS)]
            for _ in range(c.parts)]
    for t in (t for layers in pool for t in layers):
        ref.fill_random(t, gen) if gen is not None else ref.poison(t)
    return pool


def host_pool(kv_memory, c: Case, layout: str, gen: np.random.Generator | None) -> torch.Tensor:
    t = kv_memory.host(ref.host_shape(layout, c.attention, LAYERS, c.host_size, c.heads, c.dim, c.page_size),
                       c.dtype)
    return ref.fill_random(t, gen) if gen is not None else ref.poison(t)


def host_logical(c: Case, layout: str, host: torch.Tensor) -> torch.Tensor:
    return ref.host_to_logical(layout, c.attention, host, c.page_size)


def wait_all(events) -> None:
    for ev in events:
        ev.wait(WAIT_S)


# -- how SGLang's HiCache calls the ops: all-layer backup (D2H), per-layer load (H2D) -------
# Through the layout object (hal.transfer.layouts): each layout calls its own op pair on `kv`
# (kvcacheio bound to the backend, or a vendor's kernels behind the same names).

def _geometry(c: Case):
    from hal.transfer.layouts import KVGeometry

    return KVGeometry(c.attention, LAYERS, c.heads, c.dim, c.dtype, c.page_size)


def _host_parts(c: Case, host: torch.Tensor) -> list[torch.Tensor]:
    return [host] if c.attention == "mla" else [host[0], host[1]]


def backup(kv, c: Case, layout: str, dev, host, dev_idx, host_idx):
    """Device pool -> host pool in `layout`, every layer in one call."""
    from hal.transfer.layouts import get_layout

    return get_layout(layout).backup(_geometry(c), _host_parts(c, host), dev, host_idx, dev_idx, kv=kv)


def load_layer(kv, c: Case, layout: str, host, dev, host_idx, dev_idx, layer: int):
    """Host pool in `layout` -> one device layer."""
    from hal.transfer.layouts import get_layout

    return get_layout(layout).load_layer(_geometry(c), _host_parts(c, host), dev, host_idx, dev_idx, layer, kv=kv)


def device_copy(kv, c: Case, kind: str, src, dst, src_idx, dst_idx) -> list:
    """Device pool -> device pool with the layer-first ops: per layer, all layers, or direct (pages)."""
    item, mha = c.item_size, c.attention == "mha"
    if kind == "per_layer":
        if mha:
            return [kv.transfer_kv_per_layer(src[0][layer], dst[0][layer], src[1][layer], dst[1][layer], src_idx, dst_idx,
                                             item) for layer in LOADED_LAYERS]
        return [kv.transfer_kv_per_layer_mla(src[0][layer], dst[0][layer], src_idx, dst_idx, item)
                for layer in LOADED_LAYERS]
    if kind == "all_layer":
        if mha:
            return [kv.transfer_kv_all_layer(src[0], dst[0], src[1], dst[1], src_idx, dst_idx, item, LAYERS)]
        return [kv.transfer_kv_all_layer_mla(src[0], dst[0], src_idx, dst_idx, item, LAYERS)]
    flat_src, flat_dst = [t for p in src for t in p], [t for p in dst for t in p]
    return [kv.transfer_kv_direct(flat_src, flat_dst, src_idx, dst_idx, c.page_size)]


def _layouts_cases():
    return [pytest.param(layout, p.values[0], id=f"{layout}-{p.id}")
            for p in ALL_CASES for layout in ref.layouts_for(p.values[0].attention)]


LAYOUT_CASES = _layouts_cases()


# -- the checks ---------------------------------------------------------------------------

@pytest.mark.parametrize("layout, c", LAYOUT_CASES)
def test_all_layer_backup_matches_reference(kv, kv_memory, layout, c):
    seed = seed_of("backup", layout, c)
    gen = np.random.default_rng(seed)
    dev, host = device_pool(kv_memory, c, gen), host_pool(kv_memory, c, layout, None)
    dev_idx, host_idx = index_pair(c, seed)
    before = host_logical(c, layout, host)
    backup(kv, c, layout, dev, host, dev_idx, host_idx).wait(WAIT_S)
    expected = ref.scatter(before, ref.device_to_logical(dev), dev_idx, host_idx, range(LAYERS))
    ref.assert_same_bits(host_logical(c, layout, host), expected, f"host {layout} after all-layer backup")


@pytest.mark.parametrize("layout, c", LAYOUT_CASES)
def test_per_layer_load_matches_reference(kv, kv_memory, layout, c):
    seed = seed_of("load", layout, c)
    gen = np.random.default_rng(seed)
    host, dev = host_pool(kv_memory, c, layout, gen), device_pool(kv_memory, c, None)
    dev_idx, host_idx = index_pair(c, seed)
    before = ref.device_to_logical(dev)
    # Read before the load: a load that wrote the host instead would otherwise compare with itself.
    source = host_logical(c, layout, host).clone()
    wait_all([load_layer(kv, c, layout, host, dev, host_idx, dev_idx, layer) for layer in LOADED_LAYERS])
    expected = ref.scatter(before, source, host_idx, dev_idx, LOADED_LAYERS)
    ref.assert_same_bits(ref.device_to_logical(dev), expected, f"device after per-layer load from {layout}")
    ref.assert_same_bits(host_logical(c, layout, host), source, f"host {layout} (the source) after a per-layer load")


@pytest.mark.parametrize("kind", ["per_layer", "all_layer", "direct"])
@pytest.mark.parametrize("c", ALL_CASES)
def test_device_to_device_matches_reference(kv, kv_memory, kind, c):
    seed = seed_of("d2d", kind, c)
    gen = np.random.default_rng(seed)
    src, dst = device_pool(kv_memory, c, gen), device_pool(kv_memory, c, None)
    rng = np.random.default_rng(seed)
    pool_pages = c.device_size // c.page_size
    src_idx, dst_idx = scattered_slots(rng, pool_pages, c), scattered_slots(rng, pool_pages, c)
    before = ref.device_to_logical(dst)
    wait_all(device_copy(kv, c, kind, src, dst, src_idx, dst_idx))
    layers = LOADED_LAYERS if kind == "per_layer" else range(LAYERS)
    expected = ref.scatter(before, ref.device_to_logical(src), src_idx, dst_idx, layers)
    ref.assert_same_bits(ref.device_to_logical(dst), expected, f"device after {kind} device-to-device copy")


@pytest.mark.parametrize("layout, c", LAYOUT_CASES)
def test_round_trip_through_host_is_bit_identical(kv, kv_memory, layout, c):
    seed = seed_of("round-trip", layout, c)
    gen = np.random.default_rng(seed)
    dev, host, back = device_pool(kv_memory, c, gen), host_pool(kv_memory, c, layout, None), device_pool(
        kv_memory, c, None)
    dev_idx, host_idx = index_pair(c, seed)
    poisoned = ref.device_to_logical(back)
    # Load only after the backup's event: HiCache acknowledges a backup before it loads it.
    backup(kv, c, layout, dev, host, dev_idx, host_idx).wait(WAIT_S)
    wait_all([load_layer(kv, c, layout, host, back, host_idx, dev_idx, layer) for layer in range(LAYERS)])
    expected = ref.scatter(poisoned, ref.device_to_logical(dev), dev_idx, dev_idx, range(LAYERS))
    ref.assert_same_bits(ref.device_to_logical(back), expected, f"device -> host {layout} -> device")


@pytest.mark.parametrize("c", ALL_CASES)
def test_every_layout_holds_the_same_logical_data(kv, kv_memory, c):
    seed = seed_of("agree", c)
    dev = device_pool(kv_memory, c, np.random.default_rng(seed))
    dev_idx, host_idx = index_pair(c, seed)
    views = {}
    for layout in ref.layouts_for(c.attention):
        host = host_pool(kv_memory, c, layout, None)
        backup(kv, c, layout, dev, host, dev_idx, host_idx).wait(WAIT_S)
        views[layout] = host_logical(c, layout, host)
    first, *others = views
    for layout in others:
        ref.assert_same_bits(views[layout], views[first], f"logical (layer, token) data of {layout} vs {first}")
    # Agreeing with each other is not enough: an error common to every layout must show too.
    poisoned = ref.poison(torch.empty_like(views[first]))
    expected = ref.scatter(poisoned, ref.device_to_logical(dev), dev_idx, host_idx, range(LAYERS))
    ref.assert_same_bits(views[first], expected, f"logical data of {first}")


@pytest.mark.parametrize("attention", ["mha", "mla"])
@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_host_shapes_are_upstreams(attention, page_size):
    from hal.transfer.layouts import KVGeometry, host_shape

    heads, dim = (MHA_HEADS, MHA_HEAD_DIM) if attention == "mha" else (1, MLA_KV_DIM)
    geom = KVGeometry(attention, LAYERS, heads, dim, torch.bfloat16, page_size)
    size = 4 * page_size
    for layout in ref.layouts_for(attention):
        assert host_shape(layout, geom, size) == ref.host_shape(layout, attention, LAYERS, size, heads, dim, page_size)


def test_host_buffer_at_a_freed_device_address_is_host_memory(kv_memory, backend):
    mistaken = 0
    for _ in range(8):  # allocators hand a just-freed block of the same size straight back
        dev = kv_memory.device((1 << 16,), torch.uint8)
        del dev
        host = kv_memory.host((1 << 16,), torch.uint8)
        mistaken += backend.is_device(host)
    assert mistaken == 0, f"{mistaken} of 8 fresh host buffers were taken for device memory"


@pytest.mark.needs_modeled_clock
def test_modeled_clock_advances_with_each_transfer(kv, kv_memory, backend):
    # Events on one stream complete in order, so their modeled times never go backwards, and
    # moving bytes costs modeled time on any link model. A fresh stream, so earlier tests'
    # plans do not set its clock.
    c = Case("mla", 64, torch.bfloat16, 1024)
    dev = device_pool(kv_memory, c, np.random.default_rng(1))
    dev_idx, host_idx = index_pair(c, 1)
    times = []
    hosts = {layout: host_pool(kv_memory, c, layout, None) for layout in ref.layouts_for("mla")}
    assert not any(backend.is_device(h) for h in hosts.values())
    with kv.use(backend, backend.new_stream()):
        for layout, host in hosts.items():
            ev = backup(kv, c, layout, dev, host, dev_idx, host_idx)
            ev.wait(WAIT_S)
            times.append(ev.modeled_time)
    assert all(t is not None for t in times), "a backend with a modeled clock left an event unmodeled"
    assert 0 < times[0] < times[1] < times[2]


# -- device paths (cuda/xpu; skipped elsewhere, saying why): copy modes, vendor kernels, coherence --

COPY_MODES = ("descriptor", "gather")
# Page size 1 scattered: thousands of segments per group (gathered in gather mode); 64: hundreds.
MODE_CASES = [p for p in LAYOUT_CASES
              if p.values[1].dtype == torch.bfloat16 and p.values[1].page_size in (1, 64)
              and p.values[1].tokens in (1024, 8192)]


@pytest.fixture(params=COPY_MODES)
def moded_kv(request, backend):
    """hal.transfer.kvcacheio on a sibling of `backend` whose plans run in one copy mode."""
    from hal.transfer import kvcacheio

    mode = request.param
    if mode not in backend.copy_modes:
        modes = ", ".join(backend.copy_modes) or "none: plans run one way"
        pytest.skip(f"backend {backend.name!r} has no copy mode {mode!r} (its copy modes: {modes})")
    with kvcacheio.use(backend.with_copy_mode(mode)):
        yield kvcacheio


@pytest.mark.parametrize("layout, c", MODE_CASES)
def test_round_trip_in_each_copy_mode_is_bit_identical(moded_kv, kv_memory, layout, c):
    test_round_trip_through_host_is_bit_identical(moded_kv, kv_memory, layout, c)


@pytest.mark.parametrize("c", [p for p in ALL_CASES if p.values[0].page_size in (1, 64)
                               and p.values[0].dtype == torch.bfloat16 and p.values[0].tokens in (1024, 8192)])
def test_device_to_device_in_each_copy_mode_matches_reference(moded_kv, kv_memory, c):
    test_device_to_device_matches_reference(moded_kv, kv_memory, "all_layer", c)


@pytest.fixture
def vendor_kv(backend):
    """The vendor's kvcacheio kernels (sgl-kernel on CUDA, xspeedgate_ops on Kunlun) called the
    way hal.transfer.kvcacheio is; skipped with the reason where none is importable."""
    find = getattr(backend, "vendor_kv", None)
    if find is None:
        pytest.skip(f"backend {backend.name!r} runs no vendor kernels")
    ops, why = find()
    if ops is None:
        pytest.skip(f"no vendor kernels on backend {backend.name!r}: {why}")
    return ops


def _vendor(call):
    from hal.backends.support.vendor_ops import MissingVendorOp

    try:
        return call()
    except (MissingVendorOp, LookupError) as e:  # LookupError: a layout no upstream op moves
        pytest.skip(str(e))


# The public regime first: the Kunlun caller (sglang-kunlun's HiCache hooks) moves whole pages
# through the MLA layer_first ops, indices as page rows and item_size one page's bytes. A row of
# page_size tokens is one item here, so the same reference checks the same bytes.
PAGE_ROW_CASES = [pytest.param(Case("mla", 1, dtype, pages, row_tokens=ps), id=f"mla-pagerows-ps{ps}-{dname}-{pages}p")
                  for ps in PAGE_SIZES[1:] for dname, dtype in DTYPES.items() for pages in (1, 16, 128)]


@pytest.mark.parametrize("c", PAGE_ROW_CASES)
def test_vendor_page_rows_d2h_matches_reference(vendor_kv, kv_memory, c):
    _vendor(lambda: test_all_layer_backup_matches_reference(vendor_kv, kv_memory, "layer_first", c))


@pytest.mark.parametrize("c", PAGE_ROW_CASES)
def test_vendor_page_rows_h2d_matches_reference(vendor_kv, kv_memory, c):
    _vendor(lambda: test_per_layer_load_matches_reference(vendor_kv, kv_memory, "layer_first", c))


# Then the token-granular cases: every layout, one token per item.
@pytest.mark.parametrize("layout, c", LAYOUT_CASES)
def test_vendor_all_layer_d2h_matches_reference(vendor_kv, kv_memory, layout, c):
    _vendor(lambda: test_all_layer_backup_matches_reference(vendor_kv, kv_memory, layout, c))


@pytest.mark.parametrize("layout, c", LAYOUT_CASES)
def test_vendor_per_layer_h2d_matches_reference(vendor_kv, kv_memory, layout, c):
    _vendor(lambda: test_per_layer_load_matches_reference(vendor_kv, kv_memory, layout, c))


COHERENCE_BYTES = (4 << 10, 1 << 20, 64 << 20)


@pytest.mark.parametrize("nbytes", COHERENCE_BYTES, ids=lambda n: f"{n >> 10}KiB")
def test_async_h2d_from_pinned_memory_is_seen_by_the_next_device_read(backend, kv_memory, nbytes):
    # Reported on Kunlun: a kernel queued right after an async H2D copy from pinned memory, on
    # the same stream, read stale device bytes. Stream order must make the copy visible to it.
    if backend.capabilities().device_type != "cuda":
        pytest.skip(f"backend {backend.name!r} has no device stream to read on (device type "
                    f"{backend.capabilities().device_type!r})")
    from hal.transfer.plan import CopyGroup, Segments, TransferPlan

    stream = backend.new_stream()
    host = kv_memory.host((nbytes,), torch.uint8)
    dev = kv_memory.device((nbytes,), torch.uint8)
    whole = Segments(*(np.array([v], dtype=np.int64) for v in (0, 0, nbytes)))
    for round_ in range(8):
        ref.fill_random(host, np.random.default_rng(seed_of("coherence", nbytes, round_)))
        ref.poison(dev)
        backend.default_stream().synchronize()  # the poison is on the device before the copy
        backend.execute(TransferPlan("coherence_h2d", [CopyGroup(host, dev, whole)]), stream)
        with torch.cuda.stream(stream.torch_stream):  # the immediate device read: no host sync between
            seen = dev.clone()
        stream.synchronize()
        got = seen.cpu()
        assert torch.equal(got, host), (f"round {round_}: a device read right after an async H2D of {nbytes} B "
                                        f"saw {int((got != host).sum())} stale bytes")

"""A host layout is one class registered by name: the planner, the pool ops, the pools, the
controller and the spec take it with no other change (one with no upstream op is moved by the
base's plan-based copy); and no module outside a layout's own compares its name."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from hal.backend import get_backend
from hal.transfer import kvcacheio, layouts, pool_ops
from hal.transfer import layout_registry as registry
from hal.transfer.layer_plans import LayerPlanner
from hal.transfer.layouts.base import HostLayout
from hal.transfer.plan import LAYER_BUFFERS, Side, plan_copy, plan_pool_transfer
from hicache_ref.core.controller import CacheController
from hicache_ref.core.pools import DevicePool, HostPool

ROOT = Path(__file__).resolve().parents[2]
PS = 4
GEOMS = {
    "mha": layouts.KVGeometry("mha", layers=3, heads=2, head_dim=4, dtype=torch.float16, page_size=PS),
    "mla": layouts.KVGeometry("mla", layers=3, heads=1, head_dim=6, dtype=torch.bfloat16, page_size=PS),
}


class SlotsReversed(HostLayout):
    """layer_first with the slots of each layer stored last to first: a test's whole layout."""

    name = "slots_reversed"

    def shape(self, geom, size):
        per_part = (geom.layers, size, geom.heads, geom.head_dim)
        return per_part if geom.attention == "mla" else (2, *per_part)

    def piece_offsets(self, geom, size, tokens):
        return (size - 1 - tokens.astype(np.int64))[:, None] * geom.item_size

    def layer_shift(self, geom, size, layer):
        return layer * size * geom.item_size

    def slots(self, geom, part):
        return part.shape[1]

    def ops(self, geom):
        return "backup_slots_reversed", "load_slots_reversed"

    def backup(self, geom, host_bufs, device_bufs, host_indices, device_indices):
        dev = Side(LAYER_BUFFERS, [dict(enumerate(part)) for part in device_bufs], 0)
        host = Side(self, list(host_bufs), self.slots(geom, host_bufs[0]))
        plan = plan_copy(self.ops(geom)[0], geom, dev, host, device_indices.numpy(), host_indices.numpy(),
                         range(geom.layers))
        return kvcacheio.active_backend().execute(plan, kvcacheio.current_stream())

    def load_layer(self, geom, host_bufs, device_bufs, host_indices, device_indices, layer):
        host = Side(self, list(host_bufs), self.slots(geom, host_bufs[0]))
        dev = Side(LAYER_BUFFERS, [{layer: part[layer]} for part in device_bufs], 0)
        plan = plan_copy(self.ops(geom)[1], geom, host, dev, host_indices.numpy(), device_indices.numpy(), [layer])
        return kvcacheio.active_backend().execute(plan, kvcacheio.current_stream())


class TokenMajorMHA(HostLayout):
    """MHA only, no upstream op: every layer of a token together, K and V apart. Its shape and
    address math are the whole file; the base copies it by a plan from them."""

    name = "token_major_mha"
    attentions = ("mha",)

    def shape(self, geom, size):
        return (2, size, geom.layers, geom.heads, geom.head_dim)

    def piece_offsets(self, geom, size, tokens):
        return tokens.astype(np.int64)[:, None] * (geom.layers * geom.item_size)

    def layer_shift(self, geom, size, layer):
        return layer * geom.item_size

    def slots(self, geom, part):
        return part.shape[0]


def _registered(monkeypatch, cls) -> str:
    """`cls` registered under its name for one test (the registry is restored after)."""
    monkeypatch.setattr(registry.REGISTRY, "_classes", dict(registry.REGISTRY._classes))
    monkeypatch.setattr(registry, "_instances", dict(registry._instances))
    registry.register_layout(cls)
    return cls.name


@pytest.fixture
def reversed_layout(monkeypatch):
    return _registered(monkeypatch, SlotsReversed)


@pytest.fixture
def token_major(monkeypatch):
    return _registered(monkeypatch, TokenMajorMHA)


@pytest.fixture(scope="module")
def emu():
    return get_backend("emu", "emu")


def _pages(first_pages):
    return np.concatenate([np.arange(p * PS, (p + 1) * PS) for p in first_pages]).astype(np.int64)


def test_a_registered_layout_is_listed_and_checked_like_a_built_in(reversed_layout):
    assert reversed_layout in layouts.HOST_LAYOUTS and reversed_layout in layouts.MLA_LAYOUTS
    assert layouts.check_layout(reversed_layout, GEOMS["mha"]) is layouts.get_layout(reversed_layout)
    assert layouts.host_shape(reversed_layout, GEOMS["mha"], 16) == (2, 3, 16, 2, 4)
    with pytest.raises(ValueError, match="layout: 'no_such' is not a MHA host layout"):
        layouts.check_layout("no_such", GEOMS["mha"])


@pytest.mark.parametrize("attention", GEOMS)
def test_the_planner_merges_a_new_layout_by_its_own_address_math(reversed_layout, attention):
    geom = GEOMS[attention]
    size, tokens = 64, _pages([2, 3])  # ascending on the device, descending on the host
    plan = plan_pool_transfer(reversed_layout, geom, size, tokens, tokens, "d2h")
    # No two neighbours are contiguous on both sides: one segment per token, layer and part.
    assert plan.num_segments == len(tokens) * geom.layers * geom.parts
    assert plan.nbytes == len(tokens) * geom.token_bytes
    planner = LayerPlanner(reversed_layout, geom, size)
    assert planner.page_geom is None  # page_runs is False: planned per token
    layer0 = planner.layer0("d2h", tokens, tokens)
    assert (layer0.nbytes * geom.layers, layer0.num_segments * geom.layers) == (plan.nbytes, plan.num_segments)


@pytest.mark.parametrize("attention", GEOMS)
def test_pools_and_pool_ops_move_a_new_layout_bit_for_bit(reversed_layout, emu, attention):
    geom = GEOMS[attention]
    dp = DevicePool(geom, 32, backend=emu, materialize=True)
    hp = HostPool(geom, 64, reversed_layout, backend=emu, materialize=True)
    gen = torch.Generator().manual_seed(1)
    for part in dp.buffers:
        for t in part:
            t.copy_(torch.randn(t.shape, generator=gen).to(t.dtype))
    di, hi, back = _pages([0, 5]), _pages([1, 9]), _pages([6, 2])
    pool_ops.backup(reversed_layout, geom, hp.buffers, dp.buffers, hi, di).wait()
    for p, part in enumerate(dp.buffers):
        for layer, t in enumerate(part):
            assert torch.equal(hp.buffers[p][layer][63 - hi], t[di])  # stored last to first
    events = pool_ops.load_all_layers(reversed_layout, geom, hp.buffers, dp.buffers, hi, back)
    assert len(events) == geom.layers
    for e in events:
        e.wait()
    for part in dp.buffers:
        for t in part:
            assert torch.equal(t[back], t[di])


def test_the_controller_moves_and_counts_a_new_layout_like_its_plan(reversed_layout, emu):
    geom = GEOMS["mha"]
    dp = DevicePool(geom, 32, backend=emu, materialize=True)
    hp = HostPool(geom, 64, reversed_layout, backend=emu, materialize=True)
    di, hi = _pages([0, 1]), _pages([4, 5])
    with CacheController(dp, hp, emu) as ctl:
        ctl.write(di, hi).wait()
        s = ctl.stats()
    full = pool_ops.plan_for(reversed_layout, geom, 64, hi, di, "d2h")
    assert (s.d2h.tokens, s.d2h.bytes, s.d2h.segments) == (len(hi), full.nbytes, full.num_segments)


# -- an MHA layout no upstream op moves: the base's plan-based copy, the spec, a replay --------

def test_an_mha_only_layout_without_an_op_is_listed_for_mha_only(token_major):
    assert token_major in layouts.HOST_LAYOUTS and token_major not in layouts.MLA_LAYOUTS
    assert registry.get_layout(token_major).ops(GEOMS["mha"]) is None
    with pytest.raises(ValueError, match="layout: 'token_major_mha' is not a MLA host layout"):
        layouts.check_layout(token_major, GEOMS["mla"])


def test_the_base_copies_a_layout_without_an_op_bit_for_bit(token_major, emu):
    geom = GEOMS["mha"]
    dp = DevicePool(geom, 32, backend=emu, materialize=True)
    hp = HostPool(geom, 64, token_major, backend=emu, materialize=True)
    gen = torch.Generator().manual_seed(2)
    for part in dp.buffers:
        for t in part:
            t.copy_(torch.randn(t.shape, generator=gen).to(t.dtype))
    di, hi, back = _pages([0, 5]), _pages([9, 1]), _pages([6, 2])
    with kvcacheio.use(emu):
        pool_ops.backup(token_major, geom, hp.buffers, dp.buffers, hi, di).wait()
        for p, part in enumerate(dp.buffers):
            for layer, t in enumerate(part):
                assert torch.equal(hp.buffers[p][hi, layer], t[di])  # every layer of a token together
        for e in pool_ops.load_all_layers(token_major, geom, hp.buffers, dp.buffers, hi, back):
            e.wait()
        with pytest.raises(ValueError, match="^dst_indices: index 99 is outside"):
            pool_ops.backup(token_major, geom, hp.buffers, dp.buffers, np.array([99]), np.array([0]))
    for part in dp.buffers:
        for t in part:
            assert torch.equal(t[back], t[di])
    with pytest.raises(LookupError, match="token_major_mha: no upstream op"):  # no vendor kernel either
        registry.get_layout(token_major).backup(geom, hp.buffers, dp.buffers, hi, di, kv=object())


def test_the_controller_and_a_replay_take_a_layout_registered_at_run_time(token_major, emu):
    from hicache_ref.sim.run.serial_replay import replay
    from hicache_ref.sim.trace.reader import TraceRequest
    from hicache_ref.spec import CacheSpec

    geom = GEOMS["mha"]
    dp = DevicePool(geom, 32, backend=emu, materialize=True)
    hp = HostPool(geom, 64, token_major, backend=emu, materialize=True)
    di, hi = _pages([0, 1]), _pages([4, 5])
    with CacheController(dp, hp, emu) as ctl:
        ctl.write(di, hi).wait()
        s = ctl.stats()
    full = pool_ops.plan_for(token_major, geom, 64, hi, di, "d2h")
    assert (s.d2h.tokens, s.d2h.bytes, s.d2h.segments) == (len(hi), full.nbytes, full.num_segments)
    # the spec reads the registry when it checks: a layout registered now is a --host-layout
    kw = dict(attention="mha", heads=2, kv_dim=4, layers=3, page_size=16, l1_tokens=64, l2_tokens=1024,
              write_policy="write_through", host_layout=token_major)
    reqs = [TraceRequest(0.0, 96, 1, (i % 3, 7, 8)) for i in range(8)]
    real, priced = replay(CacheSpec.of(materialize=True, **kw), reqs), replay(CacheSpec.of(**kw), reqs)
    assert real["kv_mismatch_tokens"] == 0 and real["l2_hit_tokens"] > 0
    assert (real["h2d_bytes"], real["d2h_bytes"]) == (priced["h2d_bytes"], priced["d2h_bytes"])
    with pytest.raises(ValueError, match="^--host-layout: 'token_major_mha' is not an MLA host layout"):
        CacheSpec.of(host_layout=token_major)


# -- no module outside a layout's own switches on its name ---------------------------------

BUILT_IN = set(layouts.HOST_LAYOUTS)


def _names_in(node) -> set[str]:
    """Layout names a comparison operand or a dict's keys spell out as string literals."""
    names = BUILT_IN
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}


def _name_switches(path: Path, root: Path = ROOT) -> list[str]:
    """'file:line: name' for every layout name compared, matched or used as a table key in `path`,
    except a layout's name inside its own module."""
    own = root / "hal" / "transfer" / "layouts"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            spelled = set().union(*(_names_in(n) for n in (node.left, *node.comparators)))
        elif isinstance(node, ast.Dict):
            spelled = set().union(*(_names_in(k) for k in node.keys if k is not None))
        elif isinstance(node, ast.MatchValue):
            spelled = _names_in(node.value)
        else:
            continue
        found += [f"{path.relative_to(root)}:{node.lineno}: {name}" for name in sorted(spelled)
                  if path != own / f"{name}.py"]
    return found


def test_the_name_finder_sees_a_comparison_a_membership_and_a_table(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('if x == "page_first" or "page_head" in y:\n    t = {"layer_first": 1}[x]\n')
    assert [f.split(": ")[1] for f in _name_switches(src, tmp_path)] == ["page_first", "page_head", "layer_first"]


@pytest.mark.slow
def test_no_layout_name_is_compared_outside_its_own_module():
    found = [f for pkg in ("hal", "hicache_ref") for p in sorted((ROOT / pkg).rglob("*.py"))
             for f in _name_switches(p)]
    assert not found, "switch on the layout object, not its name:\n" + "\n".join(found)


# -- the registry's own rules: names, one instance per name, refusals naming the layout ----------

def test_the_built_in_layouts_are_the_layouts_packages_modules_but_base():
    files = {p.stem for p in (ROOT / "hal" / "transfer" / "layouts").glob("*.py")} - {"__init__", "base"}
    assert registry.layout_names() == tuple(sorted(files))
    assert "base" not in registry.layout_names()
    # each layout says which attention kinds it holds; whichever hold MHA only are not MLA layouts
    mha_only = {n for n in files if registry.get_layout(n).attentions == ("mha",)}
    assert "page_head" in mha_only
    assert registry.layout_names("mla") == tuple(sorted(files - mha_only))
    assert registry.layout_names("mha") == tuple(sorted(files))


def test_every_built_in_layout_has_an_independent_definition():
    """A layout file is covered by the equivalence suite only once conformance/suites/transfer_reference.py
    defines it again, for every attention kind it holds."""
    from conformance.suites import transfer_reference as ref

    missing = [f"{name} ({attention})" for name in registry.layout_names()
               for attention in registry.get_layout(name).attentions if name not in ref.layouts_for(attention)]
    assert not missing, f"define these in conformance/suites/transfer_reference.py: {missing}"


def test_one_instance_per_name_and_a_layout_object_passes_through():
    found = registry.get_layout("page_first")
    assert found.name == "page_first" and registry.get_layout("page_first") is found
    assert registry.get_layout(found) is found
    assert registry.check_layout(found, GEOMS["mla"]) is found


@pytest.mark.parametrize("bad", ["no_such", 3, None])
def test_an_unknown_layout_is_refused_naming_it_and_the_known_ones(bad):
    known = ", ".join(registry.layout_names())
    with pytest.raises(ValueError) as e:
        registry.get_layout(bad)
    assert str(e.value) == f"layout: unknown host layout {bad!r}; known: {known}"


def test_a_layout_of_the_wrong_attention_is_refused_naming_the_allowed_ones():
    allowed = ", ".join(registry.layout_names("mla"))
    for layout in ("page_head", registry.get_layout("page_head")):  # by name or as the object: its name
        with pytest.raises(ValueError) as e:
            registry.check_layout(layout, GEOMS["mla"])
        assert str(e.value) == f"layout: 'page_head' is not a MLA host layout ({allowed})"
    with pytest.raises(ValueError, match=r"^layout: 'no_such' is not a MHA host layout \(layer_first, "):
        registry.check_layout("no_such", GEOMS["mha"])


class NoName(HostLayout):
    name = ""


class NumberName(HostLayout):
    name = 7


@pytest.mark.parametrize("cls", [SlotsReversed(), NoName, NumberName, "slots_reversed"])
def test_registering_what_is_no_named_layout_class_is_refused(cls):
    with pytest.raises(ValueError) as e:
        registry.register_layout(cls)
    assert str(e.value) == f"layout: {cls!r} is not a named HostLayout subclass"


def test_registering_a_name_again_replaces_its_class_and_its_instance(reversed_layout):
    first = registry.get_layout(reversed_layout)

    class Again(SlotsReversed):
        pass

    registry.register_layout(Again)
    again = registry.get_layout(reversed_layout)
    assert type(first) is SlotsReversed and type(again) is Again and registry.get_layout(reversed_layout) is again

"""Binding planner: seed check (~75 GiB per card, strict local binding, p800), interleave, uplink/IDO warnings, bad input."""

from __future__ import annotations

import pytest

from hal.topology import GIB, from_profile, from_sysfs
from hal.topology.binding import RESERVE_FRACTION, plan_binding
from hardware_profiles import load_profile
from tests.hal.test_topology import build_p800_box


def test_seed_check_strict_local_binding_leaves_about_75_gib_per_card():
    """p800: 187 GiB per node, the 2 cards of an uplink share their node, 20% of each node kept
    for the OS and runtime (the stated assumption): 187 * 0.8 / 2 = 74.8 GiB per card."""
    profile = load_profile("p800")
    plan = plan_binding(from_profile(profile), "local")
    caps = {b.capacity_bytes for b in plan.bindings}
    assert len(plan.bindings) == 8 and len(caps) == 1
    per_card_gib = caps.pop() / GIB
    target = profile.target("per_card_host_gib_local")
    assert target.check(per_card_gib), f"{per_card_gib:.1f} GiB vs {target.describe()}"
    assert abs(per_card_gib - target.value) <= target.tolerance
    assert any(f"{RESERVE_FRACTION:.0%}" in a for a in plan.assumptions)
    assert any(a.startswith("assumed") for a in plan.assumptions)  # the placeholder device nodes


def test_local_binding_strands_the_nodes_without_devices():
    plan = plan_binding(from_profile("p800"), "local")
    assert [b.nodes for b in plan.bindings] == [(0,), (0,), (2,), (2,), (4,), (4,), (6,), (6,)]
    assert plan.bindings[3].numa_arg("local") == ("bind", [2])
    assert plan.stranded_bytes() == 4 * int(187 * GIB * (1 - RESERVE_FRACTION))


def test_interleave_shares_every_node_with_every_card():
    local = plan_binding(from_profile("p800"), "local")
    inter = plan_binding(from_profile("p800"), "interleave")
    assert all(b.nodes == tuple(range(8)) for b in inter.bindings)
    assert inter.bindings[0].numa_arg("interleave") == ("interleave", list(range(8)))
    assert inter.min_capacity() == pytest.approx(2 * local.min_capacity(), rel=1e-6)
    assert inter.stranded_bytes() == 0
    part = plan_binding(from_profile("p800"), "interleave", nodes=[0, 1])
    assert part.min_capacity() == pytest.approx(local.min_capacity() / 2, rel=1e-6)


def test_reservation_and_memory_overrides():
    topo = from_profile("p800")
    none_kept = plan_binding(topo, reserve_fraction=0.0)
    assert none_kept.min_capacity() == int(187 * GIB) // 2
    fixed = plan_binding(topo, reserve_fraction=0.0, reserve_bytes=7 * GIB)
    assert fixed.min_capacity() == (int(187 * GIB) - 7 * GIB) // 2
    assert plan_binding(topo, memory_per_node_bytes=100 * GIB, reserve_fraction=0.0).min_capacity() == 50 * GIB
    uneven = plan_binding(topo, memory_per_node_bytes={0: 10 * GIB}, reserve_fraction=0.0)
    assert uneven.capacity(0) == 5 * GIB and uneven.capacity(2) == int(187 * GIB) // 2


def test_shared_uplink_warnings_follow_ido(tmp_path):
    unknown = plan_binding(from_profile("p800"))
    assert sum("ID-based ordering unknown" in w for w in unknown.warnings) == 4
    on = plan_binding(from_sysfs(str(build_p800_box(tmp_path / "on").root)))
    assert not any("ordering" in w for w in on.warnings)
    off = plan_binding(from_sysfs(str(build_p800_box(tmp_path / "off", odd_ido=(False, True)).root)))
    assert [w.split()[0] for w in off.warnings if "ordering off" in w] == ["0000:12:00.0+0000:13:00.0"]


def test_synthetic_box_binds_each_pair_to_its_node(tmp_path):
    plan = plan_binding(from_sysfs(str(build_p800_box(tmp_path).root)), "local", reserve_fraction=0.0)
    assert [b.nodes[0] for b in plan.bindings] == [0, 0, 2, 2, 4, 4, 6, 6]
    assert plan.min_capacity() == 32 * GIB  # 64 GiB nodes, two cards each


def test_device_without_numa_node_gets_no_local_capacity():
    plan = plan_binding(from_profile("h200"), "local")
    assert {b.capacity_bytes for b in plan.bindings} == {0}
    assert all(b.numa_arg("local") is None for b in plan.bindings)
    assert sum("no known NUMA node" in w for w in plan.warnings) == 8


def test_host_without_accelerators_plans_nothing_and_says_so():
    topo = from_sysfs("/sys")
    if topo.devices:
        pytest.skip("this host has accelerators")
    plan = plan_binding(topo, "local")
    assert plan.bindings == () and plan.min_capacity() == 0
    assert any("no accelerators" in w for w in plan.warnings)


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        ({"policy": "spread"}, "policy"),
        ({"reserve_fraction": 1.0}, "reserve_fraction"),
        ({"reserve_fraction": -0.1}, "reserve_fraction"),
        ({"reserve_bytes": -1}, "reserve_bytes"),
        ({"reserve_bytes": True}, "reserve_bytes"),
        ({"policy": "interleave", "nodes": [0, 9]}, "nodes"),
        ({"policy": "interleave", "nodes": []}, "nodes"),
        ({"policy": "interleave", "nodes": [0, 0, 1]}, "nodes"),
        ({"policy": "interleave", "nodes": [True]}, "nodes"),
        ({"nodes": [0]}, "nodes"),
        ({"memory_per_node_bytes": {12: GIB}}, "memory_per_node_bytes"),
        ({"memory_per_node_bytes": -1}, "memory_per_node_bytes"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=f"^{arg}"):
        plan_binding(from_profile("p800"), **kwargs)


def test_plan_numa_argument_places_a_real_buffer_on_this_host():
    from hal.memory.host import allocate_host

    plan = plan_binding(from_profile("emu"), "local")
    numa = plan.bindings[0].numa_arg("local")
    assert numa == ("bind", [0])
    buf = allocate_host(2 << 20, numa=numa)
    try:
        rep = buf.report()
        assert rep["policy_achieved"] and set(rep["numa_pages"]) == {0}
    finally:
        buf.close()


def test_a_tp_shared_pool_is_seen_whole_by_every_card():
    """One host KV copy for the TP group: each card's capacity is the whole interleaved pool, not 1/8."""
    topo = from_profile("p800")
    split = plan_binding(topo, "interleave")
    shared = plan_binding(topo, "interleave", shared=True)
    assert shared.shared and not split.shared
    assert shared.min_capacity() == sum(shared.usable_bytes_per_node.values())
    assert shared.min_capacity() == pytest.approx(8 * split.min_capacity(), rel=1e-6)
    assert all(b.nodes == tuple(range(8)) for b in shared.bindings)
    assert any("TP-shared" in a for a in shared.assumptions)
    with pytest.raises(ValueError, match="^shared:"):
        plan_binding(topo, "local", shared=True)
    with pytest.raises(ValueError, match="^shared:"):
        plan_binding(topo, "interleave", shared=1)

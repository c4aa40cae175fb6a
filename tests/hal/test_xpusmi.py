"""`xpu-smi topo -m` parser on the composed P800 fixtures (XL/PIX/PHB/NODE/SYS, CPU and NUMA affinity) and the topology built from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hal.topology import GIB, NumaNode, from_profile, from_xpusmi, parse_cpulist
from hal.topology.binding import plan_binding
from hal.topology.xpusmi import parse_topo_matrix
from hardware_profiles import load_profile

FIXTURES = Path(__file__).parents[1] / "fixtures"
PCIE = (FIXTURES / "xpu_smi_topo_m.p800_pcie_8card.composed.txt").read_text()
OAM = (FIXTURES / "xpu_smi_topo_m.p800_oam_xl_8card.composed.txt").read_text()


def test_fixtures_are_labelled_composed():
    readme = (FIXTURES / "README.md").read_text()
    for f in FIXTURES.glob("*.txt"):
        assert ".composed." in f.name or ".captured." in f.name
        assert f.name in readme


def test_pcie_fixture_matrix_and_affinity_columns():
    m = parse_topo_matrix(PCIE)
    assert m.devices == tuple(f"XPU{i}" for i in range(8))
    assert m.columns[8:] == tuple(f"NIC{i}" for i in range(6))
    kinds = {k for row in m.links.values() for k in row.values()}
    assert kinds == {"X", "PIX", "PHB", "NODE", "SYS"}
    assert m.link("XPU0", "XPU1") == "PIX" and m.link("XPU0", "XPU2") == "SYS"
    assert m.link("XPU0", "NIC4") == "PHB" and m.link("XPU3", "NIC5") == "NODE"
    assert m.cpu_affinity["XPU0"] == tuple(range(16)) + tuple(range(128, 144))
    assert m.numa_affinity["XPU7"] == (6,)
    assert m.cpu_affinity["NIC0"] is None and m.numa_affinity["NIC0"] is None  # NIC rows carry no affinity
    assert m.nic_names["NIC5"] == "mlx5_5"
    assert set(m.legend) >= {"X", "XL", "PIX", "PXB", "PHB", "NODE", "SYS"}


def test_oam_fixture_xl_links_and_mlx5_columns():
    m = parse_topo_matrix(OAM)
    assert m.columns[8:] == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    xl = m.pairs({"XL"})
    assert len(xl) == 12 and ("XPU0", "XPU3") in xl and ("XPU4", "XPU7") in xl
    assert ("XPU3", "XPU4") not in xl and m.link("XPU3", "XPU4") == "SYS"
    assert m.link("XPU1", "mlx5_0") == "PIX"
    assert m.numa_affinity["XPU0"] == (0,) and m.numa_affinity["XPU5"] == (1,)
    assert m.cpu_affinity["XPU5"] == parse_cpulist("64-127,192-255")
    assert m.nic_names == {}


def test_pcie_fixture_topology_pairs_share_uplinks_with_ido_unknown():
    topo = from_xpusmi(PCIE)
    assert topo.source == "xpu-smi"
    assert topo.uplinks == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert [d.numa_node for d in topo.devices] == [0, 0, 2, 2, 4, 4, 6, 6]
    assert topo.node_ids() == [0, 2, 4, 6]
    assert topo.node(2).cpus == parse_cpulist("32-47,160-175")
    assert {ido for _, ido in topo.shared_uplinks()} == {"unknown"}


def test_oam_fixture_infers_shared_switch_through_a_common_nic():
    topo = from_xpusmi(OAM)
    assert topo.uplinks == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert any("XL" in n for n in topo.notes)


def test_xpusmi_topology_and_p800_profile_agree_on_per_card_capacity():
    """The composed box has 8 nodes; give its nodes the p800 profile's memory and the binding
    plans match the profile's emulation."""
    nodes = tuple(NumaNode(i, (), 187 * GIB, ()) for i in range(8))
    from_text = plan_binding(from_xpusmi(PCIE, numa_nodes=nodes), "local")
    from_prof = plan_binding(from_profile("p800"), "local")
    assert [b.capacity_bytes for b in from_text.bindings] == [b.capacity_bytes for b in from_prof.bindings]
    assert len(from_text.warnings) == 4  # four shared uplinks, IDO unknown


def test_ansi_colour_codes_are_ignored():
    coloured = PCIE.replace("PIX", "\x1b[32mPIX\x1b[0m").replace("SYS", "\x1b[1;31mSYS\x1b[0m")
    assert parse_topo_matrix(coloured) == parse_topo_matrix(PCIE)


NVIDIA_STYLE = """\
\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPXB\t0-47,96-143\t0\t\tN/A
GPU1\tNV18\t X \tPXB\t48-95,144-191\t1\t\tN/A
NIC0\tPXB\tPXB\t X \t\t\t\t

Legend:

  X    = Self
  NV#  = NVLinks
"""


def test_nvidia_style_matrix_with_gpu_numa_id_column():
    m = parse_topo_matrix(NVIDIA_STYLE)
    assert m.devices == ("GPU0", "GPU1") and m.link("GPU0", "GPU1") == "NV18"
    assert m.numa_affinity == {"GPU0": (0,), "GPU1": (1,), "NIC0": None}
    topo = from_xpusmi(NVIDIA_STYLE)
    assert topo.uplinks == ((0, 1),)  # both PXB to NIC0: one root port
    assert topo.devices[0].vendor == 0x10DE


BAD = {
    "unknown link kind": "  XPU0 XPU1 CPU Affinity NUMA Affinity\nXPU0 X ZZZ 0-3 0\nXPU1 ZZZ X 0-3 0\n",
    "has 1 link cells": "  XPU0 XPU1 CPU Affinity NUMA Affinity\nXPU0 X\n",
    "no matrix header": "Legend:\n  X = Self\n",
    "no row for XPU1": "  XPU0 XPU1 CPU Affinity NUMA Affinity\nXPU0 X PIX 0-3 0\n",
    "link to itself": "  XPU0 XPU1 CPU Affinity NUMA Affinity\nXPU0 PIX PIX 0-3 0\nXPU1 PIX X 0-3 0\n",
    "values after the links": "  XPU0 CPU Affinity NUMA Affinity\nXPU0 X 0-3 0 7\n",
    "not one of the header columns": "  XPU0 CPU Affinity NUMA Affinity\nXPU9 X 0-3 0\n",
    "CPU Affinity": "  XPU0 CPU Affinity NUMA Affinity\nXPU0 X 3-1 0\n",
}


@pytest.mark.parametrize("message", list(BAD))
def test_malformed_text_raises_naming_the_problem(message):
    with pytest.raises(ValueError, match=message):
        parse_topo_matrix(BAD[message])


def test_errors_name_the_line():
    with pytest.raises(ValueError, match="line 2"):
        parse_topo_matrix(BAD["unknown link kind"])


def render(groups: list[list[int]], node_of_group: list[int]) -> str:
    """A matrix in xpu-smi's layout for devices grouped onto switches (PIX inside a group)."""
    switch = {d: g for g, members in enumerate(groups) for d in members}
    n = len(switch)
    names = [f"XPU{i}" for i in range(n)]
    lines = ["        " + "  ".join(names) + "  CPU Affinity  NUMA Affinity"]
    for i in range(n):
        cells = []
        for j in range(n):
            same_node = node_of_group[switch[i]] == node_of_group[switch[j]]
            cells.append("X" if i == j else "PIX" if switch[i] == switch[j] else "PHB" if same_node else "SYS")
        node = node_of_group[switch[i]]
        lines.append(f"XPU{i}  " + "  ".join(cells) + f"  {4 * node}-{4 * node + 3}  {node}")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=5), st.data())
def test_rendered_switch_groups_come_back_as_uplinks(sizes, data):
    groups, start = [], 0
    for s in sizes:
        groups.append(list(range(start, start + s)))
        start += s
    nodes = [data.draw(st.integers(0, 3)) for _ in groups]
    topo = from_xpusmi(render(groups, nodes))
    assert sorted(topo.uplinks) == sorted(tuple(g) for g in groups)
    assert [d.numa_node for d in topo.devices] == [nodes[g] for g, m in enumerate(groups) for _ in m]


def test_xpusmi_command_is_run_when_the_binary_exists(tmp_path, monkeypatch):
    from hal.topology import from_xpusmi_command

    tool = tmp_path / "xpu-smi"
    fixture = FIXTURES / "xpu_smi_topo_m.p800_pcie_8card.composed.txt"
    tool.write_text(f"#!{sys.executable}\nimport sys\nassert sys.argv[1:] == ['topo', '-m']\n"
                    f"print(open({str(fixture)!r}).read(), end='')\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    topo = from_xpusmi_command()
    assert topo.source == "xpu-smi" and topo.origin == f"{tool} topo -m" and len(topo.devices) == 8
    assert topo == from_xpusmi(fixture.read_text(), topo.numa_nodes, origin=topo.origin)


def test_xpusmi_command_falls_back_to_sysfs_and_says_why(tmp_path, monkeypatch):
    from hal.topology import from_xpusmi_command

    monkeypatch.setenv("PATH", str(tmp_path))
    topo = from_xpusmi_command()
    assert topo.source == "sysfs" and "xpu-smi not found" in topo.notes[0]
    broken = tmp_path / "xpu-smi"
    broken.write_text("#!/bin/sh\necho 'not a matrix'\n")
    broken.chmod(0o755)
    topo = from_xpusmi_command()
    assert topo.source == "sysfs" and "topo -m failed" in topo.notes[0]


def test_xpu_backend_without_an_xpu_emulates_its_profile():
    from hal.backends.xpu import XpuBackend

    assert XpuBackend(load_profile("p800")).topology().source == "profile"

"""Topology from sysfs (real, and a synthetic 8-node tree with PCIe switches and IDO bits), from profiles, and discover()."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hal.topology import (
    GIB,
    Topology,
    discover,
    from_profile,
    from_sysfs,
    has_hardware,
    parse_cpulist,
    sysfs_numa_nodes,
)
from hal.topology.sysfs import ido_from_config

KUNLUN, P800_ID, NVIDIA, MELLANOX = 0x1D22, 0x3688, 0x10DE, 0x15B3


def pcie_config(ido_request: bool, ido_completion: bool, size: int = 256) -> bytes:
    """Config space with a capability list: power management at 0x40 -> PCI Express at 0x50,
    whose Device Control 2 (cap + 0x28) carries the IDO enable bits 8 and 9."""
    cfg = bytearray(256)
    cfg[0x06] = 0x10  # Status: capabilities list present
    cfg[0x34] = 0x40
    cfg[0x40:0x42] = bytes([0x01, 0x50])  # PM capability, next -> 0x50
    cfg[0x50:0x52] = bytes([0x10, 0x00])  # PCIe capability, end of list
    ctl2 = (0x100 if ido_request else 0) | (0x200 if ido_completion else 0) | 0x0005  # other bits set too
    cfg[0x78:0x7A] = ctl2.to_bytes(2, "little")
    return bytes(cfg[:size])


class FakeSysfs:
    """A sysfs tree under tmp_path: node directories, PCI functions nested by bridge, and the
    bus/pci/devices symlinks the kernel provides."""

    def __init__(self, root: Path):
        self.root = root
        (root / "bus/pci/devices").mkdir(parents=True, exist_ok=True)

    def node(self, i: int, cpus: str, mem_kib: int, distances: list[int]) -> None:
        d = self.root / f"devices/system/node/node{i}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text(f"Node {i} MemTotal:       {mem_kib} kB\nNode {i} MemFree:  1 kB\n")
        (d / "distance").write_text(" ".join(map(str, distances)) + "\n")

    def pci(self, chain: list[str], vendor: int, device: int, klass: int, numa: int = -1, cpus: str = "",
            config: bytes = b"") -> None:
        d = self.root.joinpath("devices", *chain)
        d.mkdir(parents=True, exist_ok=True)
        (d / "vendor").write_text(f"{vendor:#06x}\n")
        (d / "device").write_text(f"{device:#06x}\n")
        (d / "class").write_text(f"{klass:#08x}\n")
        (d / "numa_node").write_text(f"{numa}\n")
        (d / "local_cpulist").write_text(cpus + "\n")
        (d / "config").write_bytes(config)
        os.symlink(d, self.root / "bus/pci/devices" / chain[-1])


def node_cpus(n: int) -> str:
    return f"{16 * n}-{16 * n + 15},{128 + 16 * n}-{128 + 16 * n + 15}"


def build_p800_box(root: Path, ido=(True, True), port_ido=(True, True), odd_ido=None, config_size=256) -> FakeSysfs:
    """8 NUMA nodes of 64 GiB; four root ports (on nodes 0, 2, 4, 6), each -> switch -> 2 P800 +
    a NIC; a Baidu storage function and a host bridge that are not accelerators. odd_ido sets
    the IDO bits of XPU1 only."""
    fs = FakeSysfs(root)
    for n in range(8):
        fs.node(n, node_cpus(n), 64 * 1024 * 1024, [10 if m == n else 12 if m // 4 == n // 4 else 32 for m in range(8)])
    seg = "pci0000:00"
    fs.pci([seg, "0000:00:00.0"], 0x1D94, 0x1450, 0x060000, 0, node_cpus(0))  # Hygon host bridge
    xpu = 0
    for up in range(4):
        node, bus = 2 * up, 0x10 * (up + 1)
        rp, usp = f"0000:00:{up + 1:02x}.1", f"0000:{bus:02x}:00.0"
        fs.pci([seg, rp], 0x1D94, 0x1453, 0x060400, node, node_cpus(node), pcie_config(*port_ido, config_size))
        fs.pci([seg, rp, usp], 0x1000, 0xC030, 0x060400, node, node_cpus(node), pcie_config(True, True, config_size))
        for k in range(3):  # two XPUs and a NIC on the switch's downstream ports
            dsp, ep = f"0000:{bus + 1:02x}:{k:02x}.0", f"0000:{bus + 2 + k:02x}:00.0"
            fs.pci([seg, rp, usp, dsp], 0x1000, 0xC030, 0x060400, node, node_cpus(node), pcie_config(True, True, config_size))
            if k < 2:
                bits = odd_ido if (odd_ido is not None and xpu == 1) else ido
                fs.pci([seg, rp, usp, dsp, ep], KUNLUN, P800_ID, 0x078000, node, node_cpus(node),
                       pcie_config(*bits, config_size))
                xpu += 1
            else:
                fs.pci([seg, rp, usp, dsp, ep], MELLANOX, 0x1021, 0x020000, node, node_cpus(node), pcie_config(True, True))
    fs.pci([seg, "0000:00:07.0"], KUNLUN, 0x1380, 0x010802, 1, node_cpus(1))  # Baidu storage, not an XPU
    return fs


@pytest.fixture
def p800_box(tmp_path) -> FakeSysfs:
    return build_p800_box(tmp_path / "sys")


def test_sysfs_numa_nodes_give_cpus_memory_and_distances(p800_box):
    nodes = sysfs_numa_nodes(str(p800_box.root))
    assert [n.id for n in nodes] == list(range(8))
    assert nodes[3].cpus == tuple(range(48, 64)) + tuple(range(176, 192))
    assert nodes[3].memory_bytes == 64 * GIB
    assert nodes[3].distances == (12, 12, 12, 10, 32, 32, 32, 32)


def test_sysfs_finds_only_accelerators_in_bus_order(p800_box):
    topo = from_sysfs(str(p800_box.root))
    assert topo.source == "sysfs"
    assert len(topo.devices) == 8
    assert all((d.vendor, d.device, d.klass) == (KUNLUN, P800_ID, 0x078000) for d in topo.devices)
    addrs = [d.address for d in topo.devices]
    assert addrs == sorted(addrs)
    assert "0000:00:07.0" not in addrs  # same vendor, storage class


def test_nvidia_gpu_is_an_accelerator_but_its_audio_function_is_not(tmp_path):
    fs = FakeSysfs(tmp_path)
    fs.node(0, "0-3", 1024, [10])
    fs.pci(["pci0000:00", "0000:00:01.0", "0000:01:00.0"], NVIDIA, 0x2335, 0x030200, 0, "0-3")
    fs.pci(["pci0000:00", "0000:00:01.0", "0000:01:00.1"], NVIDIA, 0x22A3, 0x040300, 0, "0-3")
    topo = from_sysfs(str(tmp_path))
    assert [d.address for d in topo.devices] == ["0000:01:00.0"]


def test_bridge_chain_groups_devices_behind_one_uplink(p800_box):
    topo = from_sysfs(str(p800_box.root))
    d0 = topo.devices[0]
    assert d0.upstream == ("0000:00:01.1", "0000:10:00.0", "0000:11:00.0")  # root port first
    assert topo.uplinks == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert [d.numa_node for d in topo.devices] == [0, 0, 2, 2, 4, 4, 6, 6]
    assert d0.local_cpus == parse_cpulist(node_cpus(0))
    assert set(topo.root_ports) == {f"0000:00:{u:02x}.1" for u in range(1, 5)}


def test_ido_bits_on_everywhere_means_uplinks_ordered(p800_box):
    topo = from_sysfs(str(p800_box.root))
    assert all(d.ido == "on" and d.ido_request and d.ido_completion for d in topo.devices)
    assert [ido for _, ido in topo.shared_uplinks()] == ["on"] * 4


def test_ido_off_on_one_device_marks_its_uplink_off(tmp_path):
    topo = from_sysfs(str(build_p800_box(tmp_path, odd_ido=(True, False)).root))
    assert topo.devices[1].ido_completion is False and topo.devices[1].ido == "off"
    assert [ido for _, ido in topo.shared_uplinks()] == ["off", "on", "on", "on"]


def test_root_port_without_ido_completions_marks_uplinks_off(tmp_path):
    # The root complex returns the completions of device reads of host memory.
    topo = from_sysfs(str(build_p800_box(tmp_path, port_ido=(False, False)).root))
    assert all(d.ido == "on" for d in topo.devices)
    assert {ido for _, ido in topo.shared_uplinks()} == {"off"}


def test_config_space_cut_at_64_bytes_reads_as_unknown(tmp_path):
    topo = from_sysfs(str(build_p800_box(tmp_path, config_size=64).root))
    assert {(d.ido_request, d.ido_completion) for d in topo.devices} == {(None, None)}
    assert {ido for _, ido in topo.shared_uplinks()} == {"unknown"}
    assert any("unreadable" in n for n in topo.notes)


def test_ido_from_config_edge_cases():
    assert ido_from_config(pcie_config(True, False)) == (True, False)
    assert ido_from_config(pcie_config(False, True)) == (False, True)
    assert ido_from_config(b"") == (None, None)
    no_list = bytearray(pcie_config(True, True))
    no_list[0x06] = 0
    assert ido_from_config(bytes(no_list)) == (None, None)
    looping = bytearray(256)
    looping[0x06], looping[0x34], looping[0x40], looping[0x41] = 0x10, 0x40, 0x01, 0x40  # points at itself
    assert ido_from_config(bytes(looping)) == (None, None)


def test_real_sysfs_parses_this_host():
    topo = from_sysfs("/sys")
    assert topo.source == "sysfs"
    assert 0 in topo.node_ids()
    node0 = topo.node(0)
    assert node0.cpus and node0.memory_bytes > 0
    for d in topo.devices:  # none on CI; on a GPU/XPU host, every one is a known accelerator
        assert d.vendor in (NVIDIA, KUNLUN)
    assert sorted(i for g in topo.uplinks for i in g) == list(range(len(topo.devices)))


def test_kernel_without_numa_directories_gives_one_node(tmp_path):
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/online").write_text("0-7\n")
    assert [(n.id, n.cpus) for n in sysfs_numa_nodes(str(tmp_path))] == [(0, tuple(range(8)))]


@pytest.mark.parametrize("text", ["3-1", "a", "1-", "0,,x"])
def test_bad_cpulist_is_rejected_naming_it(text):
    with pytest.raises(ValueError, match="node3/cpulist"):
        parse_cpulist(text, "node3/cpulist")


def test_p800_profile_emulates_8_nodes_and_2_xpus_per_uplink():
    topo = from_profile("p800")
    assert topo.source == "profile" and topo.origin == "p800"
    assert topo.node_ids() == list(range(8))
    assert len(topo.devices) == 8
    assert topo.uplinks == ((0, 1), (2, 3), (4, 5), (6, 7))
    for group in topo.uplinks:  # the devices of one uplink share its root port's node
        assert len({topo.devices[i].numa_node for i in group}) == 1
    assert len({topo.devices[g[0]].numa_node for g in topo.uplinks}) == 4
    assert {ido for _, ido in topo.shared_uplinks()} == {"unknown"}  # p800 profile: ido unknown
    assert any(n.startswith("assumed") for n in topo.notes)
    assert topo.node(5).memory_bytes == 187 * GIB


def _p800_variant(tmp_path, device_numa: str, ido: str) -> Path:
    text = (Path(__file__).parents[2] / "hardware_profiles/p800.yaml").read_text()
    text = text.replace("device_numa: unknown", f"device_numa: {device_numa}").replace("ido: unknown", f"ido: {ido}")
    path = tmp_path / "p800_variant.yaml"
    path.write_text(text)
    return path


def test_profile_device_numa_and_ido_are_used(tmp_path):
    topo = from_profile(str(_p800_variant(tmp_path, "[1, 1, 3, 3, 5, 5, 7, 7]", "off")))
    assert [d.numa_node for d in topo.devices] == [1, 1, 3, 3, 5, 5, 7, 7]
    assert {ido for _, ido in topo.shared_uplinks()} == {"off"}
    assert not any(n.startswith("assumed") for n in topo.notes)


def test_profile_device_on_missing_node_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="device_numa"):
        from_profile(str(_p800_variant(tmp_path, "[0, 0, 2, 2, 4, 4, 6, 9]", "on")))


def test_profile_without_topology_names_the_profile():
    with pytest.raises(ValueError, match="profile 'p900' has no topology"):
        from_profile("p900")


def test_emu_profile_takes_numa_nodes_from_this_host():
    topo = from_profile("emu")
    assert topo.node_ids() == [n.id for n in sysfs_numa_nodes("/sys")]
    assert [d.numa_node for d in topo.devices] == [0]


def test_discover_picks_profile_without_hardware_and_sysfs_otherwise(p800_box):
    assert discover().source == "sysfs"
    assert discover(profile="p800").source == "profile"
    assert discover("p800", hardware=False).origin == "p800"
    fake = discover(sysfs_root=str(p800_box.root))
    assert fake.source == "sysfs" and len(fake.devices) == 8
    # With hardware, the real machine wins over the profile.
    assert discover("p800", hardware=True, sysfs_root=str(p800_box.root)).source == "sysfs"


def test_has_hardware_comes_from_capabilities():
    from hal.backend import Capabilities, get_backend

    assert not has_hardware(get_backend("emu").capabilities())  # device buffers are CPU memory
    assert not has_hardware(get_backend("count").capabilities())  # moves no bytes
    assert has_hardware(Capabilities(name="gpu", available=True, reason="", device_type="cuda", modeled_clock=False,
                                     host_registration=True))
    assert not has_hardware(Capabilities(name="gpu", available=False, reason="no device", device_type="cuda",
                                         modeled_clock=False, host_registration=True))


def test_discover_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="no topology"):
        discover("p900")
    with pytest.raises(ValueError):
        discover(profile="no-such-profile")


def test_backend_topology_comes_from_discover():
    from hal.backend import get_backend

    assert isinstance(get_backend("emu").topology(), Topology)
    assert get_backend("emu", "p800").topology().origin == "p800"
    assert get_backend("count", "p800").topology().origin == "p800"


def test_uplink_of_and_bad_model_input(p800_box):
    topo = from_sysfs(str(p800_box.root))
    assert topo.uplink_of(5) == (4, 5)
    with pytest.raises(ValueError, match="index"):
        topo.uplink_of(8)
    with pytest.raises(ValueError, match="node"):
        topo.node(8)
    with pytest.raises(ValueError, match="source"):
        Topology("guess", topo.numa_nodes, topo.devices, topo.uplinks)
    with pytest.raises(ValueError, match="uplinks"):
        Topology("sysfs", topo.numa_nodes, topo.devices, ((0, 1),))

"""Parser for the text of `xpu-smi topo -m` (Kunlunxin), which mirrors `nvidia-smi topo -m`.

The matrix gives each device's link to every other device and NIC plus its CPU and NUMA affinity.
Columns split on tabs or runs of spaces and cells may carry colour codes, so parsing is by header.
`to_topology` turns the matrix into a hal.topology.topology_model.Topology.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from hal.topology.topology_model import NumaNode, PciDevice, Topology, group_by_uplink, parse_cpulist

# Link kinds between two endpoints, nearest first (nvidia-smi's legend, which xpu-smi keeps,
# plus XL). NV# / XL# carry a link count in the name.
LINK_KINDS: dict[str, str] = {
    "X": "self",
    "XL": "XPU Link: Kunlunxin's direct card-to-card link (like NVLink), not PCIe",
    "NV#": "a bonded set of # NVLinks",
    "PIX": "through at most one PCIe bridge/switch",
    "PXB": "through several PCIe bridges/switches, not through the host bridge",
    "PHB": "through a PCIe host bridge (the CPU)",
    "NODE": "through PCIe and the link between host bridges inside one NUMA node",
    "SYS": "through PCIe and the SMP interconnect between NUMA nodes",
}
# Reaching each other without passing the CPU's host bridge means both hang below one root
# port, i.e. they share one uplink into the host.
SAME_UPLINK_KINDS = frozenset({"PIX", "PXB"})
AFFINITY_TITLES = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "XPU NUMA ID")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DEVICE = re.compile(r"^(XPU|GPU)\d+$")
_KIND = re.compile(r"^(X|XL\d*|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_COLUMN = re.compile(r"^[A-Za-z][\w.-]*$")
_TITLES = re.compile("|".join(re.escape(t) for t in AFFINITY_TITLES))


class TopoMatrix(NamedTuple):
    columns: tuple[str, ...]  # matrix columns in order: devices, then NICs
    devices: tuple[str, ...]  # accelerator names (XPUn / GPUn) in order
    links: dict[str, dict[str, str]]  # row name -> column name -> link kind (upper case)
    cpu_affinity: dict[str, tuple[int, ...] | None]  # None: N/A or absent
    numa_affinity: dict[str, tuple[int, ...] | None]
    nic_names: dict[str, str]  # NIC0 -> mlx5_0 (from the NIC Legend)
    legend: dict[str, str]  # kind -> text, as printed

    def link(self, a: str, b: str) -> str:
        return self.links[a][b]

    def pairs(self, kinds: set[str] | frozenset[str]) -> list[tuple[str, str]]:
        """Device pairs (a before b) whose link kind is in `kinds` (XL2 counts as XL)."""
        out = []
        for i, a in enumerate(self.devices):
            for b in self.devices[i + 1 :]:
                k = self.links[a][b]
                if k in kinds or re.sub(r"\d+$", "", k) in kinds:
                    out.append((a, b))
        return out


def _values(token: str, what: str) -> tuple[int, ...] | None:
    if token.upper() in ("N/A", "NA", "-"):
        return None
    return parse_cpulist(token, what)


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Parse `xpu-smi topo -m` (or `nvidia-smi topo -m`) text. ValueError naming the line on
    anything that does not fit: a row with too few cells, an unknown link kind, a missing row."""
    lines = [_ANSI.sub("", raw).rstrip() for raw in text.splitlines()]
    columns: list[str] = []
    titles: list[str] = []
    links: dict[str, dict[str, str]] = {}
    cpu: dict[str, tuple[int, ...] | None] = {}
    numa: dict[str, tuple[int, ...] | None] = {}
    nic_names: dict[str, str] = {}
    legend: dict[str, str] = {}
    section = "matrix"
    for no, line in enumerate(lines, 1):
        tokens = line.split()
        if not tokens:
            continue
        if line.strip().lower() == "nic legend:":
            section = "nic"
            continue
        if line.strip().lower() == "legend:":
            section = "legend"
            continue
        if section == "legend":
            m = re.match(r"^\s*(\S+)\s*=\s*(.+)$", line)
            if m:
                legend[m.group(1)] = m.group(2).strip()
            continue
        if section == "nic":
            m = re.match(r"^\s*(\S+):\s*(\S+)\s*$", line)
            if m:
                nic_names[m.group(1)] = m.group(2)
            continue
        if not columns:
            # The header: starts with a device name and its second cell is a name, not a kind.
            if _DEVICE.match(tokens[0]) and (len(tokens) == 1 or not _KIND.match(tokens[1].upper())):
                columns, titles = _header(line, no)
            continue
        name = tokens[0]
        if name not in columns:
            raise ValueError(f"xpu-smi topo line {no}: row {name!r} is not one of the header columns {columns}")
        cells = tokens[1 : 1 + len(columns)]
        if len(cells) < len(columns):
            raise ValueError(f"xpu-smi topo line {no}: row {name} has {len(cells)} link cells for {len(columns)} columns")
        kinds = [c.upper() for c in cells]
        for col, kind in zip(columns, kinds, strict=True):
            if not _KIND.match(kind):
                raise ValueError(f"xpu-smi topo line {no}: unknown link kind {kind!r} between {name} and {col}")
        if kinds[columns.index(name)] != "X":
            raise ValueError(f"xpu-smi topo line {no}: row {name} does not link to itself as X")
        links[name] = dict(zip(columns, kinds, strict=True))
        rest = tokens[1 + len(columns) :]
        if len(rest) > len(titles):
            raise ValueError(f"xpu-smi topo line {no}: row {name} has {len(rest)} values after the links for titles {titles}")
        by_title = dict(zip(titles, rest, strict=False))
        cpu[name] = _values(by_title["CPU Affinity"], f"line {no} CPU Affinity") if "CPU Affinity" in by_title else None
        numa[name] = _values(by_title["NUMA Affinity"], f"line {no} NUMA Affinity") if "NUMA Affinity" in by_title else None
    if not columns:
        raise ValueError("xpu-smi topo: no matrix header (a line starting with XPU0 or GPU0) in the text")
    devices = tuple(c for c in columns if _DEVICE.match(c))
    missing = [d for d in devices if d not in links]
    if missing:
        raise ValueError(f"xpu-smi topo: no row for {', '.join(missing)}")
    return TopoMatrix(tuple(columns), devices, links, cpu, numa, nic_names, legend)


def _header(line: str, no: int) -> tuple[list[str], list[str]]:
    """Column names, then the affinity titles (which contain spaces, so they are matched whole)."""
    first = _TITLES.search(line)
    names = (line[: first.start()] if first else line).split()
    tail = line[first.start() :] if first else ""
    titles = _TITLES.findall(tail)
    if _TITLES.sub("", tail).strip():
        raise ValueError(f"xpu-smi topo line {no}: unexpected header text {_TITLES.sub('', tail).strip()!r}")
    bad = [n for n in names if not _COLUMN.match(n)]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"xpu-smi topo line {no}: bad or repeated column names in header {names}")
    return names, titles


def to_topology(m: TopoMatrix, numa_nodes: tuple[NumaNode, ...] | None = None, origin: str = "xpu-smi topo -m") -> Topology:
    """A Topology from a parsed matrix. Endpoints that reach each other through PCIe switches
    only (PIX/PXB) share an uplink, directly or through a NIC both are PIX to. XL (XPU Link) hides
    the PCIe path between a pair; where no NIC tells, such a pair counts as separate uplinks and a
    note says so. xpu-smi does not report IDO: 'unknown'.
    NUMA nodes come from `numa_nodes` (e.g. sysfs_numa_nodes()) when given, else from the
    affinity columns, with memory unknown."""
    names = m.devices
    cols = list(m.columns)
    parent = list(range(len(cols)))  # union-find over every column, NICs included

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # Two XPUs each PIX to the same NIC hang below that one switch even when the matrix shows XL
    # between them, so NIC columns take part in the grouping.
    for row, cells in m.links.items():
        for col, kind in cells.items():
            if kind in SAME_UPLINK_KINDS:
                parent[root(cols.index(col))] = root(cols.index(row))
    hidden = any(root(cols.index(a)) != root(cols.index(b)) for a, b in m.pairs({"XL", "NV"}))
    vendor = 0x1D22 if names and names[0].startswith("XPU") else 0x10DE
    devices = []
    for name in names:
        numa = m.numa_affinity.get(name)
        me = root(cols.index(name))
        grouped = any(root(cols.index(o)) == me for o in names if o != name)
        devices.append(
            PciDevice(
                address=name,
                vendor=vendor,
                device=0,
                klass=0x120000,
                numa_node=numa[0] if numa and len(numa) == 1 else None,
                local_cpus=m.cpu_affinity.get(name) or (),
                upstream=(f"xpu-smi:uplink{me}",) if grouped else (),
                ido_request=None,
                ido_completion=None,
            )
        )
    if numa_nodes is None:
        ids = sorted({n for d in devices for n in (m.numa_affinity.get(d.address) or ())})
        numa_nodes = tuple(
            NumaNode(n, tuple(sorted({c for d in devices if d.numa_node == n for c in d.local_cpus})), 0, ()) for n in ids
        )
    notes = ["xpu-smi does not report PCIe IDO: ordering is unknown"]
    if hidden:
        notes.append("XL/NV links hide the PCIe path between some devices: uplink sharing there is unknown")
    devices_t = tuple(devices)
    return Topology("xpu-smi", tuple(numa_nodes), devices_t, group_by_uplink(devices_t), origin, {}, tuple(notes))

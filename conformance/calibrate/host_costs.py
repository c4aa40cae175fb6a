"""What `hicache calibrate` measures of the profile's host_costs on the node it runs on.

Translation: host buffers registered with the backend (hal.memory.host.allocate_host) at a few sizes,
on 4 KB pages and on THP; a fixed amount of H2D in PIECE-sized pieces at random offsets over the
whole region, so the copy walks many translation entries; seconds per byte fitted on million
entries (conformance.calibrate.slowdown_fit), and on THP alone the cost per registered GB that
is left (conformance.calibrate.registered_fit). On emu the copy is the CPU's, so this is the
host's own TLB cost; on a device backend, its copy path's.
NUMA: where the machine has more than one node with memory, the same transfer from memory bound
to the device's node and to each other node; the factor is remote / local bandwidth.
"""

from __future__ import annotations

import ctypes
import math
import os
import statistics

import numpy as np
import torch

from conformance.calibrate.probe import median_stderr, run_once
from conformance.calibrate.registered_fit import registered_fit
from conformance.calibrate.slowdown_fit import slowdown_fit
from hal.memory.budget import refuse_over
from hal.memory.host import allocate_host
from hal.memory.vm import HUGE_PAGE, PAGE
from hal.topology import sysfs_numa_nodes
from hal.transfer.plan import CopyGroup, Segments, TransferPlan

MIB = 1 << 20
TRANSLATION_SIZES = (64 * MIB, 256 * MIB, 1024 * MIB)  # registered regions (1 GiB: fits a 2-core CI box)
PIECE = 64 << 10  # one piece: 16 base pages or part of one huge page
MOVED = 64 * MIB  # bytes moved per timed transfer, whatever the region's size
NUMA_BYTES = 256 * MIB
SEED = 20  # the random offsets are the same on every run: the structure of a calibration is fixed
OUTLIER_MADS = 4.0
PAGE_KINDS = (("4k", False), ("thp", True))
_libc = ctypes.CDLL(None, use_errno=True)


def budget_check(option: str, sizes) -> None:
    """ValueError naming `option` when the two regions of the largest size (4 KB and THP, held
    together so their rounds alternate) and the device buffer do not fit this machine."""
    refuse_over(option, 2 * max(sizes) + MOVED, f"two host regions of {max(sizes) >> 20} MiB and "
                f"{MOVED >> 20} MiB of device buffer")


def entries(report: dict) -> int:
    """Translation entries of a buffer from what smaps says it is on: 2 MB pages, the rest 4 KB."""
    huge = min(report["huge_page_bytes"], report["mapped_bytes"])
    return huge // HUGE_PAGE + -(-(report["mapped_bytes"] - huge) // PAGE)


def _plan(host: torch.Tensor, device: torch.Tensor, offsets: np.ndarray) -> list[TransferPlan]:
    n = offsets.size
    segs = Segments(offsets.astype(np.int64), np.arange(n, dtype=np.int64) * PIECE, np.full(n, PIECE, np.int64))
    return [TransferPlan("translation", [CopyGroup(host, device, segs)])]


def steady_rounds(a: list[float], b: list[float], mads: float = OUTLIER_MADS) -> list[int]:
    """Rounds whose log ratio a/b is within `mads` scaled median absolute deviations of the
    median: a load spike that hit one timing of a round and not the other is left out."""
    r = np.log(np.asarray(a) / np.asarray(b))
    mad = 1.4826 * float(np.median(np.abs(r - np.median(r))))
    limit = mads * max(mad, 1e-3)  # a 0.1% floor: identical timings would make every round an outlier
    return [i for i, v in enumerate(r) if abs(v - np.median(r)) <= limit]


def _alternate(backend, plans: dict, rounds: int) -> dict[str, list[float]]:
    """Wall seconds of each plan, one of each per round (after a warm-up of each), so load on a
    shared host hits them alike."""
    stream = backend.new_stream()
    try:
        for p in plans.values():
            run_once(backend, stream, p)
        walls: dict[str, list[float]] = {k: [] for k in plans}
        for _ in range(rounds):
            for k, p in plans.items():
                walls[k].append(run_once(backend, stream, p)[0])
    finally:
        stream.close()
    return walls


def translation(backend, sizes=TRANSLATION_SIZES, rounds: int = 9, progress=None) -> dict:
    """Points (size, page kind, entries, seconds per byte) and the fit; {'error'} when the
    buffers cannot be made or registered here; ValueError naming translation_sizes when two
    regions of the largest size would not fit this machine."""
    budget_check("translation_sizes", sizes)  # before anything is allocated, as the command line does
    say = progress or (lambda _msg: None)
    rng = np.random.default_rng(SEED)
    device = backend.alloc_device((MOVED,), torch.uint8)
    n = MOVED // PIECE
    dropped = 0
    points, samples = [], {"mentries": [], "seconds_per_byte": [], "groups": []}
    thp = {"gb": [], "entries": [], "seconds_per_byte": []}  # the registered-size fit's points
    for size in sorted(sizes):
        say(f"translation entries: {size >> 20} MiB regions")
        offsets = rng.integers(0, size // PIECE, n) * PIECE
        buffers = {}
        try:
            for kind, huge in PAGE_KINDS:
                buffers[kind] = allocate_host(size, huge_pages=huge, backend=backend)
            walls = _alternate(backend, {k: _plan(b.tensor, device, offsets) for k, b in buffers.items()}, rounds)
            for kind, b in buffers.items():
                rep, w = b.report(), walls[kind]
                e = entries(rep)
                points.append({"bytes": size, "pages": kind, "entries": e,
                               "huge_page_coverage": rep["huge_page_coverage"], "median_s": statistics.median(w),
                               "best_s": min(w), "spread": (max(w) - min(w)) / statistics.median(w),
                               "seconds_per_byte": statistics.median(w) / MOVED})
            kept = steady_rounds(walls["4k"], walls["thp"])
            dropped += rounds - len(kept)
            for kind, b in buffers.items():
                e = entries(b.report())
                for i in kept:  # one group per round of one size: its two page kinds, back to back
                    samples["mentries"].append(e / 1e6)
                    samples["seconds_per_byte"].append(walls[kind][i] / MOVED)
                    samples["groups"].append(f"{size}:{i}")
                    if kind == "thp":
                        thp["gb"].append(size / 1e9)
                        thp["entries"].append(e)
                        thp["seconds_per_byte"].append(walls[kind][i] / MOVED)
        except (OSError, RuntimeError, ValueError) as e:  # what allocation and registration raise
            return {"error": f"{size >> 20} MiB regions: {e}", "points": points}
        finally:
            for b in buffers.values():
                b.close()
    fit = slowdown_fit(samples["mentries"], samples["seconds_per_byte"], samples["groups"])
    registered = registered_fit(thp["gb"], thp["entries"], thp["seconds_per_byte"], fit.get("value") or 0.0)
    return {"registered": registered, "points": points, "moved_bytes": MOVED, "piece_bytes": PIECE, "rounds": rounds,
            "dropped_rounds": dropped, "sizes": sorted(sizes), **fit}


def _memory_nodes() -> tuple[list[int], str]:
    """(nodes with memory, why there is nothing to compare: '' when there is)."""
    nodes = sysfs_numa_nodes()
    if len(nodes) == 1:
        return [nodes[0].id], "one NUMA node"
    with_memory = [n.id for n in nodes if n.memory_bytes > 0]
    return with_memory, "" if len(with_memory) > 1 else f"one NUMA node with memory (of {len(nodes)})"


def _this_cpu() -> int | None:
    try:
        cpu = _libc.sched_getcpu()
    except AttributeError:  # a libc without it
        return None
    return cpu if cpu >= 0 else None


def _local_node(backend) -> tuple[int | None, str]:
    """(node, how it was chosen): the device's node where the backend's topology is the real
    machine's; else the node of the CPU this thread runs on."""
    try:
        topo = backend.topology()
        if topo.source != "profile" and topo.devices and topo.devices[0].numa_node is not None:
            return topo.devices[0].numa_node, f"device 0's node ({topo.source})"
    except Exception:  # no topology from this backend: fall back to where this thread runs
        pass
    cpu = _this_cpu()
    for node in sysfs_numa_nodes():
        if cpu in node.cpus:
            return node.id, f"the node of CPU {cpu}, where calibrate runs"
    return None, "no node holds the CPU calibrate runs on"


def numa(backend, rounds: int = 9, nbytes: int = NUMA_BYTES) -> dict:
    """{'measured': False, 'why'} on one node; else per remote node the bandwidth ratio remote /
    local (median of per-round ratios of one contiguous H2D of `nbytes`), and their mean."""
    nodes, why = _memory_nodes()
    if why:
        return {"measured": False, "nodes": nodes, "why": why}
    local, how = _local_node(backend)
    if local not in nodes:
        return {"measured": False, "nodes": nodes, "why": f"the local node is unknown: {how}"}
    return {**compare_nodes(backend, local, [n for n in nodes if n != local], rounds, nbytes), "nodes": nodes,
            "local_how": how}


def compare_nodes(backend, local: int, remotes: list[int], rounds: int = 9, nbytes: int = NUMA_BYTES) -> dict:
    """The NUMA measurement between `local` and each of `remotes` (see numa), submitted from this
    thread pinned to `local`'s CPUs (the stream's thread, started here, inherits it); {'measured':
    False, 'why'} when memory cannot be bound to a node here."""
    cpus = set(next((n.cpus for n in sysfs_numa_nodes() if n.id == local), ())) & os.sched_getaffinity(0)
    before = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        return _compare(backend, local, remotes, rounds, nbytes)
    finally:
        os.sched_setaffinity(0, before)


def _compare(backend, local: int, remotes: list[int], rounds: int, nbytes: int) -> dict:
    device = backend.alloc_device((nbytes,), torch.uint8)
    one = Segments(np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, nbytes, np.int64))
    buffers, walls = {}, {}
    try:
        for i, node in enumerate((local, *remotes)):  # by position: a node may be compared with itself
            buffers[i] = allocate_host(nbytes, huge_pages=True, numa=("bind", [node]), backend=backend)
        plans = {i: [TransferPlan("numa", [CopyGroup(b.tensor, device, one)])] for i, b in buffers.items()}
        walls = _alternate(backend, plans, rounds)
    except (OSError, RuntimeError, ValueError) as e:
        return {"measured": False, "why": f"binding {nbytes >> 20} MiB to a node failed: {e}"}
    finally:
        for b in buffers.values():
            b.close()
    per_round = [[lt / rt for lt, rt in zip(walls[0], walls[i], strict=True)] for i in range(1, len(remotes) + 1)]
    ratios = [statistics.median(r) for r in per_round]
    ses = [median_stderr(r) for r in per_round]
    return {"measured": True, "local": local, "bytes": nbytes, "rounds": rounds,
            "local_gbps": nbytes / statistics.median(walls[0]) / 1e9,
            "remote": {str(n): {"gbps": nbytes / statistics.median(walls[i + 1]) / 1e9, "factor": ratios[i]}
                       for i, n in enumerate(remotes)},
            "factor": min(1.0, statistics.fmean(ratios)),
            # the mean's standard error from each node's median's (None when a node has too few rounds)
            "factor_stderr": None if None in ses else math.sqrt(sum(e * e for e in ses)) / len(ses)}

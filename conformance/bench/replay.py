"""`hicache bench replay`: wall time and tokens/s of a whole-trace replay, against SGLang's RadixCache.

Ours is `hicache_ref.sim.run.serial_replay.replay` over the whole trace, timed end to end.
The peer is SGLang's own RadixCache (`RadixCache.create_simulated`) from `--sglang-root`.
Both must report the same hit tokens, which cross-checks the two trees.
`--engine sglang` also times SGLang's whole HiCache stack (the sglang engine) on the same slice,
with a profile of where its time goes (conformance.bench.replay_engine).
The method: docs/architecture.md, "Design notes"; the figures: BENCHMARKS.md.
"""

from __future__ import annotations

import gc
import importlib.abc
import importlib.machinery
import statistics
import sys
import time
import types
import warnings
from array import array
from pathlib import Path

from conformance.bench.common import check_trace, emit, machine
from conformance.common import args as arg_types
from conformance.common.errors import EXIT_NOT_RUN
from conformance.common.spec_options import add_spec_options, spec_from_args
from hicache_ref.sim.run.serial_replay import frozen_heap, replay
from hicache_ref.sim.trace.reader import find_trace, read_trace, request_tokens
from hicache_ref.spec import CacheSpec

HELP = "whole-trace replay (no materialization): wall time and tokens/s, vs SGLang's RadixCache if given"
# Packages RadixCache's import chain pulls in but never runs on the match/insert path.
_SGLANG_STUBBED = ("sglang.kernels", "sglang.srt.configs", "sglang.srt.mem_cache.memory_pool",
                   "sglang.srt.mem_cache.allocator")


def add_arguments(p) -> None:
    p.add_argument("--trace", help="Mooncake JSONL trace, .jsonl or .jsonl.gz (default: the packaged "
                   "conversation_trace.jsonl.gz)")
    add_spec_options(p, "bench replay")  # --page-size, --write-policy, --host-layout as replay spells them
    p.add_argument("--limit", type=arg_types.count(1), help="only the first N requests")
    p.add_argument("--repeat", type=arg_types.positive, default=3, help="timed runs; medians are reported")
    p.add_argument("--sglang-root", help="directory holding an unpacked `sglang` Python package: run its "
                                         "RadixCache as the peer in the same run")
    p.add_argument("--peer-keys", default="array", help="token containers for the peer, comma-separated: "
                                                          "array (SGLang >= 0.5), list (older SGLang)")
    p.add_argument("--overhead-requests", type=arg_types.count(0), default=0,
                   help="also measure a materialized replay's per-page overhead beyond memcpy on the first N "
                        "requests (conformance.bench.replay_overhead; 0: skip)")
    p.add_argument("--file-l3-requests", type=arg_types.count(0), default=0,
                   help="also measure a materialized replay's file-L3 cost against plain file I/O of the same "
                        "objects on the first N requests (conformance.bench.replay_file_l3; 0: skip)")
    p.add_argument("--engine", choices=("reference", "sglang"), default="reference",
                   help="sglang: also time SGLang's own HiCache (its cache, controller and host pools on the HAL) "
                        "on the same slice, with a profile breakdown (needs the [sglang] extra)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def check(a) -> None:
    """Refused before it runs: a trace that is missing, not text or empty."""
    check_trace(a)


# -- the peer ----------------------------------------------------------------------------------

class _Inert:
    """Stands for anything from a module SGLang imports but RadixCache never uses here."""

    def __init__(self, *a, **k):
        pass

    def __init_subclass__(cls, **kw):
        pass

    def __call__(self, *a, **k):
        return _Inert()

    def __getattr__(self, name):
        return _Inert()

    def __getitem__(self, key):
        return _Inert()

    def __mro_entries__(self, bases):
        return (_InertBase,)

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __or__(self, other):
        return self

    __ror__ = __or__


class _InertBase:
    def __init_subclass__(cls, **kw):
        pass

    def __init__(self, *a, **k):
        pass


class _InertModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Inert()


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Inert modules for third-party packages not installed here and for _SGLANG_STUBBED."""

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if any(name == s or name.startswith(s + ".") for s in _SGLANG_STUBBED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if top == "sglang" or top in sys.stdlib_module_names:
            return None
        for finder in sys.meta_path:
            if finder is not self and getattr(finder, "find_spec", None):
                try:
                    if finder.find_spec(name, path, target) is not None:
                        return None
                except (ImportError, AttributeError, ValueError):
                    continue
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _InertModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def load_sglang_radix(root: str):
    """(RadixCache, RadixKey, MatchPrefixParams | None, InsertParams | None) from an unpacked SGLang."""
    if not (Path(root) / "sglang" / "srt" / "mem_cache" / "radix_cache.py").is_file():
        raise ValueError(f"--sglang-root: {root} has no sglang/srt/mem_cache/radix_cache.py")
    sys.path.insert(0, str(root))
    finder = _InertFinder()
    sys.meta_path.insert(0, finder)
    try:
        warnings.filterwarnings("ignore", module="requests")  # its version check of stand-ins
        from sglang.srt.mem_cache import radix_cache as rc  # noqa: PLC0415 - the peer is optional
        try:
            from sglang.srt.mem_cache.base_prefix_cache import InsertParams, MatchPrefixParams  # noqa: PLC0415
        except ImportError:  # older SGLang: match_prefix(key) / insert(key, value)
            InsertParams = MatchPrefixParams = None
    finally:
        sys.meta_path.remove(finder)
    return rc.RadixCache, rc.RadixKey, MatchPrefixParams, InsertParams


def run_peer(peer, requests, page_size: int, keys: str = "array") -> dict:
    """SGLang's RadixCache, match_prefix + insert timed. keys: "array" holds token ids in an
    array('q') as SGLang >= 0.5 schedulers do; "list" in a Python list, as older ones did."""
    import torch

    RadixCache, RadixKey, MatchPrefixParams, InsertParams = peer
    cache = RadixCache.create_simulated(page_size=page_size)
    timed, cpu, hits = 0.0, 0.0, 0
    for r in requests:
        tokens = request_tokens(r.hash_ids, r.input_length).astype("int64")
        ids = array("q", tokens.tobytes()) if keys == "array" else tokens.tolist()
        n = len(ids) // page_size * page_size
        value = torch.arange(n, dtype=torch.int64)
        c0, t0 = time.thread_time(), time.perf_counter()
        if MatchPrefixParams is not None:
            m = cache.match_prefix(MatchPrefixParams(key=RadixKey(ids)))
            cache.insert(InsertParams(key=RadixKey(ids[:n]), value=value))
            got = m.device_prefix_len if hasattr(m, "device_prefix_len") else len(m.device_indices)
        else:
            m = cache.match_prefix(key=RadixKey(ids))
            cache.insert(RadixKey(ids[:n]), value)
            got = len(m.device_indices)
        timed += time.perf_counter() - t0
        cpu += time.thread_time() - c0  # CPU seconds: what a loaded machine distorts least
        hits += got
    return {"wall_seconds": timed, "cpu_seconds": cpu, "hit_tokens": hits}


def run_tree_only(requests, page_size: int) -> dict:
    """Our RadixTree alone, timed exactly like the peer: match_prefix + insert, nothing else."""
    import numpy as np

    from hicache_ref.core.radix import RadixTree

    tree = RadixTree(CacheSpec.of(page_size=page_size, write_policy="write_back"))
    timed, hits = 0.0, 0
    for r in requests:
        tokens = request_tokens(r.hash_ids, r.input_length)
        n = len(tokens) // page_size * page_size
        slots = np.arange(n, dtype=np.int64)  # no allocator: any page-aligned slots will do
        t0 = time.perf_counter()
        m = tree.match_prefix(tokens)
        tree.insert(tokens[:n], slots)
        timed += time.perf_counter() - t0
        hits += m.device_len
    return {"wall_seconds": timed, "hit_tokens": hits}


# -- the benchmark -------------------------------------------------------------------------------

def run(a) -> int:
    trace = a.trace if a.trace is not None else find_trace("conversation_trace.jsonl")
    if trace is None:
        raise ValueError("--trace: not given and no conversation_trace.jsonl found (neither in $HICACHE_TRACES "
                         "nor packaged: reinstall the package or pass --trace PATH)")
    if a.repeat < 1:
        raise ValueError(f"--repeat: must be at least 1, got {a.repeat}")
    requests = read_trace(trace, a.limit)
    if a.engine == "sglang":
        from hicache_ref.engines import not_run_reason

        t_import = time.perf_counter()  # the check imports SGLang: its import time, reported apart
        why = not_run_reason("sglang")
        import_seconds = time.perf_counter() - t_import
        if why is not None:
            print(f"hicache bench replay: NOT RUN: engine sglang: {why}", flush=True)
            return EXIT_NOT_RUN
    peer = load_sglang_radix(a.sglang_root) if a.sglang_root else None
    key_kinds = a.peer_keys.split(",")
    if not set(key_kinds) <= {"array", "list"}:
        raise ValueError(f"--peer-keys: expected array and/or list, got {a.peer_keys!r}")
    ours, tree_only, cpu = [], [], []
    theirs: dict[str, list[dict]] = {k: [] for k in key_kinds} if peer is not None else {}
    fig = None
    spec = spec_from_args(a, "bench replay", profile="emu")
    a.page_size, a.write_policy, a.host_layout = spec.page_size, spec.tiers.write_policy, spec.tiers.host_layout
    for _ in range(a.repeat):
        gc.collect()  # every run starts without the previous run's garbage (trees are cyclic)
        c0 = time.process_time()
        fig = replay(spec, requests)
        cpu.append(time.process_time() - c0)
        ours.append(fig["wall_seconds"])
        gc.collect()
        with frozen_heap():  # the same garbage-collection setting as the replay runs under
            tree_only.append(run_tree_only(requests, a.page_size))
        for kind in theirs:
            gc.collect()
            with frozen_heap():
                theirs[kind].append(run_peer(peer, requests, a.page_size, kind))
    tokens = fig["input_tokens"]
    med = statistics.median(ours)
    result = {
        "machine": machine(), "trace": str(trace), "requests": fig["requests"], "input_tokens": tokens,
        "config": {"page_size": a.page_size, "write_policy": a.write_policy, "host_layout": a.host_layout,
                   "capacity": "unlimited", "materialize": False, "repeat": a.repeat},
        "ours": {"wall_seconds": ours, "median_wall_seconds": med, "tokens_per_second": tokens / med,
                 "median_cpu_seconds": statistics.median(cpu), "hit_tokens": fig["l1_hit_tokens"] + fig["l2_hit_tokens"],
                 "d2h_transfers": fig["d2h_transfers"], "d2h_segments": fig["d2h_segments"]},
        "ours_tree_only": {"wall_seconds": [t["wall_seconds"] for t in tree_only],
                           "median_wall_seconds": statistics.median(t["wall_seconds"] for t in tree_only),
                           "hit_tokens": tree_only[0]["hit_tokens"]},
    }
    tmed = result["ours_tree_only"]["median_wall_seconds"]
    lines = [f"trace {trace}: {fig['requests']:,} requests, {tokens:,} input tokens, page {a.page_size}, unlimited",
             f"ours: median {med:.2f} s wall ({', '.join(f'{x:.2f}' for x in ours)}), "
             f"{tokens / med / 1e6:.1f} M tokens/s, cpu {statistics.median(cpu):.2f} s, "
             f"hit tokens {result['ours']['hit_tokens']:,}, {fig['d2h_transfers']:,} backups",
             f"ours, tree only (match_prefix + insert timed, as the peer): median {tmed:.2f} s, "
             f"{tokens / tmed / 1e6:.1f} M tokens/s"]
    rc = 0
    for kind, runs in theirs.items():
        pmed = statistics.median(t["wall_seconds"] for t in runs)
        pcpu = statistics.median(t["cpu_seconds"] for t in runs)
        ocpu = result["ours"]["median_cpu_seconds"]
        agree = runs[0]["hit_tokens"] == result["ours"]["hit_tokens"] == tree_only[0]["hit_tokens"]
        result[f"peer_{kind}_keys"] = {
            "name": f"sglang RadixCache, {kind} keys (match_prefix + insert only)", "root": a.sglang_root,
            "wall_seconds": [t["wall_seconds"] for t in runs], "median_wall_seconds": pmed,
            "tokens_per_second": tokens / pmed, "hit_tokens": runs[0]["hit_tokens"], "hit_tokens_agree": agree,
            "peer_over_ours": pmed / med, "peer_over_ours_tree_only": pmed / tmed,
            "cpu_seconds": [t["cpu_seconds"] for t in runs], "median_cpu_seconds": pcpu,
            "peer_over_ours_cpu": pcpu / ocpu if ocpu > 0 else None}
        lines.append(f"peer (SGLang RadixCache, {kind} keys): median {pmed:.2f} s, {tokens / pmed / 1e6:.1f} M tokens/s, "
                     f"hit tokens {runs[0]['hit_tokens']:,} ({'agree' if agree else 'DISAGREE'}); "
                     f"peer time / ours: whole replay {pmed / med:.2f}x, tree only {pmed / tmed:.2f}x; "
                     f"cpu {pcpu:.2f} s, peer cpu / ours (whole replay, both threads) {pcpu / max(ocpu, 1e-9):.2f}x")
        rc = rc or (0 if agree else 1)
    if a.overhead_requests:
        from conformance.bench import replay_overhead

        result["overhead"] = replay_overhead.measure(spec, requests[: a.overhead_requests])
        lines.append(replay_overhead.line(result["overhead"]))
    if a.file_l3_requests:
        from conformance.bench import replay_file_l3

        result["file_l3"] = replay_file_l3.measure(spec, requests[: a.file_l3_requests])
        lines.append(replay_file_l3.line(result["file_l3"]))
    if a.engine == "sglang":
        from conformance.bench import replay_engine

        up = replay_engine.time_sglang(spec, requests, a.repeat)
        up["import_seconds"] = import_seconds
        up["over_ours"] = up["median_wall_seconds"] / med
        up["hit_tokens_agree"] = up["hit_tokens"] == result["ours"]["hit_tokens"]
        result["sglang_engine"] = up
        lines += replay_engine.summary_lines(up, med, result["ours"]["hit_tokens"], tokens)
    if not theirs:
        lines.append("peer: not run (give --sglang-root DIR to time SGLang's RadixCache in this run; "
                     "BENCHMARKS.md 'hicache bench replay' records a same-run comparison with its command)")
    emit(result, a.json, lines)
    return rc

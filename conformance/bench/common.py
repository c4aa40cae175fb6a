"""Shared benchmark plumbing: medians, the machine's description, JSON or table output."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time


def median_seconds(fn, repeat: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine() -> dict:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import torch

    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "kernel": platform.release()}


def check_trace(a) -> None:
    """--trace (or the packaged conversation trace) is readable text holding a request; CliError
    naming --trace otherwise. A pipe, FIFO or `-` is read here, once: `a.trace` becomes its kept
    bytes, which every repeat reads again."""
    from conformance.common.errors import CliError, clip_path
    from conformance.common.inputs import trace_file
    from hicache_ref.sim.trace.reader import find_trace, read_trace

    given = a.trace if a.trace is not None else find_trace("conversation_trace.jsonl")
    if given is None:
        raise CliError("--trace", "not given and no conversation_trace.jsonl found (neither in $HICACHE_TRACES "
                                  "nor packaged)")
    trace = trace_file("--trace", given)
    if a.trace is not None:
        a.trace = trace
    try:
        empty = not read_trace(trace, 1)
    except UnicodeDecodeError as e:
        raise CliError("--trace", f"{clip_path(trace)}: not UTF-8 text (byte {e.start} of a line)") from None
    if empty:
        raise CliError("--trace", f"{clip_path(trace)}: holds no request; nothing to time")


def emit(result: dict, as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        m = result.get("machine", {})
        print(f"machine: {m.get('cpu')} ({m.get('cores')} cores), torch {m.get('torch')}")
        for line in lines:
            print(line)


def check_targets(profile_name: str, measured: dict[str, float]) -> tuple[list[dict], list[str]]:
    """Compare measured metrics with the profile's targets of the same metric name.

    Returns one record per target that was measured (with `ok`) and the lines to print;
    targets for metrics this benchmark does not measure are left out, not passed.
    """
    from hardware_profiles import load_profile

    profile = load_profile(profile_name)
    records, lines = [], [f"targets of profile {profile.name}:"]
    for t in profile.targets:
        if t.metric not in measured:
            continue
        value = measured[t.metric]
        ok = t.check(value)
        records.append({"name": t.name, "metric": t.metric, "measured": value, "comparator": t.comparator,
                        "value": t.value, "tolerance": t.tolerance, "unit": t.unit, "source": t.source, "ok": ok})
        shown = f"{value:,}" if isinstance(value, int) else f"{value:.4g}"  # counts stay whole numbers
        lines.append(f"  {'PASS' if ok else 'FAIL'} {t.name}: {shown} {t.unit}, target {t.describe()}")
    if not records:
        lines.append("  (none of its targets is measured here)")
    return records, lines

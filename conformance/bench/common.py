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


def emit(result: dict, as_json: bool, lines: list[str]) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        m = result.get("machine", {})
        print(f"machine: {m.get('cpu')} ({m.get('cores')} cores), torch {m.get('torch')}")
        for line in lines:
            print(line)

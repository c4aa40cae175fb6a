"""`hicache bench <what>`: benchmarks; each lives in conformance/bench/<what>.py."""

from __future__ import annotations

import importlib

NAME = "bench"
HELP = "run a benchmark (transfer, memory, replay) and print medians and ratios"
BENCHES = ("transfer", "memory", "replay")


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True)
    for name in BENCHES:
        try:
            mod = importlib.import_module(f"conformance.bench.{name}")
        except ModuleNotFoundError as e:  # a benchmark not built yet; tests assert all are present
            if e.name != f"conformance.bench.{name}":
                raise
            continue
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_bench_run=mod.run)


def run(args) -> int:
    return args._bench_run(args)

"""`hicache bench <what>`: benchmarks; each lives in conformance/bench/<what>.py with its options,
its `check` (bad options, files and sizes refused before it runs) and its `run`."""

from __future__ import annotations

import importlib

BENCHES = ("transfer", "memory", "replay", "sweep", "spmd", "l3", "l3_hits")
HELP = f"run a benchmark ({', '.join(BENCHES)}) and print medians and ratios"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True)
    for name in BENCHES:
        mod = importlib.import_module(f"conformance.bench.{name}")
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.add_argument("--quiet", action="store_true", help="no elapsed-time line on stderr (shown only on a terminal)")
        p.set_defaults(_bench_check=mod.check, _bench_run=mod.run)


def run(args) -> int:
    from conformance.common.progress import ticker
    args._bench_check(args)
    with ticker(f"hicache bench {args.bench}", args.quiet):
        return args._bench_run(args)

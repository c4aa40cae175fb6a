"""`hicache bench <what>`: benchmarks; each lives in conformance/bench/<what>.py, and is checked
first by conformance/cli/bench_checks.py (bad options, files and sizes refused before it runs)."""

from __future__ import annotations

BENCHES = ("transfer", "memory", "replay", "sweep", "spmd", "l3", "l3_hits")
HELP = f"run a benchmark ({', '.join(BENCHES)}) and print medians and ratios"


def add_arguments(parser) -> None:
    from conformance.cli.main import add_module_parsers

    sub = parser.add_subparsers(dest="bench", required=True)
    add_module_parsers(sub, "conformance.bench", BENCHES, "_bench_run")
    for name in BENCHES:
        sub.choices[name].add_argument("--quiet", action="store_true",
                                       help="no elapsed-time line on stderr (shown only on a terminal)")


def run(args) -> int:
    from conformance.cli.bench_checks import CHECKS
    from conformance.cli.progress import ticker

    CHECKS[args.bench](args)
    with ticker(f"hicache bench {args.bench}", args.quiet):
        return args._bench_run(args)

"""`hicache bench <what>`: benchmarks; each lives in conformance/bench/<what>.py, and is checked
first by conformance/cli/bench_checks.py (bad options, files and sizes refused before it runs)."""

from __future__ import annotations

HELP = "run a benchmark (transfer, memory, replay) and print medians and ratios"
BENCHES = ("transfer", "memory", "replay")


def add_arguments(parser) -> None:
    from conformance.cli.main import add_module_parsers

    add_module_parsers(parser.add_subparsers(dest="bench", required=True), "conformance.bench", BENCHES, "_bench_run")


def run(args) -> int:
    from conformance.cli.bench_checks import CHECKS

    CHECKS[args.bench](args)
    return args._bench_run(args)

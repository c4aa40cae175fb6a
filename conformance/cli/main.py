"""The `hicache` command: one thin subcommand per module in conformance/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines HELP, add_arguments(parser) and run(args) -> int (exit code).
COMMANDS = ("plan", "conform", "bench", "doctor", "replay")


def add_module_parsers(sub, package: str, names, run_key: str) -> None:
    """One subparser per module `package.<name>`, dispatching to its run(args) via `run_key`."""
    for name in names:
        mod = importlib.import_module(f"{package}.{name}")
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(**{run_key: mod.run})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hicache", description="HiCache test harness")
    sub = parser.add_subparsers(dest="command", required=True)
    add_module_parsers(sub, "conformance.cli", COMMANDS, "_run")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except (ValueError, FileNotFoundError) as e:
        print(f"hicache {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

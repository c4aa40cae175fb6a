"""The `hicache` command: one thin subcommand per module in conformance/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines NAME, HELP, add_arguments(parser) and run(args) -> int (exit code).
COMMANDS = ("plan", "conform", "bench", "doctor", "replay")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hicache", description="HiCache test harness")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"conformance.commands.{name}")
        except ModuleNotFoundError as e:  # a command not built yet; tests assert all are present
            if e.name != f"conformance.commands.{name}":
                raise
            continue
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
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

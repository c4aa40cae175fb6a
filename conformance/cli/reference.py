"""The CLI reference, docs/cli.md, written from the parsers: `python -m conformance.cli.reference > docs/cli.md`.

Every command and subcommand gets its usage and tables of its options (name, default, help), one
per help group (its own options, then one per spec node), after the table of one spelling and one default per concept. `DIFFERENCES` lists the options
that mean something else in one command, each with its reason; tests/cli/test_cli_reference.py
checks that docs/cli.md is current and that no other option differs between commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

REGENERATE = "python -m conformance.cli.reference > docs/cli.md"
WIDTH = 100  # usage lines wrap here, whatever the terminal that regenerates the file

# (concept, option, default): each concept has this one spelling and default in every command.
CONCEPTS = (
    ("host layout(s)", "--host-layout", "layer_first (a comma list where a benchmark times several)"),
    ("TP group size", "--tp", "1 / absent"),
    ("one host copy per TP group", "--shared-host", "off"),
    ("KV width (MLA latent; MHA head dim)", "--kv-dim", "576"),
    ("hardware profile that prices a model", "--profile", "p800"),
    ("write policy", "--write-policy", "write_through_selective"),
    ("page size (tokens)", "--page-size", "64"),
    ("trace", "--trace", "the packaged conversation trace"),
    ("request limit", "--limit", "all"),
    ("JSON on stdout / no progress line / output folder", "--json / --quiet / --out", ""),
    ("backend", "--backend", "emu"),
)

# option -> {command: why its default, type or choices differ there}. Only real differences.
DIFFERENCES: dict[str, dict[str, str]] = {
    "--host-layout": {
        "bench transfer": "times several layouts side by side: a comma list of the MLA layouts",
        "bench l3": "times several layouts side by side: a comma list",
    },
    "--tp": {
        "spmd": "a determinism check needs ranks to compare: 2 by default",
        "bench spmd": "compares shared and private host pools over 4 ranks (at least 2)",
    },
    "--profile": {
        "conform": "the profile of the machine under test: by default the backend's own (emu for emu)",
        "calibrate": "the base profile the measured one extends: by default the backend's own",
        "doctor": "optional: given, its topology is emulated; absent, this machine is checked as it is",
        "advise": "repeatable: several profiles are compared side by side on the same replays (default p800)",
    },
    "--limit": {"bench l3_hits": "the benchmark's fixed slice: the first 1500 requests"},
    "--ops": {"bench spmd": "timing needs a longer run than the check: 1000 ops"},
    "--repeat": {"*": "each benchmark's number of timed rounds, sized to its run time"},
    "--sizes": {"calibrate": "registration sizes the link fit needs, not bench memory's buffers"},
    "--storage": {"bench l3": "repeatable: every backend given is timed", "conform": "one L3 backend spec"},
    "--tokens": {"plan": "required: the transfer to plan", "bench transfer": "a fixed timed copy of 8192 tokens"},
    "--free-list": {"spmd": "the TP workload's allocator has fifo and lifo only"},
    "--out": {"trace synth": "required: the JSONL file it writes (elsewhere a result folder)",
              "trace convert": "required: the JSONL file it writes", "trace gsp": "required: the JSONL file it writes"},
    "--seed": {"trace gsp": "bench_serving's own default seed, 1, so its shape reads as upstream's arguments"},
    "--l1-tokens": {"sweep": "required: the L1 every tier is swept under"},
    "--l2-tokens": {"sweep": "required: the comma list of L2 tiers swept"},
}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(`hicache sub ...`, parser) for the top level and every command and subcommand, in order."""
    yield " ".join(("hicache", *path)), parser
    for name, sub in _subparsers(parser).items():
        yield from commands(sub, (*path, name))


def options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The parser's options (not positionals, subcommands, --help or --version)."""
    for a in parser._actions:
        if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
            yield a


def option_name(action: argparse.Action) -> str:
    """The name an option is known by: its longest spelling (`--exitfirst`, not `-x`)."""
    return max(action.option_strings, key=len)


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    default = getattr(action, "spec_default", action.default)  # a spec-made option: the spec's default
    if isinstance(action, argparse._StoreTrueAction):
        return "on" if default else "off"
    if isinstance(action, argparse._StoreFalseAction):
        return "off" if default is False else "on"
    if default is None or default == []:
        return ""
    return f"`{default}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(formatter: argparse.HelpFormatter, action: argparse.Action) -> str:
    """The option's help with %(default)s filled in, and its choices where it has some."""
    text = formatter._expand_help(action) if action.help else ""
    if action.choices:
        text = f"{text} (one of: {', '.join(map(str, action.choices))})".strip()
    return _cell(text)


def render(parser: argparse.ArgumentParser) -> str:
    """docs/cli.md's text for `parser` (the `hicache` parser with every subcommand)."""
    lines = ["# The `hicache` command", "",
             f"Generated from the parsers by `{REGENERATE}`; tests/cli/test_cli_reference.py checks it is current.",
             "", "## One spelling and one default per concept", "",
             "| concept | option | default |", "|---|---|---|"]
    lines += [f"| {c} | `{o}` | {d} |" for c, o, d in CONCEPTS]
    lines += ["", "Where an option's default or values differ between commands, and why:", "",
              "| option | command | why |", "|---|---|---|"]
    lines += [f"| `{o}` | {'every benchmark' if c == '*' else c} | {why} |"
              for o, by in DIFFERENCES.items() for c, why in by.items()]
    for name, p in commands(parser):
        p.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
        formatter = p._get_formatter()
        lines += ["", f"## {name}", ""]
        if p.description:
            lines += [_cell(p.description), ""]
        lines += ["```", p.format_usage().strip(), "```"]
        # one table per help group: the command's own options, then one per spec node
        shown = set(options(p))
        for group in p._action_groups:
            acts = [a for a in group._group_actions if a in shown]
            if not acts:
                continue
            if group.title not in ("options", "optional arguments"):
                lines += ["", f"*{group.title}*" + (f": {_cell(group.description)}" if group.description else "")]
            lines += ["", "| option | default | help |", "|---|---|---|",
                      *(f"| `{', '.join(a.option_strings)}` | {_cell(_default(a))} | {_help(formatter, a)} |"
                        for a in acts)]
    return "\n".join(lines) + "\n"


def main() -> int:
    from conformance.cli.main import build_parser

    os.environ["COLUMNS"] = str(WIDTH)  # argparse's own wrapping reads it
    sys.stdout.write(render(build_parser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

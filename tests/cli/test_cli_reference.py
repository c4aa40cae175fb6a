"""The CLI reference and the options behind it: docs/cli.md is what the parsers generate, an
option means the same in every command (same default, type, choices and action) unless
conformance.cli.reference.DIFFERENCES says why not, and no option is taken abbreviated."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from conformance.cli.main import build_parser, main
from conformance.cli.reference import DIFFERENCES, REGENERATE, commands, option_name, options, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

# (option, command) pairs allowed to differ from the concept's one default for now, each a known
# gap with its reason in a comment; empty: every option means the same in every command.
PENDING: set[tuple[str, str]] = set()


def test_docs_cli_md_is_what_the_parsers_generate(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert DOC.read_text(encoding="utf-8") == render(build_parser()), f"docs/cli.md is stale: run `{REGENERATE}`"


def _meaning(action) -> tuple:
    """What a user gets: the value when the option is left out (a spec-made option's is the spec's
    default; a switch's None is off), whether it is required, its choices, and its kind."""
    default = getattr(action, "spec_default", action.default)
    if type(action).__name__ == "_StoreTrueAction" and default is None:
        default = False
    return (repr(default), action.required, tuple(action.choices or ()), type(action).__name__)


def test_an_option_means_the_same_in_every_command():
    seen: dict[str, dict[str, tuple]] = defaultdict(dict)
    for name, parser in commands(build_parser()):
        for action in options(parser):
            seen[option_name(action)][name.removeprefix("hicache ")] = _meaning(action)
    clashes = []
    for option, by_command in seen.items():
        allowed = DIFFERENCES.get(option, {})
        ruled = {c: m for c, m in by_command.items()
                 if c not in allowed and "*" not in allowed and (option, c) not in PENDING}
        if len(set(ruled.values())) > 1:
            clashes.append(f"{option}: {ruled}")
    assert not clashes, "same option, different meaning (align them, or say why in DIFFERENCES):\n" + "\n".join(clashes)


def test_every_allowed_difference_names_a_command_that_has_the_option():
    names = {n.removeprefix("hicache "): {option_name(a) for a in options(p)} for n, p in commands(build_parser())}
    for option, by_command in DIFFERENCES.items():
        for command, why in by_command.items():
            assert why.strip(), (option, command)
            assert command == "*" or option in names.get(command, set()), f"{option} is not an option of {command}"


@pytest.mark.parametrize("argv,named", [
    (["replay", "--lim", "5"], "--lim"),
    (["plan", "--tokens", "64", "--host", "layer_first"], "--host"),
    (["bench", "transfer", "--rep", "1"], "--rep"),
])
def test_an_abbreviated_option_is_refused(capsys, argv, named):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("hicache: ") and named in err and err.count("\n") == 1


def test_every_parser_refuses_abbreviations():
    assert all(not p.allow_abbrev for _, p in commands(build_parser()))

"""A subcommand or benchmark module is listed: every module of conformance/cli (conformance/bench) with HELP, add_arguments and run is in COMMANDS (BENCHES), and every listed name is such a module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conformance.cli.bench import BENCHES
from conformance.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def command_modules(folder: Path) -> set[str]:
    """Modules of `folder` that define HELP, add_arguments and run at their top level."""
    found = set()
    for path in folder.glob("*.py"):
        names = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        if {"HELP", "add_arguments", "run"} <= names:
            found.add(path.stem)
    return found


@pytest.mark.parametrize(("folder", "listed", "where"), [
    ("conformance/cli", COMMANDS, "COMMANDS in conformance/cli/main.py"),
    ("conformance/bench", BENCHES, "BENCHES in conformance/cli/bench.py"),
])
def test_every_command_module_is_listed_and_every_listed_name_is_one(folder, listed, where):
    modules = command_modules(ROOT / folder)
    assert sorted(modules - set(listed)) == [], f"add these to {where}"
    assert sorted(set(listed) - modules) == [], f"{where} names modules without HELP, add_arguments and run"

"""`hicache --version` and `--help` import neither torch nor numpy nor the subcommand modules (bench
alone, whose HELP is computed and whose module imports nothing), and the lazily built parser says
exactly what the full one does: the same help, the same complaints."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main as cli

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
from conformance.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "numpy", "hal", "hicache_ref") if m in sys.modules)
subcommands = sorted(m for m in sys.modules if m.startswith("conformance.cli.") and m.split(".")[-1] in {cmds!r})
print(json.dumps({{"heavy": heavy, "subcommands": subcommands}}), file=sys.stderr)
"""


def _imported(*argv: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _PROBE.format(cmds=set(cli.COMMANDS)), *argv], capture_output=True,
                       text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    return json.loads(r.stderr.strip().splitlines()[-1])


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["-h"], []], ids=["version", "help", "h", "none"])
def test_version_and_help_import_no_subcommand_nor_torch(argv):
    assert _imported(*argv) == {"heavy": [], "subcommands": ["conformance.cli.bench"]}


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_subcommand_imports_only_its_own_module():
    got = _imported("backends", "--help")  # backends' own imports are light too
    assert got == {"heavy": [], "subcommands": ["conformance.cli.backends"]}


@pytest.mark.parametrize("name", cli.COMMANDS)
def test_help_read_from_source_is_the_modules_help(name):
    assert cli.command_help(name) == importlib.import_module(f"conformance.cli.{name}").HELP


def _said(capsys, argv) -> tuple[object, str, str]:
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:
        rc = ("exit", e.code)
    out, err = capsys.readouterr()
    return rc, out, err


def test_top_level_help_is_the_full_parsers(capsys):
    full = cli.build_parser()
    assert _said(capsys, ["--help"]) == (("exit", 0), full.format_help(), "")
    assert _said(capsys, ["-h", "replay"])[1] == full.format_help()  # -h first: the top level's help


@pytest.mark.parametrize("name", cli.COMMANDS)
def test_each_subcommands_help_is_the_full_parsers(capsys, name):
    full = next(a for a in cli.build_parser()._actions if isinstance(a, cli.argparse._SubParsersAction))
    assert _said(capsys, [name, "--help"]) == (("exit", 0), full.choices[name].format_help(), "")


@pytest.mark.parametrize("argv", [[], ["bogus"], ["--nope"], ["--nope", "replay"], ["--", "replay"],
                                  ["replay", "--bogus"], ["bench"]])
def test_complaints_read_as_with_the_full_parser(capsys, monkeypatch, argv):
    lazy = _said(capsys, argv)
    full_parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda argv=None: full_parser())
    assert lazy == _said(capsys, argv)
    assert lazy[0] == 2 and lazy[2].startswith("hicache: ") and lazy[2].count("\n") == 1

"""The arrows between the CLI and the tools: cli -> tools -> library, never back. The tools
(bench, doctor, calibrate, report) and conformance/common never import conformance.cli, and the
CLI never imports a test module; imports inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("conformance/bench", "conformance/doctor", "conformance/calibrate", "conformance/report",
         "conformance/common", "conformance/targets")


def imported(path: Path) -> set[str]:
    """Every module `path` imports, at module level or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


@pytest.mark.parametrize("folder", TOOLS)
def test_tools_never_import_the_cli(folder):
    bad = {str(p.relative_to(ROOT)): sorted(m for m in imported(p) if m == "conformance.cli"
                                            or m.startswith("conformance.cli."))
           for p in sorted((ROOT / folder).rglob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}


def test_the_cli_never_imports_a_test_module():
    bad = {str(p.relative_to(ROOT)): sorted(m for m in imported(p) if m.split(".")[-1].startswith("test_")
                                            or m.startswith("tests."))
           for p in sorted((ROOT / "conformance/cli").glob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}

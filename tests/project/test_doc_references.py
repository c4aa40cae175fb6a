"""Every path, module and test a doc names exists, so a newcomer who follows the docs finds what they name."""

from __future__ import annotations

import ast
import os
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# docs/cli.md is generated from the parsers (tests/cli/test_cli_reference.py checks it).
GENERATED = {"docs/cli.md"}
PACKAGES = ("hal", "hicache_ref", "conformance", "hardware_profiles", "tests")
# Names in code spans that look like repository paths but are not ours, each with what it is.
NOT_OURS = {
    "mem_cache/": "a file of SGLang's source tree (python/sglang/srt/)",
    "schedule_policy.py": "a file of SGLang's source tree (python/sglang/srt/managers/)",
    "python/sglang/": "SGLang's source tree",
    "xpu/runtime.h": "a header of the Kunlun runtime",
    "xre/so/": "a folder of the Kunlun runtime",
    "FAST25-release/": "a folder of the Mooncake traces' repository",
    "OUT/": "an output folder the command is given",
    "advice/": "the output folder of README's advise example",
    "conform/": "the output folder of the runbook's conform step",
    "StorageBackend.set/get": "two methods of StorageBackend",
    "GB/s": "a unit",
    "H2D/D2H": "both directions",
    "pin/map": "two host-memory calls",
}

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
HEADING = re.compile(r"^#+\s")
PATH = re.compile(r"^[\w.<>*-]+(/[\w.<>*-]*)+$")
MODULE = re.compile(rf"^({'|'.join(PACKAGES)})(\.\w+)+$")
# A bare file name is checked only for source files: a bare .yaml or .json is an output named by the user.
FILE = re.compile(r"^[\w-]+\.(py|c|h|sh)$")
TEST = re.compile(r"^(test_\w+)(\.py)?::(\w+)$")


def _skipped(part: str) -> bool:
    return part.startswith(".") or part in ("__pycache__", "build", "dist", "node_modules") or part.endswith(".egg-info")


@cache
def repo_paths() -> frozenset[str]:
    """Every file and folder of the checkout (hidden ones, virtual environments and build outputs
    left out, and not walked into), relative, '/'-separated."""
    out = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not (_skipped(d) or d.startswith("venv"))]
        rel = Path(folder).relative_to(ROOT)
        out |= {(rel / name).as_posix() for name in [*dirs, *files]}
    return frozenset(out)


def docs() -> list[str]:
    return sorted(p for p in repo_paths() if p.endswith(".md") and p not in GENERATED)


def _blocks(text: str):
    """(heading, block) pairs: each paragraph, list item or table row with the heading it sits under;
    a fenced block is one block."""
    heading, current = "", []
    lines = iter(text.splitlines())
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = [line]
            for inner in lines:
                fence.append(inner)
                if inner.strip().startswith("```"):
                    break
            yield heading, "\n".join(fence), True
            continue
        new_item = not stripped or HEADING.match(stripped) or stripped.startswith(("|", "- ", "* ")) \
            or re.match(r"^\d+\.\s", stripped)
        if new_item and current:
            yield heading, "\n".join(current), False
            current = []
        if HEADING.match(stripped):
            heading = stripped
        elif stripped:
            current.append(stripped)
            if stripped.startswith("|"):
                yield heading, stripped, False
                current = []
    if current:
        yield heading, "\n".join(current), False


def _clean(word: str) -> str:
    return re.sub(r"\(.*$", "", word.strip("(),;:'\"[]*")).rstrip(".,:;")


def _names(block: str, fenced: bool) -> list[str]:
    """The names a block gives: every word of a fenced block or a code span, and the rooted paths
    and modules of its prose."""
    if fenced:
        return [_clean(w) for w in block.split()]
    spans = [_clean(w) for span in SPAN.findall(block) for w in span.split()]
    prose = [_clean(w) for w in SPAN.sub(" ", block).split()]
    return spans + [w for w in prose if MODULE.match(w) or _rooted(w) and PATH.match(w)]


@cache
def _top_level() -> frozenset[str]:
    return frozenset(p.split("/")[0] for p in repo_paths())


def _rooted(name: str) -> bool:
    return "/" in name and name.split("/")[0] in _top_level()


def _context(doc: str, heading: str, block: str) -> list[str]:
    """Folders a relative name in `block` may be relative to: the root, the doc's folder, the
    folders (and their parents) of every rooted path the block or its heading names, and the
    folders it names relative to those."""
    bases = dict.fromkeys(["", Path(doc).parent.as_posix().strip(".")])
    names = _names(heading, False) + _names(block, False)
    for relative in (False, True):
        for name in names:
            if _rooted(name) == relative:
                continue
            folder = _folder_part(name)
            for base in list(bases) if relative else [""]:
                path = _join(base, folder)
                if relative and path not in repo_paths():
                    continue
                while path:
                    bases[path] = None
                    path = path.rpartition("/")[0]
    return [b for b in bases if b == "" or b in repo_paths()]


def _folder_part(name: str) -> str:
    """The folders of a path before any placeholder (`<name>`, `*`), and not its file."""
    parts = []
    for part in name.rstrip("/").split("/"):
        if "<" in part or "*" in part:
            return "/".join(parts)
        parts.append(part)
    if "." in parts[-1] and "/".join(parts) not in repo_paths() or "/".join(parts) in repo_paths() \
            and not (ROOT / "/".join(parts)).is_dir():
        parts.pop()
    return "/".join(parts)


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


@cache
def _defines(path: str) -> dict[str, set[str]]:
    """Top-level names a module defines, each with the names its class body defines (if a class)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    out: dict[str, set[str]] = {}
    for node in tree.body:
        members: set[str] = set()
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    members |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = members
        elif isinstance(node, ast.Assign):
            out.update({t.id: set() for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = set()
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update({(a.asname or a.name).split(".")[0]: set() for a in node.names})
    return out


def _attributes_missing(module_file: str, attrs: list[str]) -> str | None:
    """Why `attrs` (a name, then perhaps a member of it) is not in `module_file`; None when it is."""
    if not attrs:
        return None
    defined = _defines(module_file)
    if attrs[0] not in defined:
        return f"{module_file} defines no {attrs[0]}"
    members = defined[attrs[0]]
    if len(attrs) > 1 and members and attrs[1] not in members:
        return f"{module_file}: {attrs[0]} has no {attrs[1]}"
    return None


def _check_module(name: str) -> str | None:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        base = "/".join(parts[:i])
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in repo_paths():
                rest = parts[i:]
                if rest and candidate.endswith("__init__.py") and f"{base}/{rest[0]}" in repo_paths():
                    return f"no module {'.'.join(parts[:i + 1])}"
                missing = _attributes_missing(candidate, rest)
                if missing and candidate.endswith("__init__.py"):
                    return f"no module or name {'.'.join(parts[:i + 1])}"
                return missing
    return f"no module {name}"


def _check_path(name: str, bases: list[str]) -> str | None:
    """None when `name` (perhaps with a `<placeholder>` or a trailing `.attribute`) exists under one of `bases`."""
    plain = name.rstrip("/")
    if "<" in plain or "*" in plain:
        folder = _folder_part(plain)
        return None if any(_join(b, folder) in repo_paths() for b in bases if folder) else \
            f"no folder {folder!r} for {name}"
    if any(_join(b, plain) in repo_paths() for b in bases):
        return None
    folder, _, leaf = plain.rpartition("/")
    stem, dot, attr = leaf.partition(".")
    if dot and "." not in attr:
        module = _join(folder, stem) + ".py"
        for b in bases:
            if _join(b, module) in repo_paths():
                return _attributes_missing(_join(b, module), attr.split("."))
    return f"not found (looked under: {', '.join(b or '.' for b in bases)})"


def _check_test(name: str) -> str | None:
    m = TEST.match(name)
    files = [p for p in repo_paths() if p.endswith(f"/{m.group(1)}.py")]
    if not files:
        return f"no test file {m.group(1)}.py"
    return None if any(m.group(3) in _defines(f) for f in files) else f"{files[0]} has no {m.group(3)}"


def _imported_names(code: str) -> list[str]:
    """`pkg.mod.name` for each name a snippet imports from a module of ours (`from pkg.mod import
    name`) or reaches through one imported under an alias (`import pkg.mod as m; m.name`)."""
    found = [f"{m.group(1)}.{n.strip()}" for m in re.finditer(rf"from ((?:{'|'.join(PACKAGES)})[\w.]*) import ([\w, ]+)", code)
             for n in m.group(2).split(",") if n.strip()]
    for m in re.finditer(rf"import ((?:{'|'.join(PACKAGES)})[\w.]*) as (\w+)", code):
        found += [f"{m.group(1)}.{a}" for a in re.findall(rf"\b{m.group(2)}\.(\w+)", code[m.end():])]
    return found


def references() -> list[tuple[str, str, str | None]]:
    """(doc, name, why it is missing or None) for every path, module or test each doc names."""
    out = []
    for doc in docs():
        for heading, block, fenced in _blocks((ROOT / doc).read_text(encoding="utf-8")):
            for code in [block] if fenced else SPAN.findall(block):
                out += [(doc, name, _check_module(name)) for name in _imported_names(code)]
            bases = None
            for name in _names(block, fenced):
                if not name or any(name.startswith(p) for p in NOT_OURS):
                    continue
                if MODULE.match(name):
                    out.append((doc, name, _check_module(name)))
                elif TEST.match(name):
                    out.append((doc, name, _check_test(name)))
                elif name.startswith(("/", "..", "~")) or re.match(r"^[A-Z]+\b", name):
                    continue  # a path outside the checkout, or a placeholder (OUT, FILE.yaml)
                elif PATH.match(name) or FILE.match(name) and not fenced:
                    bases = bases or _context(doc, heading, block)
                    out.append((doc, name, _check_path(name, bases)))
    return out


def test_every_doc_is_scanned():
    assert {"README.md", "CONTRIBUTING.md", "docs/architecture.md", "hicache_ref/README.md",
            "hardware_profiles/README.md", "BENCHMARKS.md"} <= set(docs())


def test_the_scan_finds_a_missing_path_module_and_member():
    assert _check_path("hal/no_such_module.py", [""])
    assert _check_path("core/cache.py", ["", "hicache_ref"]) is None
    assert _check_module("hicache_ref.core.no_such")
    assert _check_module("hal.backend.Backend") is None
    assert _check_module("hal.backend.NoSuchName") == "hal/backend.py defines no NoSuchName"
    assert _imported_names("import hardware_profiles.profile as p; p.load_profile('x')") == \
        ["hardware_profiles.profile.load_profile"]
    assert _imported_names("from hal.backend import Backend, get_backend") == \
        ["hal.backend.Backend", "hal.backend.get_backend"]


@pytest.mark.parametrize("doc", docs())
def test_every_name_a_doc_gives_exists(doc):
    missing = sorted({f"`{name}`: {why}" for d, name, why in references() if d == doc and why})
    assert not missing, f"{doc} names what does not exist:\n  " + "\n  ".join(missing)


def _on_the_map() -> set[str]:
    """The folders docs/architecture.md names, each resolved as a newcomer would: from the root or
    beside the folder the same row or paragraph names."""
    doc, found = "docs/architecture.md", set()
    for heading, block, fenced in _blocks((ROOT / doc).read_text(encoding="utf-8")):
        bases = _context(doc, heading, block)
        for name in _names(block, fenced):
            found |= {_join(b, name.rstrip("/")) for b in bases if _join(b, name.rstrip("/")) in repo_paths()}
            if MODULE.match(name) or name in PACKAGES:
                found.add(name)
    return found


def test_every_package_is_on_the_map():
    """docs/architecture.md names every package folder, so a newcomer finds each concept from the map."""
    packages = sorted(p.rpartition("/")[0] for p in repo_paths()
                      if p.endswith("/__init__.py") and p.split("/")[0] in PACKAGES[:-1])
    on_map = _on_the_map()
    missing = [p for p in packages if p not in on_map and p.replace("/", ".") not in on_map]
    assert not missing, f"docs/architecture.md's packages table does not name: {missing}"


def cli_sections() -> dict[str, set[str]]:
    """{'hicache replay': its options, ...} from docs/cli.md, which the parsers generate."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^## (hicache(?: \w+)*)$", line):
            current = sections.setdefault(m.group(1), {"--help"})
        elif current is not None:
            current |= set(re.findall(r"(?<![\w-])--[a-z][\w-]*", line))
    return sections


def commands_named() -> list[tuple[str, str, str]]:
    """(doc, subcommand, the text naming it) for every `hicache ...` in a doc's code; what follows
    ` -- ` is pytest's."""
    sections, out = cli_sections(), []
    for doc in docs():
        text = (ROOT / doc).read_text(encoding="utf-8")
        code = SPAN.findall(FENCE.sub("", text)) + [line for f in FENCE.findall(text) for line in f.splitlines()]
        for chunk in code:
            for m in re.finditer(r"(?<![\w/-])hicache((?: [a-z]\w*)+)[^|;&]*", chunk):
                command = "hicache"
                for word in m.group(1).split():
                    if f"{command} {word}" not in sections:
                        break
                    command = f"{command} {word}"
                if command != "hicache":
                    out.append((doc, command, m.group(0).split(" -- ")[0]))
    return out


def test_every_option_a_doc_gives_a_command_is_one_of_its_options():
    sections = cli_sections()
    named = commands_named()
    assert len(named) > 50
    wrong = sorted({f"{doc}: `{text}`: {command} has no {o}" for doc, command, text in named
                    for o in re.findall(r"(?<![\w-])--[a-z][\w-]*", text) if o not in sections[command]})
    assert not wrong, "\n".join(wrong)


def test_every_module_a_doc_runs_with_python_m_is_runnable():
    named = {(doc, m) for doc in docs() for m in re.findall(
        rf"python -m ((?:{'|'.join(PACKAGES)})[\w.]*)", (ROOT / doc).read_text(encoding="utf-8"))}
    assert named
    path = {m: m.replace(".", "/") for _, m in named}
    not_runnable = sorted(f"{doc}: python -m {m}" for doc, m in named
                          if f"{path[m]}/__main__.py" not in repo_paths() and not (
                              f"{path[m]}.py" in repo_paths()
                              and '__name__ == "__main__"' in (ROOT / f"{path[m]}.py").read_text(encoding="utf-8")))
    assert not not_runnable, "no such runnable module: " + "; ".join(not_runnable)


def _code_prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module."""
    import io
    import tokenize

    source = path.read_text(encoding="utf-8")
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            out.append((node.body[0].lineno, node.body[0].value.value))
    return out


@pytest.mark.slow
def test_every_module_a_docstring_or_comment_names_exists():
    """Docstrings and comments of the packages name modules (and their names) that exist, so a
    reader can follow them; an example name is written with a placeholder (`conformance.test_<x>`)."""
    missing = []
    for top in PACKAGES[:-1]:
        for path in sorted((ROOT / top).rglob("*.py")):
            for line, text in _code_prose(path):
                for word in re.findall(r"[\w.]+(?![\w.<])", text):  # not one that a placeholder ends
                    name = word.rstrip(".")
                    if MODULE.match(name) and (why := _check_module(name)):
                        missing.append(f"{path.relative_to(ROOT)}:{line}: {name}: {why}")
    assert not missing, "\n".join(missing)

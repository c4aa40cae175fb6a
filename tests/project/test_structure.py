"""The package shape: no import cycle between modules or between packages (lazy and TYPE_CHECKING
imports count), the layers import downward only, no forwarding-only methods, no runaway module,
and every subpackage says what lives in it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hal", "hicache_ref", "conformance", "hardware_profiles")
# Modules split by concept, not by a line count: this bound only catches a module that grew a
# second concept unnoticed.
MAX_LINES = 800

# Package edges (importer -> imported) allowed to close a cycle: none.
KNOWN_CYCLES: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules `name` imports anywhere in its body (lazy and TYPE_CHECKING imports count:
    a cycle hidden in a function is still two modules that cannot be understood apart)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` imports the submodule when there is one, else a name of pkg
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _package_of(name: str, modules: dict[str, Path]) -> str:
    """The package (directory) a module belongs to; a package's __init__ is the package itself."""
    return name if modules[name].name == "__init__.py" else name.rpartition(".")[0]


def _package_graph(depth: int | None = None) -> dict[str, set[str]]:
    """Package -> packages it imports (from any of its modules), KNOWN_CYCLES left out; `depth`
    cuts names to that many parts (1: the top-level packages)."""
    modules = _modules()

    def cut(name: str) -> str:
        return ".".join(name.split(".")[:depth]) if depth else name

    graph: dict[str, set[str]] = {}
    for name, deps in _graph().items():
        a = _package_of(name, modules)
        graph.setdefault(cut(a), set())
        for d in deps:
            b = _package_of(d, modules)
            if b != a and (a, b) not in KNOWN_CYCLES and cut(b) != cut(a):
                graph[cut(a)].add(cut(b))
                graph.setdefault(cut(b), set())
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
    return comps


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.slow
def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "modules importing each other (directly or around a loop): " + "; ".join(
        " <-> ".join(c) for c in cycles)


@pytest.mark.slow
def test_no_cycles_between_packages():
    """Packages (directories) import each other one way only, function-level imports included."""
    cycles = _cycles(_package_graph())
    assert not cycles, "packages importing each other: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.slow
def test_no_cycles_between_top_level_packages():
    cycles = _cycles(_package_graph(depth=1))
    assert not cycles, "top-level packages importing each other: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.slow
def test_known_cycles_are_still_there():
    """An edge of KNOWN_CYCLES that is gone must leave the list, so it cannot come back unseen."""
    modules = _modules()
    edges = {(_package_of(m, modules), _package_of(d, modules)) for m, deps in _graph().items() for d in deps}
    assert KNOWN_CYCLES <= edges, f"gone, remove from KNOWN_CYCLES: {sorted(KNOWN_CYCLES - edges)}"


# Layers, bottom up: hardware_profiles (data about machines, which hal's backends price with),
# hal, hicache_ref, conformance. Within hicache_ref the core knows nothing of the simulator that drives it.
FORBIDDEN = {
    "hardware_profiles": ("hal", "hicache_ref", "conformance"),
    "hal": ("hicache_ref", "conformance"),
    "hicache_ref": ("conformance",),
    "hicache_ref.core": ("hicache_ref.sim",),
}


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.slow
def test_packages_do_not_import_upward():
    """Every import, lazy ones included, goes down the layers of FORBIDDEN."""
    bad = [(m, t) for m, deps in _graph().items() for t in deps
           for src, banned in FORBIDDEN.items() if _under(m, src) and any(_under(t, b) for b in banned)]
    assert not bad, bad


def test_layering_check_sees_a_lazy_import(tmp_path):
    """The import scan reads function bodies and TYPE_CHECKING blocks, not only module level."""
    path = tmp_path / "m.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import hal.a\n"
                    "def f():\n    from hicache_ref import b\n")
    modules = {"x.m": path, "hal.a": path, "hicache_ref.b": path}
    assert _imports("x.m", path, modules) == {"hal.a", "hicache_ref.b"}


def test_no_module_runs_away():
    """A loose bound, not a style rule: modules are split by concept, never to fit a count."""
    long = {n: lines for n, p in _modules().items()
            if (lines := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"past {MAX_LINES} lines, look for a second concept: {long}"


@pytest.mark.parametrize("name", sorted(n for n, p in _modules().items() if p.name == "__init__.py"))
def test_every_package_says_what_lives_in_it(name):
    doc = ast.get_docstring(ast.parse(_modules()[name].read_text(encoding="utf-8")))
    assert doc and len(doc) > 30, f"{name}/__init__.py: add a docstring saying what lives in this package"


# Methods that only forward, each kept for the reason above it (module.Class.method).
KNOWN_FORWARDERS = {
    # the mapping protocol of a checked tensor set: callers iterate it as they would the dict it checked
    "hal.transfer.kvcheck.Checked.items",
    # hooks the inline worker overrides (InlineDirectionWorker runs the job instead of queueing it)
    "hicache_ref.core.direction_worker.DirectionWorker._new_stream",
    "hicache_ref.core.direction_worker.DirectionWorker.put",
    # the step loop's StepCache protocol (hicache_ref.sim.steps), one adapter per engine
    "hicache_ref.engines.sglang.served.UpstreamSteps.release",
    "hicache_ref.engines.sglang.served.UpstreamSteps.settle",
    "hicache_ref.sim.serving._ReferenceSteps.settle",
}


def _passes_own_args(fn: ast.FunctionDef, call: ast.Call) -> bool:
    """True when `call` passes exactly the parameters of `fn` (but self), each under its own name."""
    a = fn.args
    want = {x.arg for x in [*a.posonlyargs, *a.args][1:] + a.kwonlyargs}
    got: set[str] = set()
    for arg in call.args:
        if isinstance(arg, ast.Name):
            got.add(arg.id)
        elif isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name) and a.vararg \
                and arg.value.id == a.vararg.arg:
            got.add("*")
        else:
            return False
    for kw in call.keywords:
        if kw.arg is None and isinstance(kw.value, ast.Name) and a.kwarg and kw.value.id == a.kwarg.arg:
            got.add("**")
        elif kw.arg is not None and isinstance(kw.value, ast.Name) and kw.value.id == kw.arg:
            got.add(kw.arg)
        else:
            return False
    return got == want | ({"*"} if a.vararg else set()) | ({"**"} if a.kwarg else set())


def _forwards(fn) -> bool:
    """The body (past a docstring) is only `[return] self.<attr>.<name>(<fn's own args>)`."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    call = body[0].value
    if not isinstance(call, ast.Call):
        return False
    f = call.func
    return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute)
            and isinstance(f.value.value, ast.Name) and f.value.value.id == "self" and _passes_own_args(fn, call))


def _forwarders() -> set[str]:
    """Forwarding-only methods of every class; a method that implements one its base class declares
    (a contract's hook, an abstract method) is the contract's, not a forwarder."""
    classes: dict[str, ast.ClassDef] = {}
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in _modules().items()}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)

    def declared_above(cls: ast.ClassDef, method: str, seen: set[str]) -> bool:
        for base in cls.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
            parent = classes.get(name)
            if parent is None or name in seen:
                continue
            seen.add(name)
            if any(isinstance(f, ast.FunctionDef) and f.name == method for f in parent.body) \
                    or declared_above(parent, method, seen):
                return True
        return False

    found = set()
    for module, tree in trees.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and _forwards(fn) \
                        and not declared_above(cls, fn.name, {cls.name}):
                    found.add(f"{module}.{cls.name}.{fn.name}")
    return found


def test_forwarder_finder_finds_one():
    tree = ast.parse("class A:\n    def f(self, x, *, y):\n        'doc'\n        return self.b.f(x, y=y)\n"
                     "    def g(self, x):\n        self.b.g(x + 1)\n")
    f, g = tree.body[0].body
    assert _forwards(f) and not _forwards(g)


@pytest.mark.slow
def test_no_forwarding_only_methods():
    """A method that only passes its arguments on to another object's method is a split that left a
    seam: callers should reach the object that does the work (or the work should live here)."""
    found = _forwarders()
    assert found <= KNOWN_FORWARDERS, f"forwarding-only methods: {sorted(found - KNOWN_FORWARDERS)}"
    assert KNOWN_FORWARDERS <= found, f"gone, remove from KNOWN_FORWARDERS: {sorted(KNOWN_FORWARDERS - found)}"

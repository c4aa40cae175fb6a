"""tests/ is arranged like the packages: every test file in the folder of the package it tests (a package itself, so test modules import as tests.<folder>.test_x), basenames unique, and every module of hicache_ref/core with a test file of its own or a named one that covers it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Test folders: the packages they test, by the package's own name, and `project` for the
# repository as a whole (docs, structure, golden figures, this layout).
FOLDERS = {"hal", "hardware_profiles", "core", "l3", "storage", "tp", "sim", "spec", "models", "advise", "engines",
           "cli", "conformance", "project"}
PACKAGES = ("hal", "hicache_ref", "conformance", "hardware_profiles")
# Core modules whose behaviour a test file named for another concept covers.
CORE_COVERED_BY = {
    "allocator": "test_allocator_orders.py",
    "block_tokens": "test_page_keys.py",
    "cache": "test_hicache_e2e.py",
    "controller_state": "test_controller.py",
    "direction_worker": "test_controller.py",
    "handles": "test_controller.py",
    "node": "test_radix.py",
    "synthetic_kv": "test_hicache_e2e.py",
}


def test_no_test_file_sits_directly_in_tests():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []


def test_every_test_folder_is_a_known_package_folder_and_a_package():
    folders = {p.parent for p in TESTS.glob("*/test_*.py")}
    assert {f.name for f in folders} <= FOLDERS, sorted({f.name for f in folders} - FOLDERS)
    assert [f.name for f in sorted(folders) if not (f / "__init__.py").is_file()] == []
    assert (TESTS / "__init__.py").is_file()


def test_every_test_folder_is_named_as_a_package():
    """A newcomer finds a package's tests under its name: every folder but `project` is a package's."""
    names = {p.parent.name for top in PACKAGES for p in (ROOT / top).rglob("__init__.py")}
    assert sorted(FOLDERS - {"project"} - names) == []


def test_test_file_basenames_are_unique():
    names = [p.name for p in TESTS.glob("*/test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_every_core_module_has_its_own_test_file_or_a_named_cover():
    have = {p.name for p in (TESTS / "core").glob("test_*.py")}
    modules = sorted(p.stem for p in (ROOT / "hicache_ref" / "core").glob("*.py") if p.stem != "__init__")
    missing = [m for m in modules if f"test_{m}.py" not in have and CORE_COVERED_BY.get(m) not in have]
    assert missing == [], f"add tests/core/test_<module>.py for {missing}"
    stale = sorted(set(CORE_COVERED_BY) - set(modules))
    assert stale == [], f"CORE_COVERED_BY names modules that no longer exist: {stale}"

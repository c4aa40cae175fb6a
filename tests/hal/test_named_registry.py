"""The registries by name: a file that names its class is a built-in, an installed entry point is found, a registered class wins."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hal.common.named_registry import Registry, modules_defining

ROOT = Path(__file__).resolve().parents[2]


def _package(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text('"""A package of plugins."""\n')
    for stem, text in files.items():
        (folder / f"{stem}.py").write_text(text)
    return folder


def test_a_module_naming_its_class_is_a_built_in_and_others_are_not(tmp_path, monkeypatch):
    folder = _package(tmp_path, "toyplugins", {
        "alpha": "class Alpha:\n    pass\n\n\nTHING = Alpha\n",
        "helpers": "THINGS = ()  # a longer name is not the constant\n",
        "base": "class Base:\n    THING = None  # indented: a class attribute, not the module's\n",
    })
    found = modules_defining("toyplugins", folder, "THING")
    assert found == {"alpha": "toyplugins.alpha:THING"}
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("thing", "hicache.test_things", found)
    assert registry.names() == ["alpha"]
    assert registry.get("alpha").__name__ == "Alpha"
    with pytest.raises(ValueError, match=r"^thing: unknown backend 'beta'; known: alpha$"):
        registry.get("beta")


def test_editor_files_and_unreadable_files_in_a_plugin_folder_are_no_plugins_and_stop_nothing(tmp_path):
    """Emacs's lock file `.#alpha.py` (a dangling link), a Latin-1 backup and a comparison stopped
    every hicache command at start ('No such file or directory', 'input is not UTF-8 text')."""
    folder = _package(tmp_path, "toyplugins", {"alpha": "THING = object\n", "beta": "THING == None\n"})
    (folder / ".#alpha.py").symlink_to("user@host.1234:1700000000")
    (folder / "alpha-old.py").write_text("THING = object\n")
    (folder / "gamma.py").write_bytes(b"# \xe9t\xe9\nTHING = object\n")
    assert modules_defining("toyplugins", folder, "THING") == {
        "alpha": "toyplugins.alpha:THING", "gamma": "toyplugins.gamma:THING"}


def test_a_lock_file_beside_the_engines_stops_no_command(tmp_path):
    """The real folders: a dangling `.#reference.py` beside the engines, in a copy of the package."""
    import shutil

    copy = tmp_path / "engines"
    shutil.copytree(ROOT / "hicache_ref" / "engines", copy)
    (copy / ".#reference.py").symlink_to("user@host.1234:1700000000")
    assert sorted(modules_defining("x", copy, "ENGINE")) == ["reference", "sglang"]


def test_an_installed_entry_point_is_found_and_a_registered_class_wins(tmp_path, monkeypatch):
    _package(tmp_path, "toyplugins2", {"gamma": "class Gamma:\n    pass\n"})
    dist = tmp_path / "toyplugins2-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplugins2\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[hicache.test_things2]\ngamma = toyplugins2.gamma:Gamma\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("thing", "hicache.test_things2", {})
    assert registry.names() == ["gamma"]
    assert registry.get("gamma") is sys.modules["toyplugins2.gamma"].Gamma

    class Replacement:
        pass

    registry.register("gamma", Replacement)
    assert registry.get("gamma") is Replacement


@pytest.mark.parametrize(("registry_names", "folder", "constant"), [
    ("hal.registry:available_backends", "hal/backends", "BACKEND"),
    ("hal.transfer.layout_registry:layout_names", "hal/transfer/layouts", "LAYOUT"),
    ("hicache_ref.storage.registry:available_storage", "hicache_ref/storage", "STORE"),
])
def test_the_built_ins_are_the_files_that_name_their_class(registry_names, folder, constant):
    """Adding a backend, a layout or a store is adding its file: the registry lists exactly the
    modules of its folder that assign the constant, and each constant is its module's class."""
    module, _, fn = registry_names.partition(":")
    files = sorted(p.stem for p in (ROOT / folder).glob("*.py")
                   if any(line.startswith(f"{constant} = ") for line in p.read_text(encoding="utf-8").splitlines()))
    # A fresh interpreter: other tests of this worker register classes of their own in-process.
    listed = subprocess.run([sys.executable, "-c", f"import {module} as m; print(' '.join(sorted(m.{fn}())))"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert files and listed == files

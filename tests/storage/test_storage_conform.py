"""`hicache conform --storage SPEC`: the storage suite through the CLI gives PASS on the shipped
backends, FAIL on a backend that breaks the contract, NOT RUN with the reason when the store is
unreachable, and one line naming --storage for a bad spec."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hicache_ref.storage import mooncake_cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LEAKY = '''
from hicache_ref.storage.memory import MemoryStorage
from hicache_ref.storage.registry import register


class LeakyExists(MemoryStorage):
    """Counts every present key instead of the leading run: wrong for a prefix."""
    name = "leaky"

    def _exists(self, keys):
        return sum(self._contains(k) for k in keys)


register("leaky", LeakyExists)
'''


def _conform(*args, env_extra=None, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *(env_extra or [])])}
    return subprocess.run([sys.executable, "-m", "conformance.cli.main", "conform", *args],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def _summary(out):
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow  # runs the command or pytest in a child process
def test_file_backend_passes(tmp_path):
    out = tmp_path / "out"
    r = _conform("--storage", f"file:{tmp_path / 'store'}", "--out", str(out), "-n", "0")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(out)
    assert s["verdict"] == "PASS" and s["totals"]["failed"] == 0
    mods = {m["module"]: m for m in s["modules"]}
    assert set(mods) == {"test_round_trip", "test_exists", "test_integrity", "test_concurrency", "test_restart"}
    assert mods["test_round_trip"]["passed"] == 51  # (4*4 MHA + 3*3 MLA) layout pairs x 2, + stats
    assert "PASS:" in r.stdout
    assert f"storage 'file:{tmp_path / 'store'}': bound max_bytes=" in r.stdout  # always bounded, shown
    assert "(default: half the free space at open)" in r.stdout
    # a team may point the suite at a store in use: it leaves none of its objects there
    assert not [p.name for p in (tmp_path / "store").iterdir() if p.name.startswith("hcconform-")]


@pytest.mark.slow  # runs the command or pytest in a child process
def test_mooncake_auto_passes(tmp_path):
    why = mooncake_cluster.unavailable_reason()
    if why:
        pytest.skip(f"mooncake: {why}")
    out = tmp_path / "out"
    r = _conform("--storage", "mooncake:auto,segment=64MiB,buffer=16MiB", "--out", str(out), "-n", "0")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(out)
    assert s["verdict"] == "PASS"
    restart = next(m for m in s["modules"] if m["module"] == "test_restart")
    assert restart["passed"] == 2  # the master restart ran, it was not skipped


@pytest.mark.slow  # runs the command or pytest in a child process
def test_contract_breaker_fails(tmp_path):
    (tmp_path / "leaky_storage.py").write_text(LEAKY)
    out = tmp_path / "out"
    r = _conform("--storage", "leaky:", "--backend-module", "leaky_storage", "--out", str(out), "-n", "0",
                 "-k", "test_exists", env_extra=[str(tmp_path)])
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(out)
    assert s["verdict"] == "FAIL" and any("test_leading_run" in f["test"] for f in s["failures"])


@pytest.mark.slow  # runs the command or pytest in a child process
def test_unreachable_store_is_not_run_with_the_reason(tmp_path):
    dead = mooncake_cluster.free_port()
    out = tmp_path / "out"
    r = _conform("--storage", f"mooncake:http://127.0.0.1:{dead}/metadata,127.0.0.1:{dead}", "--out", str(out),
                 "-n", "0")
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(out)
    assert s["verdict"] == "NOT RUN" and s["totals"]["passed"] == 0
    assert "is not available here" in s["not_run_reason"]
    assert ("nothing answers" in s["not_run_reason"]) or ("wheel" in s["not_run_reason"])


@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("spec,needle", [
    ("nosuch:x", "unknown backend 'nosuch'"),
    ("file:/tmp/x,max_bytes=lots", "max_bytes"),
    ("file", "expected NAME:ARGS"),
])
def test_bad_spec_is_one_line_naming_storage(tmp_path, spec, needle):
    out = tmp_path / "out"
    r = _conform("--storage", spec, "--out", str(out), timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hicache: --storage:") and needle in lines[0]
    assert not out.exists()  # refused before anything was written


def test_device_conform_leaves_the_storage_suite_out(tmp_path):
    import argparse

    from conformance.cli.conform import add_arguments, pytest_command

    p = argparse.ArgumentParser()
    add_arguments(p)
    cmd = pytest_command(p.parse_args(["-n", "0"]), None, tmp_path)
    assert cmd[cmd.index("--ignore-glob") + 1] == "*/conformance/suites/storage/*"


@pytest.mark.slow  # runs the command or pytest in a child process
def test_subset_of_the_deciding_storage_suites_is_partial_and_out_holds_only_reports(tmp_path):
    # -k leaves test_exists and test_integrity out: nothing failed, but a PASS would claim them.
    out = tmp_path / "out"
    r = _conform("--storage", "memory:", "--out", str(out), "-n", "0", "-k", "test_round_trip")
    assert r.returncode == 4, r.stdout[-3000:] + r.stderr[-3000:]
    s = _summary(out)
    assert s["verdict"] == "PARTIAL" and not s["ok"]
    assert "test_exists" in s["partial_reason"] and "test_integrity" in s["partial_reason"]
    assert sorted(p.name for p in out.iterdir()) == [".hicache-manifest.json", "junit.xml", "summary.json"]

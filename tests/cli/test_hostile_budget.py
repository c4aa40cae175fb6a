"""The memory budget honours the cgroup's limit (issue 41): inside a 5 GiB cgroup on a host with
far more free, a run is refused with one line, not ended by the OOM killer with exit 137; and a
HICACHE_MEMORY_BUDGET that is not a size is refused by every command."""

from __future__ import annotations

import pytest

from conformance.cli.main import main
from hal.memory import budget

GIB = 1 << 30


def tree(tmp_path, cgroup: str, files: dict[str, int | str]):
    (tmp_path / "cgroup").write_text(cgroup)
    root = tmp_path / "fs"
    for rel, value in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{value}\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: {64 * GIB // 1024} kB\nMemAvailable: {60 * GIB // 1024} kB\n")
    return dict(meminfo=str(meminfo), proc_cgroup=str(tmp_path / "cgroup"), root=str(root))


def test_a_v2_cgroup_limit_bounds_the_budget(tmp_path, monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    where = tree(tmp_path, "0::/job\n", {"job/memory.max": 5 * GIB, "job/memory.current": GIB})
    assert budget.available_bytes(**where) == int(4 * GIB * budget.USABLE_FRACTION)


def test_a_v1_cgroup_limit_and_a_tighter_ancestor_bound_the_budget(tmp_path, monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    where = tree(tmp_path, "4:memory:/a/b\n", {"memory/a/b/memory.limit_in_bytes": 8 * GIB,
                                               "memory/a/b/memory.usage_in_bytes": 0,
                                               "memory/a/memory.limit_in_bytes": 3 * GIB,
                                               "memory/a/memory.usage_in_bytes": GIB})
    assert budget.available_bytes(**where) == int(2 * GIB * budget.USABLE_FRACTION)


def test_no_limit_leaves_meminfo_to_say(tmp_path, monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    where = tree(tmp_path, "0::/job\n", {"job/memory.max": "max", "job/memory.current": GIB})
    assert budget.available_bytes(**where) == int(60 * GIB * budget.USABLE_FRACTION)


def test_the_refusal_inside_a_cgroup_names_the_option(monkeypatch):
    monkeypatch.delenv(budget.BUDGET_ENV, raising=False)
    monkeypatch.setattr(budget, "cgroup_room", lambda *a, **k: 5 * GIB)
    monkeypatch.setattr(budget, "_meminfo_available", lambda m: 60 * GIB)
    with pytest.raises(ValueError, match=r"^--l2-tokens: needs ~10.0 GiB .*cgroup"):
        budget.refuse_over("--l2-tokens", 10 * GIB, "the L2 pool")


@pytest.mark.parametrize("value", ["abc", "-1", "1e300"])
def test_a_budget_that_is_not_a_size_is_refused_by_a_command_that_needs_no_capacity(monkeypatch, capsys, value):
    monkeypatch.setenv(budget.BUDGET_ENV, value)
    assert main(["trace", "stats", "/dev/null"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: {budget.BUDGET_ENV}: "), err

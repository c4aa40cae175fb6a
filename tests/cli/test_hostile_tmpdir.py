"""$TMPDIR left as found (issue 41): a killed benchmark's scratch folder goes at the next run's start;
a live run's stays; the scratch parent is never a link or another user's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conformance.common import scratch
from conformance.common.errors import CliError


def test_a_killed_runs_scratch_goes_at_the_next_start_and_a_live_ones_stays(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    where = scratch.parent()
    (where / f"{dead}-bench-l3-abc").mkdir()
    (where / f"{dead}-bench-l3-abc" / "k.kv").write_bytes(b"x" * 1000)
    live = where / f"{os.getppid()}-bench-l3-def"
    live.mkdir()
    with scratch.directory("bench-l3-") as mine:
        assert os.path.isdir(mine) and os.path.basename(mine).startswith(f"{os.getpid()}-bench-l3-")
        assert sorted(p.name for p in where.iterdir()) == sorted([live.name, os.path.basename(mine)])
    assert [p.name for p in where.iterdir()] == [live.name]


def test_a_scratch_parent_that_is_a_link_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"hicache-scratch-{os.geteuid()}").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CliError, match="not a folder of this user's"):
        scratch.make_dir("bench-l3-")
    assert list((tmp_path / "elsewhere").iterdir()) == []

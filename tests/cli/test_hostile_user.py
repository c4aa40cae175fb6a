"""A hostile user's pass over replay, sweep, advise, ablate, calibrate, conform and trace (issue 41's
own pass on its fixes): each case one line naming the option or file, exit 2, before any run or write."""

from __future__ import annotations

import os

import pytest

from conformance.cli.main import main
from tests.mounts import mounted_tmpfs


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("args", [
    ["replay", "--out", ""], ["replay", "--out="], ["replay", "--trace", ""], ["replay", "--limit", ""],
    ["sweep", "--l1-tokens", "64K", "--l2-tokens", ""], ["advise", "--out", ""], ["calibrate", "--out", ""],
    ["conform", "--out", ""], ["trace", "synth", "--out", ""], ["trace", "stats", ""]])
def test_an_empty_value_is_refused_naming_its_option_and_nothing_is_written(tmp_path, monkeypatch, capsys, args):
    """`--out "$UNSET"` wrote replay.json into the current folder; `--trace ""` replayed the packaged trace."""
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    line = one_line(capsys)
    named = next((a.partition("=")[0] for a in args if a.startswith("--") and (a.endswith("=") or
                  args[args.index(a) + 1:args.index(a) + 2] == [""])), "path")
    assert line.startswith(f"hicache: {named}: an empty value (an unset shell variable?)"), line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args", [
    ["replay", "--limit", "5", "--out", "{ro}"], ["replay", "--limit", "5", "--out", "{ro}/new/deeper"],
    ["sweep", "--l1-tokens", "64K", "--l2-tokens", "1M", "--limit", "5", "--out", "{ro}"],
    ["advise", "--l1-tokens", "64K", "--limit", "5", "--out", "{ro}"], ["ablate", "--limit", "5", "--out", "{ro}"],
    ["calibrate", "--out", "{ro}/x.yaml"],
    ["trace", "synth", "--requests", "5", "--min-tokens", "10", "--max-tokens", "20", "--reuse", "0.5",
     "--out", "{ro}/t.jsonl"]])
def test_an_output_on_a_read_only_file_system_is_refused_before_the_run(tmp_path, capsys, args):
    """It was found only at the write, after the run (calibrate: after measuring), and named no option."""
    with mounted_tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        assert main([a.format(ro=ro) for a in args]) == 2
    line = one_line(capsys)
    assert line.startswith(f"hicache: --out: {ro}") and "cannot be written: the file system is read-only" in line, line


def test_advise_refuses_an_output_folder_that_is_a_link(tmp_path, capsys):
    """advise alone took --out through a link (its files would land where it points)."""
    (tmp_path / "victim").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "victim")
    assert main(["advise", "--l1-tokens", "64K", "--limit", "5", "--out", str(tmp_path / "link")]) == 2
    assert "is a symbolic link" in one_line(capsys)
    assert os.listdir(tmp_path / "victim") == []


L3_RUN = ["replay", "--limit", "3", "--materialize", "--l1-tokens", "4096", "--l2-tokens", "4096", "--layers", "1"]


@pytest.mark.parametrize("store", ["file:{tmp}/new-store,max_bytes=1", "memory:max_bytes=100"])
def test_an_l3_bound_below_a_page_is_refused_and_leaves_no_store_folder(tmp_path, capsys, store):
    """It ran, every write refused, exit 0 and no word (conform --storage refused it already)."""
    spec = store.format(tmp=tmp_path)
    assert main([*L3_RUN, "--l3", spec]) == 2
    line = one_line(capsys)
    assert line.startswith(f"hicache: --l3: {spec}: max_bytes=") and "cannot hold one page's object (73,728 bytes" \
        in line, line
    assert not (tmp_path / "new-store").exists()


def test_an_l3_folder_that_cannot_be_made_is_named_without_pythons_errno(tmp_path, capsys):
    with mounted_tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        assert main([*L3_RUN, "--l3", f"file:{ro}/store"]) == 2
    line = one_line(capsys)
    assert line.endswith(f"DIR: {ro}/store: Read-only file system") and "[Errno" not in line, line


NINES = "9" * 5000


@pytest.mark.parametrize(("args", "says"), [
    (["sweep", "--l1-tokens", "64K", "--l2-tokens", f"1M,{NINES}"], "--l2-tokens: at most 9,223,372,036,854,775,807"),
    (["replay", "--l2-tokens", "99999999999999999999TiB"], "--l2-tokens: at most 9,223,372,036,854,775,807"),
    (["replay", "--limit", NINES], "--limit: a 5,000-digit number is past any count here"),
    (["replay", "--concurrency", NINES], "--concurrency: at most 100,000, got a 5,000-digit number"),
    (["replay", "--hicache-ratio", NINES], "--hicache-ratio: past the largest number a float holds"),
    (["replay", "--concurrency", "2", "--step-ms", NINES], "--step-ms: past the largest number a float holds")])
def test_a_number_past_what_python_holds_is_named_with_its_option(capsys, args, says):
    """Sizes past 2**63 ended as `a value is out of range (int too large to convert to float)`, naming
    no option; 5,000 digits as `expected a whole number`; a float overflowing to inf as `must be positive`."""
    assert main(args) == 2
    line = one_line(capsys)
    assert line.startswith(f"hicache: {says}") and len(line) < 300, line

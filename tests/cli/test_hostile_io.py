"""Files a hostile or unlucky user hands the harness: links planted where it writes, folders it does
not own, full and read-only disks, pipes and FIFOs for traces, alias bombs for profiles. Each runs
the real thing (real links, FIFOs, tmpfs)."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time

import pytest

from conformance.cli.main import main
from conformance.cli.out_folder import LOCK_NAME, MANIFEST_NAME, RESULTS, WORK_NAME, claim_out, release_out
from conformance.common import safe_write
from conformance.common.errors import CliError
from tests.mounts import mounted_tmpfs


def line(i: int) -> str:
    return json.dumps({"timestamp": i, "input_length": 1024, "output_length": 4, "hash_ids": [0, i % 3]}) + "\n"


TRACE = "".join(line(i) for i in range(40))


def one_line_err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# ---- safe_write -------------------------------------------------------------------------------------

def test_a_write_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    safe_write.write_text(target, "new")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.json"]


def test_a_symlinked_target_is_refused_and_what_it_points_at_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "summary.json").symlink_to(victim)
    with pytest.raises(CliError, match="symbolic link"):
        safe_write.write_text(tmp_path / "summary.json", "attack")
    assert victim.read_text() == "precious"


def test_temporary_names_are_unguessable_and_a_planted_one_is_never_written_through(tmp_path):
    names = {safe_write.temp_name("summary.json") for _ in range(50)}
    assert len(names) == 50 and all(safe_write.is_temp_name(n, "summary.json") for n in names)
    assert not safe_write.is_temp_name(f".summary.json.{os.getpid()}.tmp")  # the old, guessable name
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for n in list(names)[:5]:  # even a guessed name is created O_EXCL: a link there fails the open
        (tmp_path / n).symlink_to(victim)
    safe_write.write_text(tmp_path / "summary.json", "ours")
    assert victim.read_text() == "precious" and (tmp_path / "summary.json").read_text() == "ours"


def test_an_interrupted_write_keeps_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / "trace.jsonl"
    target.write_text("previous\n")
    with pytest.raises(KeyboardInterrupt), safe_write.atomic_file(target) as f:
        f.write("half a tra")
        raise KeyboardInterrupt
    assert target.read_text() == "previous\n" and os.listdir(tmp_path) == ["trace.jsonl"]


def test_a_full_disk_is_one_error_naming_the_file_and_the_old_file_stays(tmp_path):
    with mounted_tmpfs(tmp_path / "small", "size=1M") as disk:
        target = disk / "sweep.json"
        target.write_text("previous")
        with pytest.raises(CliError) as info:
            safe_write.write_bytes(target, b"x" * (2 << 20))
        assert str(target) in str(info.value) and "no space left" in str(info.value)
        assert target.read_text() == "previous" and os.listdir(disk) == ["sweep.json"]


def test_a_read_only_disk_is_one_error_naming_the_file(tmp_path):
    with mounted_tmpfs(tmp_path / "ro", "size=1M,ro") as disk:
        with pytest.raises(CliError) as info:
            safe_write.write_text(disk / "x.json", "{}")
        assert str(disk / "x.json") in str(info.value) and "cannot be written" in str(info.value)


def test_a_lock_file_that_is_a_link_or_a_hard_link_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "soft").symlink_to(victim)
    os.link(victim, tmp_path / "hard")
    for name in ("soft", "hard"):
        with pytest.raises(CliError, match="lock file"):
            safe_write.open_lock(tmp_path / name)
    assert victim.read_text() == "precious"


# ---- conform's --out ----------------------------------------------------------------------------------

@pytest.mark.slow  # runs the command or pytest in a child process
def test_conform_refuses_a_lock_planted_as_a_link_and_leaves_the_victim(tmp_path, capsys):
    out, victim = tmp_path / "out", tmp_path / "victim"
    out.mkdir()
    victim.write_text("precious")
    (out / MANIFEST_NAME).write_text(json.dumps({"written": list(RESULTS)}))
    (out / LOCK_NAME).symlink_to(victim)
    assert main(["conform", "--backend", "emu", "--out", str(out), "-n", "0"]) == 2
    assert LOCK_NAME in one_line_err(capsys) and victim.read_text() == "precious"


@pytest.mark.slow  # runs the command or pytest in a child process
def test_a_users_own_targets_folder_is_refused_named_and_kept(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "targets").mkdir(parents=True)
    (out / "targets" / "mine.json").write_text("{}")
    (out / "junit.xml").write_text("<mine/>")
    assert main(["conform", "--out", str(out), "-n", "0"]) == 2
    err = one_line_err(capsys)
    assert err.startswith("hicache: --out: ") and "'junit.xml', 'targets'" in err
    assert (out / "targets" / "mine.json").read_text() == "{}" and (out / "junit.xml").read_text() == "<mine/>"


def test_claim_removes_only_what_the_manifest_names(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_NAME).write_text(json.dumps({"written": ["summary.json", WORK_NAME]}))
    (out / "summary.json").write_text("old")
    (out / WORK_NAME).mkdir()
    (out / "junit.xml").write_text("<not ours/>")  # not in the manifest: foreign
    with pytest.raises(CliError, match="junit.xml"):
        claim_out(out, True)
    assert (out / "summary.json").read_text() == "old" and not (out / LOCK_NAME).exists()
    (out / "junit.xml").unlink()
    fd = claim_out(out, True)
    try:
        assert sorted(os.listdir(out)) == [LOCK_NAME, MANIFEST_NAME]
        assert set(json.loads((out / MANIFEST_NAME).read_text())["written"]) == set(RESULTS) | {WORK_NAME}
    finally:
        release_out(out, fd)
    assert os.listdir(out) == [MANIFEST_NAME]


def test_a_manifest_that_is_a_link_counts_as_none(tmp_path):
    out, fake = tmp_path / "out", tmp_path / "fake.json"
    out.mkdir()
    fake.write_text(json.dumps({"written": ["precious.txt"]}))
    (out / MANIFEST_NAME).symlink_to(fake)
    (out / "precious.txt").write_text("keep")
    with pytest.raises(CliError, match="precious.txt"):
        claim_out(out, True)
    assert (out / "precious.txt").read_text() == "keep"


def test_a_cut_short_junit_is_one_line_naming_it_not_a_traceback(tmp_path):
    from conformance.cli.conform_args import take_junit

    made = tmp_path / "junit.xml"
    made.write_text('<testsuites><testsuite name="x"><testcase ')
    with pytest.raises(CliError, match="cut short"):
        take_junit(made, tmp_path / "out.xml")
    assert not (tmp_path / "out.xml").exists()
    assert take_junit(tmp_path / "none.xml", tmp_path / "out.xml") is None


# ---- conform's arguments ------------------------------------------------------------------------------

@pytest.mark.slow  # runs the command or pytest in a child process
@pytest.mark.parametrize("args, named", [
    (["-k", "(("], "-k: '((' is not a pytest -k expression"),
    (["--", "--junitxml=x.xml"], "--junitxml: conform sets it itself"),
    (["--", "--junit-xml", "x.xml"], "--junit-xml: conform sets it itself"),
    (["--", "-p", "no:junitxml"], "-p: conform needs the plugin junitxml"),
    (["--backend", "count"], "--backend: count moves no bytes"),
])
def test_conform_bad_input_is_exit_2_one_line_before_out_is_made(tmp_path, capsys, args, named):
    out = tmp_path / "out"
    assert main(["conform", "--out", str(out), *args]) == 2
    assert named in one_line_err(capsys) and not out.exists()


# 270 tests: a junit of ~37 KB and reports of ~200 KB, in under 20 s
SMALL_CONFORM = ["conform", "--backend", "emu", "--profile", "emu", "-n", "0", "-k",
                 "test_device_to_device_matches_reference"]


@pytest.mark.parametrize("size, filler, unwritten", [
    ("40K", 16 << 10, "junit.xml"),  # the child's junit does not fit: it says so, no traceback
    ("128K", 0, "report.json"),      # the junit fits, the report does not: safe_write's line
])
@pytest.mark.slow
def test_conform_on_a_full_disk_is_one_line_naming_the_file_and_exit_2(tmp_path, capfd, size, filler, unwritten):
    with mounted_tmpfs(tmp_path / "disk", f"size={size}") as disk:
        (disk / "filler").write_bytes(b"x" * filler)
        rc = main([*SMALL_CONFORM, "--out", str(disk / "out")])
        err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
        assert rc == 2, err
        assert len(err) == 1 and err[0].startswith("hicache: ") and unwritten in err[0], err
        assert "no space left" in err[0] and "Traceback" not in err[0]
        left = sorted(os.listdir(disk / "out"))  # no work folder, no temporary, no cut-short file
        assert all(not n.startswith(".hicache-conform") and ".tmp" not in n for n in left), left
        assert unwritten not in left


def test_conform_workers_past_the_cores_are_cut_to_the_cores(capsys):
    from conformance.cli.conform_args import bound_workers

    cores = os.cpu_count() or 1
    assert bound_workers("100000") == str(cores)
    assert f"more than the {cores} cores here; using {cores}" in one_line_err(capsys)
    assert bound_workers("1") == "1" and bound_workers("auto") == "auto"


@pytest.mark.slow  # runs the command or pytest in a child process
def test_conform_storage_too_small_for_a_page_is_bad_input(tmp_path, capsys):
    store = tmp_path / "kv"
    store.mkdir()
    assert main(["conform", "--storage", f"file:{store},max_bytes=1", "--out", str(tmp_path / "out")]) == 2
    assert "cannot hold one page" in one_line_err(capsys) and not (tmp_path / "out").exists()


@pytest.mark.slow  # runs the command or pytest in a child process
def test_conform_storage_on_a_read_only_folder_is_bad_input(tmp_path, capsys):
    with mounted_tmpfs(tmp_path / "ro", "size=1M,ro") as store:
        rc = main(["conform", "--storage", f"file:{store},max_bytes=1M", "--out", str(tmp_path / "out")])
    err = one_line_err(capsys)
    assert rc == 2 and err.startswith("hicache: --storage: ") and not (tmp_path / "out").exists()


# ---- traces read once -----------------------------------------------------------------------------------

def stats(capsys, path: str) -> dict:
    assert main(["trace", "stats", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    out.pop("trace")
    return out


def feed(path: str, data: bytes, delay: float = 0.0) -> threading.Thread:
    def write():
        time.sleep(delay)
        with open(path, "wb") as f:
            f.write(data)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def test_a_fifo_a_pipe_and_stdin_give_the_file_s_figures(tmp_path, capsys, monkeypatch):
    file = tmp_path / "t.jsonl"
    file.write_text(TRACE)
    want = stats(capsys, str(file))
    assert want["requests"] == 40
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t = feed(str(fifo), TRACE.encode())
    assert stats(capsys, str(fifo)) == want
    t.join()
    r, w = os.pipe()  # what `<(cat t.jsonl)` hands over: /dev/fd/N of a pipe
    t = feed(f"/dev/fd/{w}", TRACE.encode())
    t.join()
    os.close(w)
    try:
        assert stats(capsys, f"/dev/fd/{r}") == want
    finally:
        os.close(r)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(TRACE.encode())))
    assert stats(capsys, "-") == want


def bench_figures(capsys, name: str, path: str) -> dict:
    # exit 1 is a speed target missed on a loaded box (the JSON's "ok"): not what this test checks
    assert main(["bench", name, "--trace", path, "--limit", "20", "--repeat", "1", "--json"]) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    ours = out.get("ours", {})  # bench replay's own replay: what it hit and backed up
    return {k: v for k, v in {**out, **ours}.items() if k.startswith(("hit", "largest_tier", "d2h", "requests", "input"))}


@pytest.mark.parametrize("name", ["replay", "sweep"])
@pytest.mark.slow
def test_bench_reads_a_fifo_once_and_times_the_file_s_requests(tmp_path, capsys, name):
    file = tmp_path / "t.jsonl"
    file.write_text(TRACE)
    want = bench_figures(capsys, name, str(file))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t = feed(str(fifo), TRACE.encode())
    got = bench_figures(capsys, name, str(fifo))  # every repeat and the check read the kept bytes
    t.join()
    assert want and got == want


@pytest.mark.parametrize("name", ["replay", "sweep", "l3_hits"])
def test_bench_on_an_empty_stdin_is_refused_not_swapped_for_the_packaged_trace(capsys, monkeypatch, name):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(["bench", name, "--trace", "-"]) == 2
    assert "stdin (-): holds no request" in one_line_err(capsys)


@pytest.mark.slow
def test_a_fifo_with_no_writer_yet_says_it_waits(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t = feed(str(fifo), TRACE.encode(), delay=1.5)
    assert main(["trace", "stats", str(fifo), "--json"]) == 0
    t.join()
    captured = capsys.readouterr()
    assert json.loads(captured.out)["requests"] == 40 and "no writer yet; waiting" in captured.err


def test_a_bom_is_read_as_text(tmp_path, capsys):
    plain, bom = tmp_path / "plain.jsonl", tmp_path / "bom.jsonl"
    plain.write_text(TRACE)
    bom.write_bytes(b"\xef\xbb\xbf" + TRACE.encode())
    assert stats(capsys, str(bom)) == stats(capsys, str(plain))


def test_a_line_past_the_bound_is_refused_naming_the_file_and_line(tmp_path, capsys):
    from hicache_ref.sim.trace.reader import MAX_LINE_BYTES

    path = tmp_path / "huge.jsonl"
    with open(path, "w") as f:
        f.write(line(0))
        f.write('{"hash_ids": [' + "1," * (MAX_LINE_BYTES // 2) + "1]}\n")
    assert main(["trace", "stats", str(path)]) == 2
    err = one_line_err(capsys)
    assert str(path) in err and "line 2: longer than" in err


@pytest.mark.parametrize("command", [["trace", "stats", "{t}"], ["sweep", "--trace", "{t}", "--l1-tokens", "32K", "--l2-tokens", "64K"],
                                     ["ablate", "--trace", "{t}"]])
def test_an_empty_trace_is_named_as_such(tmp_path, capsys, command):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert main([w.replace("{t}", str(empty)) for w in command]) == 2
    err = one_line_err(capsys)
    assert f"{empty}: holds no request" in err and "--l2-tokens" not in err


def test_trace_synth_interrupted_leaves_the_previous_trace(tmp_path, monkeypatch):
    import conformance.cli.trace as trace_cli

    out = tmp_path / "t.jsonl"
    out.write_text(TRACE)

    def torn(f, requests, gz=False):
        f.write(b'{"timestamp": 0, "input_length": 1024')
        raise KeyboardInterrupt

    monkeypatch.setattr(trace_cli, "write_trace", torn)
    assert main(["trace", "synth", "--out", str(out), "--requests", "10", "--min-tokens", "1K", "--max-tokens",
                 "4K", "--reuse", "0.5"]) == 130
    assert out.read_text() == TRACE and os.listdir(tmp_path) == ["t.jsonl"]


def test_trace_synth_on_a_full_disk_is_one_line_and_no_partial_trace(tmp_path, capsys):
    with mounted_tmpfs(tmp_path / "small", "size=64K") as disk:
        out = disk / "t.jsonl"
        rc = main(["trace", "synth", "--out", str(out), "--requests", "2000", "--min-tokens", "8K",
                   "--max-tokens", "32K", "--reuse", "0.5"])
        err = one_line_err(capsys)
        assert rc == 2 and str(out) in err and "no space left" in err and os.listdir(disk) == []


@pytest.mark.parametrize("command, l2", [("sweep", "64K,128K"), ("ablate", "64K")])
@pytest.mark.slow
def test_sweep_out_on_a_full_disk_names_the_file_and_leaves_nothing_half_written(tmp_path, capsys, command, l2):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    with mounted_tmpfs(tmp_path / "small", "size=16K") as disk:
        (disk / "filler").write_bytes(b"x" * (12 << 10))
        rc = main([command, "--trace", str(trace), "--l1-tokens", "32K", "--l2-tokens", l2, "--out", str(disk), "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert rc == 2 and "cannot be written: no space left" in err and str(disk) in err
        # the JSON whole, or nothing
        assert sorted(os.listdir(disk)) in (["filler"], ["filler", f"{command}.json"])
        if (disk / f"{command}.json").exists():
            json.loads((disk / f"{command}.json").read_text())


# ---- profiles: one YAML reader, aliases refused ---------------------------------------------------------

def alias_bomb(depth: int = 9) -> str:
    rows = ["x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    rows += [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, depth)]
    return "schema: 1\nname: bomb\n" + "\n".join(rows) + f"\ndevice: *a{depth - 1}\n"


def test_an_alias_bomb_profile_is_refused_at_once_naming_the_alias(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    start = time.monotonic()
    assert main(["doctor", "--profile", str(path)]) == 2
    err = one_line_err(capsys)
    assert time.monotonic() - start < 30 and str(path) in err and "aliases are not read" in err and len(err) < 400


@pytest.mark.slow
def test_a_readings_file_goes_through_the_same_reader(tmp_path):
    from hardware_profiles.field_checks import ProfileError
    from hardware_profiles.measured_readings import build_readings

    with pytest.raises(ProfileError, match="aliases are not read"):
        build_readings(alias_bomb(4), tmp_path / "r.yaml")
    with pytest.raises(ProfileError) as info:
        build_readings("schema: [" + ", ".join(["x" * 1000] * 1000) + "]\n", tmp_path / "r.yaml")
    assert len(str(info.value)) < 400


def test_a_huge_bad_value_is_echoed_in_a_few_characters():
    from hardware_profiles.strict_yaml import shown

    nested: list = ["x" * 100]
    for _ in range(200):
        nested = [nested] * 10  # shared, as aliases would build it: its full repr would be astronomical
    assert len(shown(nested)) <= 80 and len(shown("y" * 10_000_000)) <= 80


# ---- option spelling, doctor ----------------------------------------------------------------------------

def test_no_parser_or_subparser_takes_an_abbreviation():
    import argparse

    from conformance.cli.main import build_parser

    def walk(p):
        assert p.allow_abbrev is False, p.prog
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(build_parser())


def test_trace_stats_refuses_an_abbreviated_option(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(TRACE)
    assert main(["trace", "stats", str(path), "--js"]) == 2
    assert "unrecognized arguments: --js" in one_line_err(capsys)


def test_doctor_names_an_unavailable_backend_and_why(capsys):
    from conformance.plugin import backend_status

    ok, why = backend_status("xpu")
    if ok:
        pytest.skip("xpu is available here: doctor checks it")
    assert main(["doctor", "--backend", "xpu"]) == 2
    err = one_line_err(capsys)
    assert err.startswith("hicache: --backend: xpu is not available here: ") and why[:40] in err


def test_trace_synth_refuses_an_out_that_is_a_link_before_the_work(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "t.jsonl").symlink_to(victim)
    assert main(["trace", "synth", "--out", str(tmp_path / "t.jsonl"), "--requests", "10", "--min-tokens", "1K",
                 "--max-tokens", "4K", "--reuse", "0.5"]) == 2
    assert "symbolic link" in one_line_err(capsys) and victim.read_text() == "precious"


@pytest.mark.slow
def test_a_plot_on_a_full_disk_leaves_no_partial_png(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    with mounted_tmpfs(tmp_path / "small", "size=4K") as disk:
        rc = main(["trace", "stats", str(trace), "--plot", str(disk / "t.png")])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert rc == 2 and f"{disk / 't.png'}: cannot be written: no space left" in err and os.listdir(disk) == []

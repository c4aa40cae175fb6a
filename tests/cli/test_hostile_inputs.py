"""Inputs without end or past any sense (issue 41): devices, endless pipes, corrupt gzip, duplicate
keys, numbers of thousands of digits, nesting thousands deep, millions of requests; each refused
with one line naming the file (and line or key), through the one bounded reader
(hardware_profiles.bounded) that traces and YAML files share."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.cli.main import main
from conformance.common.errors import CliError
from conformance.common.streamed import read_stream
from hardware_profiles import ProfileError, bounded, load_profile
from hicache_ref.sim.trace import reader as trace_mod
from hicache_ref.sim.trace.reader import read_trace

REPO = Path(__file__).resolve().parents[2]


def req(i: int) -> dict:
    return {"timestamp": i, "input_length": 1024, "output_length": 4, "hash_ids": [0, i % 3]}


def jsonl(n: int) -> str:
    return "".join(json.dumps(req(i)) + "\n" for i in range(n))


def one_line_err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_as_a_trace_is_refused_at_once_naming_it(capsys, device):
    t = time.monotonic()
    assert main(["trace", "stats", device]) == 2
    assert device in one_line_err(capsys) and time.monotonic() - t < 5


def test_an_endless_stream_is_cut_at_the_byte_cap_naming_it():
    endless = io.BytesIO(b"{}\n" * 400_000)  # 1.2 MB; the cap below is 1 MB
    with pytest.raises(CliError, match=r"trace: x\.jsonl: more than 1 MiB from a pipe"):
        bounded_stream(endless, cap=1 << 20)


def bounded_stream(raw, cap):
    from conformance.common.streamed import _text_only

    try:
        return bounded.read_capped(_text_only(raw.read, "--trace", "x.jsonl"), cap, "x.jsonl")
    except bounded.BoundError as e:
        raise CliError("--trace", str(e)) from None


@pytest.mark.slow
def test_yes_into_trace_stats_is_refused_within_seconds_with_one_line(tmp_path):
    t = time.monotonic()
    proc = subprocess.run(f"yes '{{}}' | {sys.executable} -m conformance.cli.main trace stats -", shell=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "more than 256 MiB" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and time.monotonic() - t < 60


def test_a_binary_fifo_is_refused_at_its_first_chunk(tmp_path):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    pid = os.fork()
    if pid == 0:  # a writer that would go on for 1 GB
        try:
            with open(fifo, "wb") as f:
                for _ in range(1024):
                    f.write(b"\x00" * (1 << 20))
        finally:
            os._exit(0)
    try:
        with pytest.raises(CliError, match="binary"):
            read_stream("--trace", fifo, str(fifo))
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_a_corrupt_stored_gzip_is_refused_even_with_a_limit(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    data = bytearray(gzip.compress(jsonl(200).encode(), compresslevel=0))  # stored: bytes as they are
    at = data.index(b'"input_length": 1024')
    data[at + len('"input_length": 1')] = ord("9")  # 1024 -> 1924: still a valid line
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"t\.jsonl\.gz: not a readable gzip file"):
        read_trace(path, limit=1)


def test_a_gzip_decompressing_past_the_cap_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n" * (2 << 20)))
    monkeypatch.setattr(bounded, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    with pytest.raises(ValueError, match=r"t\.jsonl\.gz: decompresses to more than 1 MiB"):
        bounded.check_gzip(path.open("rb"), str(path), bounded.MAX_DECOMPRESSED_BYTES)


def test_a_megabyte_gzip_of_newlines_is_refused_by_the_line_cap(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n" * (1 << 20)))
    monkeypatch.setattr(trace_mod, "MAX_LINES", 1000)
    with pytest.raises(ValueError, match=r"t\.jsonl\.gz: more than 1,000 lines"):
        read_trace(path)


def test_too_many_requests_are_refused_naming_the_file(tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.jsonl"
    path.write_text(jsonl(50))
    monkeypatch.setattr(trace_mod, "MAX_REQUESTS", 20)
    assert main(["trace", "stats", str(path)]) == 2
    err = one_line_err(capsys)
    assert "t.jsonl: more than 20 requests" in err and "--limit" in err
    assert len(read_trace(path, limit=20)) == 20  # --limit below the cap reads


@pytest.mark.parametrize("line,says", [
    ('{"timestamp": 1, "input_length": 512, "hash_ids": [1], "input_length": 512}', "input_length: appears twice"),
    ('{"timestamp": ' + "9" * 401 + ', "input_length": 512, "hash_ids": [1]}', "a number of 401 digits"),
    ('{"timestamp": 1, "input_length": ' + "5" * 5001 + ', "hash_ids": [1]}', "a number of 5,001 digits"),
    ("[" * 100_000, "nested deeper"),
    ('{"timestamp": 1.' + "0" * 300 + "1, " + '"input_length": 512, "hash_ids": [1]}', "digits"),
])
def test_pythons_own_errors_become_one_line_naming_file_and_line(tmp_path, capsys, line, says):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(req(0)) + "\n" + line + "\n")
    assert main(["trace", "stats", str(path)]) == 2
    err = one_line_err(capsys)
    assert f"{path}: line 2: " in err and says in err and "Traceback" not in err, err


@pytest.mark.parametrize("text,says", [
    ("schema: " + "[" * 100_000, "nesting at most"),
    ("schema: " + "9" * 5001, "a number of at most 100 characters"),
    ("a:\n" + "".join("  " * i + f"b{i}:\n" for i in range(1, 40)), "nesting at most"),
    ("schema: 1\nschema: 2\n", "each key once"),
])
@pytest.mark.slow
def test_a_yaml_profile_is_read_within_the_same_bounds(tmp_path, text, says):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=says):
        load_profile(path)


def test_a_yaml_profile_past_the_size_cap_or_not_a_file_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "p.yaml"
    path.write_text("# " + "x" * 3000 + "\n")
    monkeypatch.setattr("hardware_profiles.strict_yaml.MAX_YAML_BYTES", 1000)
    with pytest.raises(ProfileError, match="at most"):
        load_profile(path)
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    from hardware_profiles.strict_yaml import yaml_text

    with pytest.raises(ProfileError, match="not a regular file"):
        yaml_text(fifo)  # never blocks on a FIFO with no writer

"""hicache_ref.sim.trace.read_trace on files that are not Mooncake JSONL text: one ValueError naming
the file (and line), never a UnicodeDecodeError or a gzip error from deep inside."""

import gzip
import json
import warnings

import pytest

from hicache_ref.sim.trace import read_trace

LINE = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}) + "\n"


def test_a_binary_line_is_refused_naming_the_file_and_line(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(LINE.encode() + bytes(range(128, 256)) + b"\n" + LINE.encode())
    with pytest.raises(ValueError, match=rf"^{path}: line 2: not UTF-8 text \(byte 0 of the line\)"):
        read_trace(path)
    assert len(read_trace(path, limit=1)) == 1  # what comes before it still reads


def test_gzip_data_under_a_plain_name_says_so(tmp_path):
    path = tmp_path / "packed.jsonl"
    path.write_bytes(gzip.compress(LINE.encode() * 3))
    with pytest.raises(ValueError, match=rf"^{path}: line 1: not UTF-8 text .*name the file \.gz"):
        read_trace(path)


@pytest.mark.parametrize("data", [b"plain text, not gzip\n", gzip.compress(LINE.encode() * 50)[:40]],
                         ids=["not-gzip", "torn"])
def test_an_unreadable_gz_is_refused_naming_the_file(tmp_path, data):
    path = tmp_path / "trace.jsonl.gz"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=rf"^{path}: not a readable gzip file"):
        read_trace(path)


def test_a_huge_bad_value_is_echoed_clipped(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"input_length": 1, "hash_ids": ["x"] * 10_000}) + "\n")
    with pytest.raises(ValueError, match=r"^.*line 1: hash_ids: expected a list of integers, got \['x'") as info:
        read_trace(path)
    assert len(str(info.value)) < len(str(path)) + 200 and "characters)" in str(info.value)


def _trace(tmp_path, stamps, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 600, "hash_ids": [1, 2]}) + "\n"
                            if t is not None else "\n" for t in stamps))
    return path


@pytest.mark.parametrize("stamp, shown", [(-1, "-1"), (-0.5, "-0.5"), (float("nan"), "nan"),
                                          (float("inf"), "inf")])
def test_a_negative_or_non_finite_timestamp_is_refused_naming_file_line_and_key(tmp_path, stamp, shown):
    path = _trace(tmp_path, [0, 10, stamp])
    with pytest.raises(ValueError, match=rf"^{path}: line 3: timestamp: expected a finite non-negative number "
                                         rf"\(ms\), got {shown}$"):
        read_trace(path)


def test_out_of_order_timestamps_warn_in_file_order_and_are_refused_when_ordered(tmp_path):
    from hicache_ref.sim.trace import TraceOrderWarning

    # line 3 is blank: the line numbers are the file's, not the request's
    path = _trace(tmp_path, [0, 20, None, 10, 30, 5])
    with pytest.warns(TraceOrderWarning) as caught:
        reqs = read_trace(path)
    assert [r.timestamp for r in reqs] == [0, 20, 10, 30, 5]  # file order kept
    assert len(caught) == 1
    assert str(caught[0].message) == (f"{path}: 2 request(s) with a timestamp earlier than the line before "
                                      "(first: line 4 at 10 ms, after line 2 at 20 ms); requests are replayed "
                                      "in file order")
    with pytest.raises(ValueError, match=rf"^{path}: line 4: timestamp: expected at least 20 \(line 2's\)"):
        read_trace(path, ordered=True)
    assert len(read_trace(path, limit=2, ordered=True)) == 2  # the first two are in order
    equal = _trace(tmp_path, [5, 5, 7], "equal.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(read_trace(equal, ordered=True)) == 3  # equal timestamps are in order


def test_the_cli_warns_on_disorder_and_refuses_it_with_timestamps(tmp_path, capsys):
    from conformance.cli.main import main

    path = _trace(tmp_path, [0, 20, 10])
    assert main(["replay", "--trace", str(path), "--json", "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hicache: warning: {path}: 1 request(s) with a timestamp earlier than the line before "
                   "(first: line 3 at 10 ms, after line 2 at 20 ms); requests are replayed in file order"]
    assert main(["replay", "--trace", str(path), "--concurrency", "2", "--timestamps", "--json", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hicache: {path}: line 3: timestamp: expected at least 20")
    assert main(["replay", "--trace", str(path), "--concurrency", "2", "--json", "--quiet"]) == 0  # arrival order unused
    assert "warning" in capsys.readouterr().err

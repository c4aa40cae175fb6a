"""hicache_ref.trace.read_trace on files that are not Mooncake JSONL text: one ValueError naming
the file (and line), never a UnicodeDecodeError or a gzip error from deep inside."""

import gzip
import json

import pytest

from hicache_ref.trace import read_trace

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

"""A hostile pass on `hicache trace convert --from tokens` (docs/hostile-cases.md, round 4): a line
giving one prompt in two fields that disagree is refused naming the file, line and both keys."""

from __future__ import annotations

import json

import pytest

from hicache_ref.sim.trace.convert.token_ids import read_token_ids


def test_two_token_fields_that_disagree_are_refused(tmp_path):
    """token_ids [1, 2, 3] beside input_ids [4, 5]: the first in the reader's order was hashed silently."""
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"token_ids": [1, 2, 3], "input_ids": [4, 5], "output_length": 5}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: token_ids and input_ids hold different token ids"):
        read_token_ids(path)


def test_two_token_fields_that_agree_are_read(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"token_ids": [1, 2, 3], "prompt_token_ids": [1, 2, 3], "output_length": 5}) + "\n")
    (r,) = read_token_ids(path)
    assert r.input_length == 3


def test_a_trace_of_16_token_blocks_is_refused_with_the_command_that_reblocks_it(tmp_path):
    """`trace convert --out-block-tokens 16` writes what replay, trace stats and advise then refuse with
    'expected ceil(input_length / 512) = 6 ids, got 161 ids' and no word of how to read it."""
    from hicache_ref.sim.trace.reader import read_trace

    path = tmp_path / "b16.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 2576, "output_length": 1,
                                "hash_ids": list(range(161))}) + "\n")
    with pytest.raises(ValueError, match=r"a trace of 16-token blocks\? re-block it to 512: hicache trace convert "
                                         r"--from mooncake --block-tokens 16"):
        read_trace(path)


def test_a_count_no_block_size_explains_gets_no_hint(tmp_path):
    from hicache_ref.sim.trace.reader import read_trace

    path = tmp_path / "odd.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 1000, "output_length": 1,
                                "hash_ids": list(range(7))}) + "\n")
    with pytest.raises(ValueError) as e:
        read_trace(path)
    assert "re-block" not in str(e.value) and "got '7 ids'" in str(e.value)

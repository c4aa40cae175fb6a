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

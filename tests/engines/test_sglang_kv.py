"""hicache_ref.engines.sglang.kv without SGLang: the synthetic KV it writes into an upstream-shaped
pool (MLA's latent buffer, MHA's K and V) is the reference's, and its check finds a misplaced byte."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from hicache_ref.core.synthetic_kv import synthetic_kv
from hicache_ref.engines.sglang.kv import UpstreamKV


def _mla(slots=64, dim=72, layers=2):
    return SimpleNamespace(kv_buffer=[torch.zeros(slots, 1, dim, dtype=torch.bfloat16) for _ in range(layers)])


def _mha(slots=64, heads=2, dim=8, layers=2):
    return SimpleNamespace(k_buffer=[torch.zeros(slots, heads, dim, dtype=torch.float16) for _ in range(layers)],
                           v_buffer=[torch.zeros(slots, heads, dim, dtype=torch.float16) for _ in range(layers)])


def test_written_kv_is_the_references_bytes_and_checks_clean():
    pool = _mla()
    kv = UpstreamKV(pool)
    tokens, slots = np.array([5, 9, 11, 2]), np.array([17, 3, 40, 8])
    kv.write(tokens, 6, slots)
    row = pool.kv_buffer[1][40].view(torch.uint8).reshape(-1).numpy()
    assert np.array_equal(row, synthetic_kv(np.array([11]), np.array([8]), 0, 1, row.size)[0])
    prefix = np.array([7, 7, 7, 7, 7, 7, *tokens])  # the prefix the 4 tokens continue, at positions 6..9
    kv.write(prefix[:6], 0, np.array([0, 1, 2, 4, 5, 6]))
    assert kv.mismatches(prefix, np.array([0, 1, 2, 4, 5, 6, *slots])) == 0


def test_a_byte_out_of_place_in_any_part_or_layer_is_one_mismatched_token():
    pool = _mha()
    kv = UpstreamKV(pool)
    tokens, slots = np.arange(10, 16), np.arange(20, 26)
    kv.write(tokens, 0, slots)
    assert kv.mismatches(tokens, slots) == 0
    pool.v_buffer[1][22, 1, 3] += 1  # V of layer 1, token 2
    assert kv.mismatches(tokens, slots) == 1
    assert kv.mismatches(tokens, np.roll(slots, 1)) == len(tokens)  # every token read from another's slot

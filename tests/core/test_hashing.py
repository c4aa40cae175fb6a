"""Page hash chain: SHA-256 over prior digest and 4-byte little-endian token ids, hex and 64-bit keys."""

import hashlib
import struct

import numpy as np
import pytest

from hicache_ref.core.hashing import hash64, hash_hex, page_hashes


def reference_chain(tokens, page_size):
    """Written from the definition, token by token, to check the vectorized version."""
    out, prior = [], b""
    for p in range(len(tokens) // page_size):
        h = hashlib.sha256(prior)
        for t in tokens[p * page_size : (p + 1) * page_size]:
            h.update(struct.pack("<I", t))
        prior = h.digest()
        out.append(prior)
    return out


def test_matches_the_definition_and_ignores_a_partial_page():
    tokens = [0, 1, 2, 70000, 2**32 - 1, 5, 6, 7, 8, 9]
    got = page_hashes(tokens, 4)
    assert len(got) == 2 and all(len(h) == 32 for h in got)
    assert got == reference_chain(tokens, 4)
    assert page_hashes(np.array(tokens, dtype=np.int64), 4) == got == page_hashes(np.array(tokens, dtype=np.uint32), 4)


def test_prior_continues_the_chain():
    tokens = list(range(100, 124))
    whole = page_hashes(tokens, 4)
    assert page_hashes(tokens[8:], 4, prior=whole[1]) == whole[2:]


def test_hash_encodes_position():
    page = [9, 9, 9, 9]
    a = page_hashes(page + page, 4)
    assert a[0] != a[1]  # same tokens, different prefix


def test_hex_and_64_bit_key():
    h = page_hashes([1, 2, 3, 4], 4)[0]
    assert hash_hex(h) == h.hex() and len(hash_hex(h)) == 64
    assert hash64(h) == int(hash_hex(h)[:16], 16) == int.from_bytes(h[:8], "big")
    assert 0 <= hash64(h) < 2**64


@pytest.mark.parametrize("tokens,match", [([-1, 0], "tokens"), ([2**32, 0], "tokens"), ([[1, 2]], "tokens"),
                                          ([1.5, 2.0], "tokens")])
def test_bad_tokens(tokens, match):
    with pytest.raises(ValueError, match=match):
        page_hashes(tokens, 2)


def test_bad_page_size_and_prior():
    with pytest.raises(ValueError, match="page_size"):
        page_hashes([1, 2], 0)
    with pytest.raises(ValueError, match="prior"):
        page_hashes([1, 2], 2, prior=b"short")
    assert page_hashes([], 4) == []

"""hal.units.parse_size: K/M/G/T are powers of 1000, KiB/MiB/GiB/TiB powers of 1024, one reading for every CLI."""

from __future__ import annotations

import pytest

from hal.units import parse_size


@pytest.mark.parametrize(
    "text, n",
    [
        ("4096", 4096), (4096, 4096), ("0", 0), ("2_000_000", 2_000_000), (" 80G ", 80 * 10**9),
        ("80gb", 80 * 10**9), ("2k", 2000), ("2K", 2000), ("1.5T", 1500 * 10**9), ("1.5M", 1_500_000),
        ("75GiB", 75 << 30), ("4 MiB", 4 << 20), ("2kib", 2048), ("1TiB", 1 << 40), ("512B", 512),
    ],
)  # fmt: skip
def test_decimal_and_binary_units(text, n):
    assert parse_size(text, name="--x") == n


@pytest.mark.parametrize("text", ["", "G", "-1", "1.5", "1.0000001K", "12XB", "1e9", "1__0", "lots", None, 1.5, True])
def test_anything_else_raises_naming_the_argument(text):
    with pytest.raises(ValueError, match="^--x: "):
        parse_size(text, name="--x")


def test_minimum():
    assert parse_size("1", name="--x", minimum=1) == 1
    with pytest.raises(ValueError, match="^--x: must be positive"):
        parse_size("0", name="--x", minimum=1)


def test_every_cli_reads_sizes_the_same_way():
    from conformance.bench.memory import parse_sizes
    from conformance.doctor.checks import parse_bytes
    from hicache_ref.spec.fields import parse_tokens

    for text, n in [("1G", 10**9), ("1GiB", 1 << 30), ("3M", 3 * 10**6), ("64MiB", 64 << 20)]:
        assert parse_bytes(text) == parse_sizes(text)[0] == parse_tokens(text) == n, text


@pytest.mark.parametrize("text", ["-1", " -4K", "-0.5G", -1])
def test_a_negative_size_is_refused_as_negative(text):
    with pytest.raises(ValueError, match="^--x: a size must be non-negative, got "):
        parse_size(text, name="--x")

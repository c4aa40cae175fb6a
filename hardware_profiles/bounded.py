"""Bounded reading of what a user hands the harness: traces (JSON lines, gzip) and YAML files.

Every input is read within bounds fixed here, and a read past one is one ValueError naming the
file (and the line or key), never Python's own error: a size cap for a whole file read into memory,
a byte cap for a pipe, FIFO or stdin, a cap on what a gzip file decompresses to (checked, with its
CRC, before any of it is used), digit counts, nesting depth and duplicate keys. It sits in the
bottom package so that profiles (hardware_profiles), traces (hicache_ref.sim) and the command line
(conformance.common) read through the same primitives.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import zlib
from typing import Any

MAX_YAML_BYTES = 4 << 20  # a profile or readings file: tens of KB in practice
MAX_STREAM_BYTES = 256 << 20  # a pipe, FIFO or stdin, held in memory: a larger trace is read from a file
MAX_DECOMPRESSED_BYTES = 2 << 30  # what a .gz trace may hold once decompressed
MAX_REQUESTS = 1_000_000  # requests in one trace (the Mooncake traces hold tens of thousands)
MAX_LINES = 2 * MAX_REQUESTS  # lines, blank ones included
MAX_DIGITS = 40  # digits of one number in a trace line (ids fit 32 bits, times are ms)
MAX_SCALAR_CHARS = 100  # characters of one number in a YAML file
CHUNK = 1 << 20


class BoundError(ValueError):
    """An input past one of this module's bounds, or one Python cannot read; the message names it."""


def mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def read_regular(path, cap: int, what: str) -> bytes:
    """The whole of regular file `path`, at most `cap` bytes; BoundError naming it otherwise (a pipe,
    a device, or a file past the cap: /dev/zero would never end)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BoundError(f"{path}: is not a regular file (a pipe, a FIFO or a device); give a {what} file")
        if st.st_size > cap:
            raise BoundError(f"{path}: {st.st_size:,} bytes, more than a {what} may hold ({mib(cap)})")
        data = os.read(fd, cap + 1)
        while len(data) <= cap and (more := os.read(fd, cap + 1 - len(data))):
            data += more
    finally:
        os.close(fd)
    if len(data) > cap:
        raise BoundError(f"{path}: grew past what a {what} may hold ({mib(cap)}) while it was read")
    return data


def read_capped(read, cap: int, shown: str) -> bytes:
    """All that `read(n)` gives, at most `cap` bytes (a pipe or FIFO); BoundError naming `shown` past it."""
    parts, total = [], 0
    while chunk := read(CHUNK):
        total += len(chunk)
        if total > cap:
            raise BoundError(f"{shown}: more than {mib(cap)} from a pipe, FIFO or stdin (an endless stream?); "
                             "save it to a file and name the file")
        parts.append(chunk)
    return b"".join(parts)


def check_gzip(raw, shown: str, cap: int = MAX_DECOMPRESSED_BYTES) -> int:
    """Read gzip stream `raw` to its end: every member's CRC and length checked, at most `cap` bytes
    decompressed; its size, or BoundError naming `shown`. A flipped byte is found before any of the
    data is used (a read of the first lines alone would take it as data). `raw` is left at its end."""
    total = 0
    try:
        with gzip.GzipFile(fileobj=raw) as f:
            while chunk := f.read(CHUNK):
                total += len(chunk)
                if total > cap:
                    raise BoundError(f"{shown}: decompresses to more than {mib(cap)}; is it a trace?")
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:  # a torn, corrupt or mislabelled .gz
        raise BoundError(f"{shown}: not a readable gzip file ({e})") from None
    except OSError as e:
        raise BoundError(f"{shown}: not a readable gzip file ({e.strerror or e})") from None
    return total


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise BoundError(f"{key}: appears twice in one object (each key once)")
        out[key] = value
    return out


def _number(kind):
    def parse(text: str):
        digits = sum(c.isdigit() for c in text)
        if digits > MAX_DIGITS:
            raise BoundError(f"a number of {digits:,} digits (at most {MAX_DIGITS})")
        return kind(text)

    return parse


def json_value(text: str) -> Any:
    """`text` parsed as JSON: duplicate keys, numbers past MAX_DIGITS digits and nesting deeper than
    Python reads refused (BoundError saying which); json.JSONDecodeError for text that is not JSON."""
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_int=_number(int), parse_float=_number(float))
    except RecursionError:
        raise BoundError("nested deeper than can be read (a trace line nests two levels)") from None

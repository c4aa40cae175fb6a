"""Mooncake-format request traces: read the JSONL, turn a request into token ids.

Each hash id names a 512-token block of a prefix chain and expands to distinct uint32 tokens.
Equal ids at equal positions give equal tokens, and nothing else does.
The two Mooncake traces ship as package data, found by name (`find_trace`).
The format and the checks: hicache_ref/README.md, "Traces" and "Design notes".
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import warnings
import zlib
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from hardware_profiles.bounded import MAX_LINES, MAX_REQUESTS, BoundError, check_gzip, json_value
from hicache_ref.core.block_tokens import BLOCK_TOKENS, TraceTokens, request_tokens, trace_tokens

try:
    from importlib.resources.abc import Traversable
except ImportError:  # Python 3.10 keeps it in importlib.abc
    from importlib.abc import Traversable

# Re-exported: a reader of traces turns requests into tokens with these (hicache_ref.core.block_tokens).
__all__ = ["BLOCK_TOKENS", "TraceOrderWarning", "TraceRequest", "TraceTokens", "find_trace", "packaged_traces",
           "read_json_lines", "read_trace", "request_tokens", "trace_tokens"]
_ENV = "HICACHE_TRACES"


class TraceRequest(NamedTuple):
    timestamp: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


_ECHO_CHARS = 80  # what a message echoes of a bad value (a trace line may hold 100k ids)
# The longest line read: a request of 100M tokens is 200K ids, about 2 MB of JSON. A longer line is
# refused as it is read, before it is held whole (a 1 GB line would take gigabytes to parse).
MAX_LINE_BYTES = 16 << 20
_BOM = b"\xef\xbb\xbf"


class TraceOrderWarning(UserWarning):
    """A trace whose timestamps go back in time somewhere (read in file order all the same)."""


def _bad(path, line_no: int, key: str, expected: str, got) -> ValueError:
    text = repr(got)
    if len(text) > _ECHO_CHARS:
        text = f"{text[: _ECHO_CHARS - 3]}... ({len(text):,} characters)"
    return ValueError(f"{path}: line {line_no}: {key}: expected {expected}, got {text}")


def _reblock_hint(input_length: int, ids: int) -> str:
    """How to read a trace hashed at another block size (a 16-token-block trace, as vLLM's and
    `trace convert --out-block-tokens 16` write): the power-of-two size its ids fit, re-blocked to ours."""
    size = next((b for b in (2 ** k for k in range(17)) if ids and -(-input_length // b) == ids), None)
    if size is None:
        return ""
    return (f"; a trace of {size}-token blocks? re-block it to {BLOCK_TOKENS}: hicache trace convert --from mooncake "
            f"--block-tokens {size} FILE --out NEW.jsonl")


def _int(obj: dict, key: str, path, line_no: int, minimum: int = 0) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise _bad(path, line_no, key, f"an integer >= {minimum}", v)
    return v


@contextlib.contextmanager
def _open_bytes(path: Path | Traversable):
    """`path` as a binary stream, gunzipped when its name ends in .gz; the file is closed on
    exit (a GzipFile leaves the file it was given open). `path` may be anything with `name` and
    `open("rb")`: a Path, a package resource, an input already read from a pipe. A .gz file is read
    to its end first (hardware_profiles.bounded.check_gzip): a corrupt one is refused before any of
    its data is used, and one that decompresses past the bound is refused at all."""
    with path.open("rb") as raw:
        if path.name.endswith(".gz"):
            check_gzip(raw, str(path))
            raw.seek(0)
            with gzip.GzipFile(fileobj=raw) as unzipped:
                yield unzipped
        else:
            yield raw


def _text(path, line_no: int, raw: bytes) -> str:
    """One line as text; ValueError naming the file and line for bytes that are not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        hint = " (gzip data: name the file .gz)" if line_no == 1 and raw.startswith(b"\x1f\x8b") else \
            " (a binary or compressed file?)"
        raise ValueError(f"{path}: line {line_no}: not UTF-8 text (byte {e.start} of the line){hint}") from None


def read_trace(path: str | Path | Traversable, limit: int | None = None, ordered: bool = False) -> list[TraceRequest]:
    """The first `limit` requests of a Mooncake JSONL trace (all when None), in file order.

    `path`: a file path or a package resource (what find_trace returns); a name ending in
    .gz is read through gzip. `ordered`: refuse (ValueError naming the file, line and key) a
    timestamp earlier than the previous request's; without it such lines are kept and one
    TraceOrderWarning counts them."""
    path = Path(path) if isinstance(path, str) else path
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit: expected a non-negative integer, got {limit!r}")
    out: list[TraceRequest] = []
    max_id = (2**32 - BLOCK_TOKENS) // BLOCK_TOKENS  # its last token is 2**32 - 1
    last_ts, last_line, back, first_back = -math.inf, 0, 0, None
    try:
        with _open_bytes(path) as f:
            for line_no, raw in enumerate(_lines(path, f), 1):
                if limit is not None and len(out) >= limit:
                    break
                if len(out) >= MAX_REQUESTS:
                    raise ValueError(f"{path}: more than {MAX_REQUESTS:,} requests (the most a trace may hold); "
                                     "replay a part of it with --limit")
                if line_no == 1:
                    raw = raw.removeprefix(_BOM)  # a UTF-8 byte order mark, as some editors write
                n = len(out)
                _parse_line(path, line_no, _text(path, line_no, raw), max_id, out)
                if len(out) == n:  # a blank line
                    continue
                ts = out[-1].timestamp
                if ts < last_ts:
                    if ordered:
                        raise _bad(path, line_no, "timestamp", f"at least {last_ts:g} (line {last_line}'s): requests "
                                   "replayed at their arrival times must come in time order", ts)
                    back += 1
                    first_back = first_back or (line_no, ts, last_line, last_ts)
                last_ts, last_line = ts, line_no
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:  # a torn or mislabelled .gz
        raise ValueError(f"{path}: not a readable gzip file ({e})") from None
    except MemoryError:
        raise ValueError(f"{path}: ran out of memory after {len(out):,} requests; replay a part of it with "
                         "--limit") from None
    if back:
        line_no, ts, prev_line, prev_ts = first_back
        warnings.warn(TraceOrderWarning(
            f"{path}: {back:,} request(s) with a timestamp earlier than the line before (first: line {line_no} at {ts:g} ms, "
            f"after line {prev_line} at {prev_ts:g} ms); requests are replayed in file order"), stacklevel=2)
    return out


def read_json_lines(path: str | Path | Traversable):
    """(line number, JSON object) of each non-blank line of a JSONL file, read as read_trace reads one
    (a .gz name through gzip, lines bounded by MAX_LINE_BYTES, UTF-8, a leading BOM dropped): what
    the trace converters (hicache_ref.sim.trace.convert) read through. ValueError naming the file and line."""
    path = Path(path) if isinstance(path, str) else path
    try:
        with _open_bytes(path) as f:
            for line_no, raw in enumerate(_lines(path, f), 1):
                line = _text(path, line_no, raw.removeprefix(_BOM) if line_no == 1 else raw)
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {line_no}: not JSON ({e.msg})") from None
                if not isinstance(obj, dict):
                    raise _bad(path, line_no, "(line)", "a JSON object", type(obj).__name__)
                yield line_no, obj
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise ValueError(f"{path}: not a readable gzip file ({e})") from None


def _lines(path, f):
    """The lines of binary stream `f`, each read up to MAX_LINE_BYTES: ValueError naming the file
    and line for a longer one."""
    line_no = 0
    while raw := f.readline(MAX_LINE_BYTES + 1):
        line_no += 1
        if line_no > MAX_LINES:
            raise ValueError(f"{path}: more than {MAX_LINES:,} lines (blank ones included: the most a trace "
                             "may hold); is it a trace?")
        if len(raw) > MAX_LINE_BYTES:
            raise ValueError(f"{path}: line {line_no}: longer than {MAX_LINE_BYTES >> 20} MiB (the longest line "
                             "a trace may hold); is it a trace?")
        yield raw


def _parse_line(path, line_no: int, line: str, max_id: int, out: list[TraceRequest]) -> None:
    """Append the request on `line` to `out` (nothing for a blank line); ValueError naming the
    file, line and key otherwise."""
    if not line.strip():
        return
    try:
        obj = json_value(line)  # duplicate keys, digits and depth bounded (hardware_profiles.bounded)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: line {line_no}: not JSON ({e.msg})") from None
    except BoundError as e:
        raise ValueError(f"{path}: line {line_no}: {e}") from None
    if not isinstance(obj, dict):
        raise _bad(path, line_no, "(line)", "a JSON object", type(obj).__name__)
    n = _int(obj, "input_length", path, line_no, 1)
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise _bad(path, line_no, "hash_ids", "a list of integers", ids)
    if len(ids) != -(-n // BLOCK_TOKENS):
        e = _bad(path, line_no, "hash_ids", f"ceil(input_length / {BLOCK_TOKENS}) = "
                 f"{-(-n // BLOCK_TOKENS)} ids", f"{len(ids)} ids")
        raise ValueError(f"{e}{_reblock_hint(n, len(ids))}") from None
    if ids and (min(ids) < 0 or max(ids) > max_id):
        raise _bad(path, line_no, "hash_ids", f"ids in [0, {max_id}] (token ids fit in 32 bits)",
                   min(ids) if min(ids) < 0 else max(ids))
    ts = obj.get("timestamp", 0)
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        raise _bad(path, line_no, "timestamp", "a finite non-negative number (ms)", ts)
    out_len = _int(obj, "output_length", path, line_no) if "output_length" in obj else 0
    out.append(TraceRequest(float(ts), n, out_len, tuple(ids)))


def packaged_traces() -> Traversable:
    """The folder of traces shipped with the package (hicache_ref/sim/trace/data)."""
    return resources.files("hicache_ref.sim.trace") / "data"


def find_trace(name: str = "conversation_trace.jsonl") -> Path | Traversable | None:
    """A trace by file name: $HICACHE_TRACES/<name> if that variable is set and the file is
    there, else the packaged trace of that name; each also as <name>.gz. None if neither."""
    folders: list[Path | Traversable] = []
    if os.environ.get(_ENV):
        folders.append(Path(os.environ[_ENV]))
    folders.append(packaged_traces())
    names = (name,) if name.endswith(".gz") else (name, name + ".gz")
    for folder in folders:
        for n in names:
            p = folder / n
            if p.is_file():
                return p
    return None

"""A table of measured TTFT against prompt length, as serving benchmarks write it.

Read: SGLang's `python -m sglang.bench_serving --output-file F.jsonl` (one JSON result per line, per
run) and vLLM's `benchmark_serving.py --save-result` (one JSON result): each result's `input_lens`
(prompt tokens) and `ttfts` (seconds) side by side, a request whose `errors` entry is non-empty
left out; per-request lines or CSV rows with a length column (input_len, prompt_len, input_tokens,
prompt_tokens) and a TTFT column (ttft or ttft_s in seconds, ttft_ms in milliseconds). Bounded: the
file's size, the rows, the digits of a number; a bad row is one line naming the file and line.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

MAX_TABLE_BYTES = 64 << 20
MAX_ROWS = 1_000_000
MAX_TOKENS = 10_000_000  # a prompt longer than this is a unit or column mistake
MAX_TTFT_S = 86_400.0
LENGTH_KEYS = ("input_len", "prompt_len", "input_tokens", "prompt_tokens")
TTFT_KEYS = {"ttft": 1.0, "ttft_s": 1.0, "ttft_ms": 1e-3}
BENCH_KEYS = ("input_lens", "ttfts")  # SGLang bench_serving and vLLM benchmark_serving results
SUMMARY_PREFIXES = ("mean_ttft", "median_ttft", "p99_ttft")  # a result's summary, saved without per-request lists


class TableError(ValueError):
    """One line: `FILE: line N: what` (or `FILE: what` for the file as a whole)."""


def read_table(path: str | Path) -> list[tuple[int, float, int]]:
    """(prompt tokens, TTFT seconds, line) of every measured request in `path`. TableError for a
    file too large, not UTF-8, in no known shape, or with a bad row (naming its line)."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_TABLE_BYTES:
        raise TableError(f"{path}: {size:,} bytes, over the {MAX_TABLE_BYTES >> 20} MiB a TTFT table may take")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise TableError(f"{path}: not UTF-8 text (byte {e.start})") from None
    if path.suffix.lower() == ".csv":
        rows = _csv_rows(path, text)
    else:
        rows = _json_rows(path, text)
    if not rows:
        raise TableError(f"{path}: no measured request (expected {', '.join(BENCH_KEYS)} arrays, or rows with one of "
                         f"{', '.join(LENGTH_KEYS)} and one of {', '.join(TTFT_KEYS)})")
    return rows


def _json_rows(path: Path, text: str) -> list:
    stripped = text.strip()
    if stripped.startswith("{") and "\n{" not in stripped:  # one result (vLLM), maybe pretty-printed
        return _record(path, _loads(path, stripped, 1), 1, [])
    rows: list = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            _record(path, _loads(path, line, n), n, rows)
    return rows


class _Twice(ValueError):
    """A JSON object naming one key twice (json keeps the last silently)."""


def _unique(pairs: list) -> dict:
    seen: dict = {}
    for k, v in pairs:
        if k in seen:
            raise _Twice(k)
        seen[k] = v
    return seen


def _loads(path: Path, text: str, line: int):
    try:
        return json.loads(text, parse_float=_bounded_float, parse_int=_bounded_int, object_pairs_hook=_unique)
    except _Twice as e:
        raise TableError(f"{path}: line {line}: key {str(e.args[0])[:40]!r} appears twice in one object") from None
    except (ValueError, RecursionError) as e:
        raise TableError(f"{path}: line {line}: not JSON ({str(e)[:60]})") from None


def _bounded_int(s: str) -> int:
    if len(s.lstrip("-")) > 18:
        raise ValueError(f"an integer of {len(s)} digits")
    return int(s)


def _bounded_float(s: str) -> float:
    if len(s) > 40:
        raise ValueError(f"a number of {len(s)} characters")
    return float(s)


def _record(path: Path, obj, line: int, rows: list) -> list:
    """Add the requests of one JSON object (a benchmark result or one request) to `rows`."""
    if not isinstance(obj, dict):
        raise TableError(f"{path}: line {line}: expected a JSON object, got {type(obj).__name__}")
    if any(k in obj for k in BENCH_KEYS):
        lens, ttfts = obj.get("input_lens"), obj.get("ttfts")
        if not isinstance(lens, list) or not isinstance(ttfts, list):
            missing = "input_lens (run SGLang's bench_serving with --output-details)" if not isinstance(lens, list) \
                else "ttfts"
            raise TableError(f"{path}: line {line}: a benchmark result without the list {missing}")
        if len(lens) != len(ttfts):
            raise TableError(f"{path}: line {line}: {len(lens)} input_lens but {len(ttfts)} ttfts")
        errors = obj.get("errors") or [""] * len(lens)
        for i, (n, t) in enumerate(zip(lens, ttfts, strict=True)):
            if i < len(errors) and errors[i]:
                continue  # a failed request measured nothing
            rows.append((_tokens(path, line, n), _seconds(path, line, t, 1.0), line))
    elif any(k.startswith(SUMMARY_PREFIXES) for k in obj) and not any(k in obj for k in LENGTH_KEYS):
        raise TableError(f"{path}: line {line}: a benchmark summary without per-request figures (input_lens and "
                         "ttfts): run SGLang's bench_serving with --output-details, or vLLM's benchmark_serving with "
                         "--save-result --save-detailed")
    else:
        rows.append(_row(path, line, obj))
    _cap(path, line, rows)
    return rows


AGREE_REL = 1e-3  # two columns of one figure agree within their printed digits


def _row(path: Path, line: int, row: dict) -> tuple[int, float, int]:
    """(tokens, seconds, line) of one request; every column naming the same figure must agree (a
    unit mistake in one of them is a different figure, not a choice of which to read)."""
    lengths = [(k, _tokens(path, line, row[k])) for k in LENGTH_KEYS if k in row and row[k] not in ("", None)]
    ttfts = [(k, _seconds(path, line, row[k], TTFT_KEYS[k])) for k in TTFT_KEYS if k in row and row[k] not in ("", None)]
    if not lengths or not ttfts:
        what = f"one of {', '.join(LENGTH_KEYS)}" if not lengths else f"one of {', '.join(TTFT_KEYS)}"
        raise TableError(f"{path}: line {line}: no {what}")
    for (k1, v1), (k2, v2) in ((lengths[0], o) for o in lengths[1:]):
        if v1 != v2:
            raise TableError(f"{path}: line {line}: {k1} {v1} and {k2} {v2} disagree (one prompt length, two "
                             "columns: keep one)")
    for (k1, v1), (k2, v2) in ((ttfts[0], o) for o in ttfts[1:]):
        if abs(v1 - v2) > AGREE_REL * max(v1, v2):
            raise TableError(f"{path}: line {line}: {k1} ({v1:.6g} s) and {k2} ({v2:.6g} s) disagree (one TTFT, "
                             "two columns: keep the one in the unit its name says)")
    return lengths[0][1], ttfts[0][1], line


def _csv_rows(path: Path, text: str) -> list:
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise TableError(f"{path}: line 1: no header row")
    names = [n.strip() for n in reader.fieldnames]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:  # DictReader keeps the last of two same-named columns silently
        raise TableError(f"{path}: line 1: column {twice[:40]!r} appears twice in the header")
    rows: list = []
    for rec in reader:
        line = reader.line_num
        if None in rec:
            raise TableError(f"{path}: line {line}: more fields than the header names")
        if (rec.get("error") or rec.get("errors") or "").strip():
            continue
        rows.append(_row(path, line, {k.strip(): (v or "").strip() for k, v in rec.items()}))
        _cap(path, line, rows)
    return rows


def _cap(path: Path, line: int, rows: list) -> None:
    if len(rows) > MAX_ROWS:
        raise TableError(f"{path}: line {line}: over {MAX_ROWS:,} requests; a fit needs a few hundred")


def _tokens(path: Path, line: int, v) -> int:
    try:
        n = int(v) if not isinstance(v, bool) and float(v) == int(float(v)) else None
    except (TypeError, ValueError, OverflowError):
        n = None
    if n is None or not 0 < n <= MAX_TOKENS:
        raise TableError(f"{path}: line {line}: prompt length {str(v)[:24]!r} is not a whole number of tokens in "
                         f"1..{MAX_TOKENS:,}")
    return n


def _seconds(path: Path, line: int, v, scale: float) -> float:
    try:
        s = float(v) * scale if not isinstance(v, bool) and len(str(v)) <= 40 else math.nan
    except (TypeError, ValueError):
        s = math.nan
    if not (math.isfinite(s) and 0 < s <= MAX_TTFT_S):
        raise TableError(f"{path}: line {line}: TTFT {str(v)[:24]!r} is not a time in (0, {MAX_TTFT_S:g}] s")
    return s

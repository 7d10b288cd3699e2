"""Reading recorded traces: autotune's own JSONL and the public formats users have.

Every format comes down to the same rows: a recorded arrival time, prompt and output token
counts, optionally the prompt's block hash IDs (shared IDs = a shared prefix) and, in our
own format, per-request options. A bad line stops the read with one message naming the
file, the line and the problem: a benchmark silently built from half a trace would tune
for traffic nobody has.

Formats (``format: auto`` tells them apart by the first line):

* ``autotune``: JSONL, ``{"arrival_s": 0.5, "prompt_tokens": 812, "output_tokens": 128}``
  plus optional ``hash_ids``, ``prompt_logprobs``, ``logprobs``, ``n``.
* ``mooncake``: JSONL of the Mooncake traces (kvcache-ai/Mooncake, FAST25-release/traces):
  ``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids`` (one per 512-token
  block; equal IDs are equal blocks).
* ``azure``: CSV of the Azure LLM inference traces (Azure/AzurePublicDataset):
  ``TIMESTAMP`` (a datetime), ``ContextTokens``, ``GeneratedTokens``.
* ``burstgpt``: CSV of BurstGPT (HPMLL/BurstGPT): ``Timestamp`` in seconds, ``Request
  tokens``, ``Response tokens`` (other columns such as ``Model`` and ``Log Type`` are ignored).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autotune.workload.options import RequestOptions

TRACE_FORMATS = ("autotune", "mooncake", "azure", "burstgpt")
_CSV_COLUMNS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}
_AUTOTUNE_KEYS = ("arrival_s", "prompt_tokens", "output_tokens", "hash_ids", "prompt_logprobs", "logprobs", "n")
_OPTION_KEYS = ("prompt_logprobs", "logprobs", "n")
_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class TraceRow:
    """One recorded request. ``t_s`` is on the file's own clock (only differences matter)."""

    line: int
    t_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    options: RequestOptions | None = None  # set by the line itself (autotune format only)


class TraceFileError(ValueError):
    """A trace file that cannot be replayed; the message is one line: file, line, problem."""

    def __init__(self, path: Path, line: int | None, problem: str):
        where = f"{path} line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")


class _Bad(Exception):
    """A problem with the current line; the reader adds the file and line number."""


def read_trace(path: Path, fmt: str, start_s: float = 0.0, end_s: float | None = None,
               limit: int | None = None) -> tuple[str, list[TraceRow]]:
    """The file's format (resolved when ``fmt`` is ``auto``) and its rows in the window.

    The window is ``[start_s, end_s)`` seconds after the file's first request; at most
    ``limit`` rows are kept. Reading stops at the window's end, so lines after it are not
    checked.
    """
    try:
        with path.open("rb") as f:
            return _read(path, f, fmt, start_s, end_s, limit)
    except FileNotFoundError:
        raise TraceFileError(path, None, "no such trace file; paths are relative to the space file") from None
    except IsADirectoryError:
        raise TraceFileError(path, None, "is a directory, not a trace file") from None
    except PermissionError:
        raise TraceFileError(path, None, "cannot read the trace file: permission denied") from None


def _lines(path: Path, f: Any) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers."""
    for number, raw in enumerate(f, start=1):
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            raise TraceFileError(path, number, "not UTF-8 text") from None
        if text.strip():
            yield number, text.rstrip("\r\n")


def _read(path: Path, f: Any, fmt: str, start_s: float, end_s: float | None,
          limit: int | None) -> tuple[str, list[TraceRow]]:
    lines = _lines(path, f)
    first = next(lines, None)
    if first is None:
        raise TraceFileError(path, 1, "empty trace file")
    number, text = first
    try:
        fmt = _detect(text) if fmt == "auto" else fmt
        parse, is_header = _parser(fmt, text)
    except _Bad as e:
        raise TraceFileError(path, number, str(e)) from None
    rows: list[TraceRow] = []
    t0: float | None = None
    prev: float | None = None
    pending = lines if is_header else _chain(first, lines)
    for number, text in pending:
        try:
            t, prompt, output, hash_ids, options = parse(text)
            _check_row(t, prev, prompt, output, fmt)
        except _Bad as e:
            raise TraceFileError(path, number, str(e)) from None
        prev = t
        t0 = t if t0 is None else t0
        rel = t - t0
        if rel < start_s:
            continue
        if end_s is not None and rel >= end_s:
            break
        rows.append(TraceRow(number, t, prompt, output, hash_ids, options))
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise TraceFileError(path, None, "no requests in the selected window (check trace.start_s / trace.end_s)")
    return fmt, rows


def _chain(first: tuple[int, str], rest: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield first
    yield from rest


def _check_row(t: float, prev: float | None, prompt: int, output: int, fmt: str) -> None:
    if not math.isfinite(t) or t < 0:
        raise _Bad(f"timestamp {t:g} is negative or not finite")
    if prev is not None and t < prev:
        raise _Bad(f"timestamp {t:g} is before the previous request's {prev:g}; the trace must be sorted by time")
    if prompt <= 0:
        raise _Bad(f"zero-length prompt ({prompt} tokens); every request needs at least one prompt token")
    if output <= 0:
        hint = " (BurstGPT marks failed requests so: use BurstGPT_without_fails_*.csv)" if fmt == "burstgpt" else ""
        raise _Bad(f"zero-length output ({output} tokens); every request must generate at least one token{hint}")


Parsed = tuple[float, int, int, tuple[int, ...], RequestOptions | None]


def _detect(first_line: str) -> str:
    if first_line.lstrip().startswith("{"):
        keys = set(_json_object(first_line))
        if "input_length" in keys:
            return "mooncake"
        if "prompt_tokens" in keys:
            return "autotune"
        raise _Bad(f"unknown trace format: JSON keys {sorted(keys)} are neither autotune's (arrival_s, "
                   "prompt_tokens, output_tokens) nor Mooncake's (timestamp, input_length, output_length)")
    header = _csv_fields(first_line)
    if "TIMESTAMP" in header:
        return "azure"
    if "Timestamp" in header:
        return "burstgpt"
    raise _Bad(f"unknown trace format: first line {first_line[:80]!r} is neither JSON nor an Azure "
               "(TIMESTAMP,ContextTokens,GeneratedTokens) or BurstGPT (Timestamp,Request tokens,Response tokens) "
               "CSV header; set workload.trace.format")


def _parser(fmt: str, first_line: str) -> tuple[Callable[[str], Parsed], bool]:
    """The line parser for ``fmt`` and whether the first line is a header (CSV)."""
    if fmt == "autotune":
        return _autotune_line, False
    if fmt == "mooncake":
        return _mooncake_line, False
    header = _csv_fields(first_line)
    need = _CSV_COLUMNS[fmt]
    missing = [c for c in need if c not in header]
    if missing:
        raise _Bad(f"missing column {missing[0]!r}: the {fmt} format needs {', '.join(need)}; header is {header}")
    cols = [header.index(c) for c in need]
    to_time = _azure_time if fmt == "azure" else _number

    def parse(text: str) -> Parsed:
        fields = _csv_fields(text)
        if len(fields) != len(header):
            raise _Bad(f"malformed line: {len(fields)} fields, the header has {len(header)}")
        t = to_time(need[0], fields[cols[0]])
        return t, _int(need[1], fields[cols[1]]), _int(need[2], fields[cols[2]]), (), None

    return parse, True


def _autotune_line(text: str) -> Parsed:
    obj = _json_object(text)
    unknown = sorted(set(obj) - set(_AUTOTUNE_KEYS))
    if unknown:
        raise _Bad(f"unknown key {unknown[0]!r}; the autotune format knows {', '.join(_AUTOTUNE_KEYS)}")
    t = _number("arrival_s", _require(obj, "arrival_s"))
    prompt = _int("prompt_tokens", _require(obj, "prompt_tokens"))
    output = _int("output_tokens", _require(obj, "output_tokens"))
    options = None
    if any(k in obj for k in _OPTION_KEYS):
        kw = {k: _int(k, obj[k]) for k in _OPTION_KEYS if obj.get(k) is not None}
        try:
            options = RequestOptions(**kw)
        except ValueError as e:
            raise _Bad(str(e)) from None
    return t, prompt, output, _hash_ids(obj.get("hash_ids", [])), options


def _mooncake_line(text: str) -> Parsed:
    obj = _json_object(text)
    t_ms = _number("timestamp", _require(obj, "timestamp"))
    prompt = _int("input_length", _require(obj, "input_length"))
    output = _int("output_length", _require(obj, "output_length"))
    return t_ms / 1000.0, prompt, output, _hash_ids(obj.get("hash_ids", [])), None


def _json_object(text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise _Bad(f"malformed line: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise _Bad(f"malformed line: expected a JSON object, got {type(obj).__name__}")
    return obj


def _csv_fields(text: str) -> list[str]:
    try:
        return [c.strip() for c in next(csv.reader([text]))]
    except csv.Error as e:
        raise _Bad(f"malformed line: {e}") from None


def _require(obj: dict[str, Any], key: str) -> Any:
    if key not in obj:
        raise _Bad(f"missing key {key!r}")
    return obj[key]


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise _Bad(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _Bad(f"{name} must be a number, got {str(value)[:40]!r}") from None


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise _Bad(f"{name} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise _Bad(f"{name} must be an integer, got {str(value)[:40]!r}") from None


def _hash_ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0
                                              for h in value):
        raise _Bad("hash_ids must be a list of non-negative integers")
    return tuple(value)


def _azure_time(name: str, value: str) -> float:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(f"{name} {value[:40]!r} is not a date-time like 2023-11-16 18:15:46.6805900") from None
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return (when - _EPOCH).total_seconds()

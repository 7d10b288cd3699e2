"""Reading recorded traces: autotune's own JSONL and the public formats users have.

Every format comes down to the same rows: a recorded arrival time, prompt and output token
counts, optionally the prompt's block hash IDs (shared IDs = a shared prefix) and, in our
own format, per-request options. A bad line stops the read with one message naming the
file, the line and the problem: a benchmark silently built from half a trace would tune
for traffic nobody has. The message never quotes the file (a trace path can point at any
file, secrets included): it says what was expected, and where.

Only regular files are read (``security.open_input``: no /dev/zero, FIFO or /proc file), at
most ``MAX_TRACE_BYTES``, one line of at most ``MAX_LINE_BYTES`` at a time.

Formats (each declared once, in ``READERS`` below; ``format: auto`` tells them apart by the
first line):

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
import difflib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal

from autotune.security import NotRegularFile, open_input
from autotune.workload.options import RequestOptions

_AUTOTUNE_KEYS = ("arrival_s", "prompt_tokens", "output_tokens", "hash_ids", "prompt_logprobs", "logprobs", "n")
_OPTION_KEYS = ("prompt_logprobs", "logprobs", "n")
_EPOCH = datetime(1970, 1, 1)
# A trace line is one request: a Mooncake line with a 128k-token prompt's hash_ids is ~2 KB.
MAX_LINE_BYTES = 1 << 20
# Public traces are tens to hundreds of MB; the cap only keeps the sha256 pass finite.
MAX_TRACE_BYTES = 16 << 30


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
    if fmt != "auto" and fmt not in READERS:  # the schema refuses it first; a direct caller gets the same line
        raise TraceFileError(path, None, f"unknown trace format {fmt!r}; use {format_choices()}")
    with open_trace(path) as f:
        return _read(path, f, fmt, start_s, end_s, limit)


def open_trace(path: Path) -> BinaryIO:
    """The trace file opened for reading; a ``TraceFileError`` if it is not a readable regular file."""
    try:
        return open_input(path, MAX_TRACE_BYTES)
    except FileNotFoundError:
        raise TraceFileError(path, None, "no such trace file; paths are relative to the space file") from None
    except IsADirectoryError:
        raise TraceFileError(path, None, "is a directory, not a trace file") from None
    except PermissionError:
        raise TraceFileError(path, None, "cannot read the trace file: permission denied") from None
    except NotRegularFile as e:
        raise TraceFileError(path, None, f"{e} (a trace file)") from None
    except OSError as e:
        raise TraceFileError(path, None, f"cannot read the trace file: {e.strerror}") from None
    except ValueError:  # a NUL byte in the path
        raise TraceFileError(path, None, "not a valid file path") from None


def _lines(path: Path, f: BinaryIO) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers; a line over ``MAX_LINE_BYTES`` stops the
    read before it is held in memory."""
    number = 0
    while raw := f.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise TraceFileError(path, number, f"line longer than {MAX_LINE_BYTES >> 20} MiB; a trace line is "
                                               "one request (JSONL or CSV)")
        try:
            text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            raise TraceFileError(path, number, "not UTF-8 text") from None
        if text.strip():
            yield number, text.rstrip("\r\n")


def _read(path: Path, f: BinaryIO, fmt: str, start_s: float, end_s: float | None,
          limit: int | None) -> tuple[str, list[TraceRow]]:
    lines = _lines(path, f)
    first = next(lines, None)
    if first is None:
        raise TraceFileError(path, 1, "empty trace file")
    number, text = first
    try:
        reader = _detect(text) if fmt == "auto" else READERS[fmt]
        parse, is_header = reader.parser(text)
    except _Bad as e:
        raise TraceFileError(path, number, str(e)) from None
    rows: list[TraceRow] = []
    t0: float | None = None
    prev: float | None = None
    pending = lines if is_header else _chain(first, lines)
    for number, text in pending:
        try:
            t, prompt, output, hash_ids, options = parse(text)
            _check_row(t, prev, prompt, output, reader)
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
    return reader.name, rows


def _chain(first: tuple[int, str], rest: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield first
    yield from rest


def _check_row(t: float, prev: float | None, prompt: int, output: int, reader: TraceReader) -> None:
    if not math.isfinite(t) or t < 0:
        raise _Bad("timestamp is negative or not finite; expected seconds (ms for Mooncake) >= 0")
    if prev is not None and t < prev:
        raise _Bad("timestamp is before the previous request's; the trace must be sorted by time")
    if prompt <= 0:
        raise _Bad("zero-length prompt; every request needs at least one prompt token")
    if output <= 0:
        raise _Bad(f"zero-length output; every request must generate at least one token{reader.zero_output_hint}")


Parsed = tuple[float, int, int, tuple[int, ...], RequestOptions | None]


@dataclass(frozen=True)
class TraceReader:
    """One trace file format: how its first line is told apart, and how its lines are read.

    ``fields`` are the format's time, prompt-token and output-token keys (JSONL) or header
    columns (CSV), in that order; ``marker`` is the one of them whose presence in the first
    line says "this format" to ``format: auto``.
    """

    name: str  # as workload.trace.format names it
    label: str  # as the format's own authors name it, in messages
    layout: Literal["jsonl", "csv"]
    fields: tuple[str, str, str]
    marker: str
    parse_jsonl: Callable[[str], Parsed] | None = None  # JSONL: one line's values
    parse_time: Callable[[str, str], float] | None = None  # CSV: the time column's value (None: seconds)
    zero_output_hint: str = ""  # why a zero-length output may be in this format's files, and the fix

    def parser(self, first_line: str) -> tuple[Callable[[str], Parsed], bool]:
        """The line parser and whether the first line is a header (CSV) rather than a request."""
        if self.layout == "jsonl":
            assert self.parse_jsonl is not None
            return self.parse_jsonl, False
        header = _csv_fields(first_line)
        need = self.fields
        missing = [c for c in need if c not in header]
        if missing:
            raise _Bad(f"missing column {missing[0]!r}: the {self.name} format needs a header with {', '.join(need)}")
        cols = [header.index(c) for c in need]
        to_time = self.parse_time or _number

        def parse(text: str) -> Parsed:
            fields = _csv_fields(text)
            if len(fields) != len(header):
                raise _Bad(f"malformed line: {len(fields)} fields, the header has {len(header)}")  # counts, not content
            t = to_time(need[0], fields[cols[0]])
            return t, _int(need[1], fields[cols[1]]), _int(need[2], fields[cols[2]]), (), None

        return parse, True


def _detect(first_line: str) -> TraceReader:
    """The reader whose marker the first line has (readers in ``READERS`` order)."""
    if first_line.lstrip().startswith("{"):
        return _marked("jsonl", set(_json_object(first_line)),
                       lambda r: f"{r.label}'s ({', '.join(r.fields)})", " nor ",
                       "unknown trace format: the JSON object has the keys of neither {known}")
    return _marked("csv", set(_csv_fields(first_line)), lambda r: f"{r.label} ({','.join(r.fields)})", " or ",
                   "unknown trace format: the first line is neither JSON nor the CSV header of {known}")


def _marked(layout: str, present: set[str], describe: Callable[[TraceReader], str], joiner: str,
            problem: str) -> TraceReader:
    """The first reader of ``layout`` whose marker is in ``present``; else the ``problem``
    naming every reader of that layout, and the fix."""
    readers = [r for r in READERS.values() if r.layout == layout]
    for r in readers:
        if r.marker in present:
            return r
    raise _Bad(problem.format(known=joiner.join(describe(r) for r in readers)) + "; set workload.trace.format")


def _autotune_line(text: str) -> Parsed:
    obj = _json_object(text)
    unknown = sorted(set(obj) - set(_AUTOTUNE_KEYS))
    if unknown:
        close = difflib.get_close_matches(unknown[0], _AUTOTUNE_KEYS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""  # our name, not the file's
        raise _Bad(f"unknown key; {hint}the autotune format knows {', '.join(_AUTOTUNE_KEYS)}")
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
    except RecursionError:
        raise _Bad("malformed line: JSON nested too deeply; expected one flat object per line") from None
    except ValueError:  # an integer of more than 4300 digits
        raise _Bad("malformed line: a number out of range") from None
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
        raise _Bad(f"{name} must be a number, got {_kind(value)}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise _Bad(f"{name} must be a number, got {_kind(value)}") from None


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise _Bad(f"{name} must be an integer, got {_kind(value)}")
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise _Bad(f"{name} must be an integer, got {_kind(value)}") from None


def _kind(value: Any) -> str:
    """What a bad value is, in words: the value itself is file content and is never shown."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float):
        return "a fraction" if math.isfinite(value) else "a non-finite number"
    if isinstance(value, str):
        return "text" if value.strip() else "an empty field"
    return {dict: "an object", list: "a list", type(None): "null"}.get(type(value), type(value).__name__)


def _hash_ids(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0
                                              for h in value):
        raise _Bad("hash_ids must be a list of non-negative integers")
    return tuple(value)


def _azure_time(name: str, value: str) -> float:
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(f"{name} is not a date-time like 2023-11-16 18:15:46.6805900") from None
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    return (when - _EPOCH).total_seconds()


# Every format autotune reads, each declared once: workload.trace.format accepts these names
# (and ``auto``), and ``format: auto`` tries their markers in this order.
READERS: dict[str, TraceReader] = {r.name: r for r in (
    TraceReader("autotune", "autotune", "jsonl", ("arrival_s", "prompt_tokens", "output_tokens"), "prompt_tokens",
                parse_jsonl=_autotune_line),
    TraceReader("mooncake", "Mooncake", "jsonl", ("timestamp", "input_length", "output_length"), "input_length",
                parse_jsonl=_mooncake_line),
    TraceReader("azure", "Azure", "csv", ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "TIMESTAMP",
                parse_time=_azure_time),
    TraceReader("burstgpt", "BurstGPT", "csv", ("Timestamp", "Request tokens", "Response tokens"), "Timestamp",
                zero_output_hint=" (BurstGPT marks failed requests so: use BurstGPT_without_fails_*.csv)"),
)}
TRACE_FORMATS: tuple[str, ...] = tuple(READERS)


def format_choices() -> str:
    """The accepted values of workload.trace.format, as an error message offers them."""
    return f"auto (told apart by the first line) or one of {', '.join(TRACE_FORMATS)}"

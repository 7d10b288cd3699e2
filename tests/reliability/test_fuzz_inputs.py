"""Property-based fuzzing of the two readers of user files: the search-space loader and the
trace readers (issue 21).

Whatever the input (YAML text, raw bytes, a valid space with any field replaced by any
structure, trace lines of any shape), the outcome is either a loaded space / a list of rows,
or the one user error: ``UserError`` (exit 2) or ``TraceFileError`` (a ValueError the
loader turns into one), whose printed line is a single line that quotes no planted file
content. Never another exception (a traceback), never more than ``MEMORY_CAP_MIB`` of
allocations. Seeds are fixed (``derandomize``) and example counts small: the module runs
in CI in well under 30 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.errors import UserError
from autotune.security import MAX_MESSAGE_CHARS, one_line
from autotune.space.loader import load_space, parse_space
from autotune.workload import TraceFileError
from autotune.workload.files import read_trace
from tests.conftest import with_setting
from tests.reliability.conftest import noop_space

MEMORY_CAP_MIB = 64
# Planted in generated file content: an error line must never carry it.
MARK = "ZQXJ"

# AUTOTUNE_FUZZ_EXAMPLES=5000 AUTOTUNE_FUZZ_SEEDED=0 searches deeper, off CI.
FUZZ = settings(derandomize=os.environ.get("AUTOTUNE_FUZZ_SEEDED", "1") == "1", database=None, deadline=None,
                max_examples=int(os.environ.get("AUTOTUNE_FUZZ_EXAMPLES", "120")),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30))
structures = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=12)


def _outcome(fn: Callable[[], Any]) -> str | None:
    """Run ``fn``; the error line the CLI would print, or None when it succeeded. Any other
    exception fails the test (it would be a traceback), as does a memory peak over the cap."""
    tracemalloc.start()
    try:
        try:
            fn()
            line = None
        except (UserError, TraceFileError) as e:
            line = f"error: {one_line(str(e))}"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_CAP_MIB * 2**20, f"peak {peak / 2**20:.0f} MiB"
    if line is not None:
        assert "\n" not in line and "\r" not in line and "Traceback" not in line
        assert len(line) <= MAX_MESSAGE_CHARS + len("error: ")
    return line


# --- the space loader --------------------------------------------------------------------

@FUZZ
@given(text=st.text(max_size=400))
def test_any_yaml_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("s") / "space.yaml"
    path.write_text(text)
    _outcome(lambda: load_space(path))


@FUZZ
@given(raw=st.binary(max_size=400))
def test_any_bytes_as_a_space(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("s") / "space.yaml"
    path.write_bytes(raw)
    _outcome(lambda: load_space(path))


# A valid space has these places; each example puts an arbitrary structure at one of them.
BASE = noop_space("fuzz", trials=2)
PLACES = ["version", "engine", "engine.backend", "engine.flags", "engine.flags.max_num_seqs", "engine.env",
          "engine.sim_profile", "params", "params.max_num_seqs", "params.max_num_seqs.low",
          "params.max_num_seqs.step", "params.gpu_memory_utilization.step", "params.gpu_memory_utilization.high",
          "params.enable_prefix_caching.when", "constraints", "workload", "workload.num_requests",
          "workload.trace", "workload.trace.path", "workload.trace.format", "workload.options", "objectives",
          "slo", "references", "study", "study.name", "study.trials", "study.storage", "study.strategy",
          "study.strategy.model_profile", "study.confirm", "cluster", "export", "an_unknown_key"]


@FUZZ
@given(place=st.sampled_from(PLACES), value=structures)
def test_any_structure_in_a_valid_space(tmp_path_factory, place, value):
    root = tmp_path_factory.mktemp("s")
    data = with_setting(BASE, place, value)
    _outcome(lambda: parse_space(data, root / "space.yaml"))


@FUZZ
@given(place=st.sampled_from(PLACES), value=structures)
def test_any_structure_dumped_as_yaml(tmp_path_factory, place, value):
    """The same through the file: YAML's own types (dates, big ints) on the way."""
    path = tmp_path_factory.mktemp("s") / "space.yaml"
    path.write_text(yaml.safe_dump(with_setting(BASE, place, value), allow_unicode=True))
    _outcome(lambda: load_space(path))


# --- the trace readers -------------------------------------------------------------------

FORMATS = st.sampled_from(["auto", "autotune", "mooncake", "azure", "burstgpt"])


@FUZZ
@given(raw=st.binary(max_size=600), fmt=FORMATS)
def test_any_bytes_as_a_trace(tmp_path_factory, raw, fmt):
    path = tmp_path_factory.mktemp("t") / "trace"
    path.write_bytes(raw)
    _outcome(lambda: read_trace(path, fmt))


KEYS = ["arrival_s", "prompt_tokens", "output_tokens", "hash_ids", "prompt_logprobs", "logprobs", "n",
        "timestamp", "input_length", "output_length"]
# Values and unknown keys carry the mark; known keys stay as they are.
marked_text = st.text(max_size=10).map(lambda s: f"{MARK}{s}")
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**20), max_value=10**20),
              st.floats(allow_nan=False, allow_infinity=False), marked_text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(marked_text, inner, max_size=3)),
    max_leaves=6)
json_lines = st.dictionaries(st.one_of(st.sampled_from(KEYS), marked_text), json_values, max_size=6).map(json.dumps)
csv_headers = st.lists(st.one_of(st.sampled_from(["TIMESTAMP", "ContextTokens", "GeneratedTokens", "Timestamp",
                                                  "Request tokens", "Response tokens"]), marked_text),
                       min_size=1, max_size=5).map(",".join)
csv_rows = st.lists(st.one_of(st.sampled_from(["0", "1", "12", "-3", "2.5", "2023-11-16 18:15:46.68", ""]),
                              marked_text), min_size=1, max_size=5).map(",".join)


@FUZZ
@given(first=st.one_of(json_lines, csv_headers), rest=st.lists(st.one_of(json_lines, csv_rows), max_size=6),
       fmt=FORMATS)
def test_any_trace_lines_never_quote_the_file(tmp_path_factory, first, rest, fmt):
    path = tmp_path_factory.mktemp("t") / "trace.jsonl"
    path.write_text("\n".join([first, *rest]) + "\n")
    line = _outcome(lambda: read_trace(path, fmt))
    if line is not None:
        assert MARK not in line.removeprefix(f"error: {path}"), line


def test_the_fuzz_strategies_reach_success_and_failure(tmp_path: Path):
    """A guard on the strategies above: the base space loads, so every refusal is the fuzz's."""
    assert _outcome(lambda: parse_space(BASE, tmp_path / "space.yaml")) is None

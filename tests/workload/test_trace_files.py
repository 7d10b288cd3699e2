"""Reading trace files: each format, selection (window, cap, speed) and every bad-input case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.workload import RequestOptions, TraceFileError, WorkloadSpec, generate_trace
from autotune.workload.files import read_trace

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2224670,879,55
"""
BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,230,1317,Conversation log
118,GPT-4,417,276,693,Conversation log
"""


def mooncake(rows: list[tuple[int, int, int, list[int]]]) -> str:
    return "".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
                   for t, i, o, h in rows)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_csv(tmp_path):
    fmt, rows = read_trace(write(tmp_path, "a.csv", AZURE), "auto")
    assert fmt == "azure"
    assert [(r.prompt_tokens, r.output_tokens, r.line) for r in rows] == [(374, 44, 2), (396, 109, 3), (879, 55, 4)]
    assert rows[1].t_s - rows[0].t_s == pytest.approx(4.314579)


def test_burstgpt_csv_ignores_its_other_columns(tmp_path):
    fmt, rows = read_trace(write(tmp_path, "b.csv", BURSTGPT), "auto")
    assert fmt == "burstgpt"
    assert [(r.t_s, r.prompt_tokens, r.output_tokens) for r in rows] == [(5, 472, 18), (45, 1087, 230), (118, 417, 276)]


def test_mooncake_jsonl_ms_and_hash_ids(tmp_path):
    p = write(tmp_path, "m.jsonl", mooncake([(0, 6758, 500, [0, 1, 2]), (3000, 2290, 316, [0, 3])]))
    fmt, rows = read_trace(p, "auto")
    assert fmt == "mooncake"
    assert rows[1].t_s == 3.0 and rows[1].hash_ids == (0, 3) and rows[0].options is None


def test_autotune_jsonl_with_options(tmp_path):
    lines = [{"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10},
             {"arrival_s": 0.5, "prompt_tokens": 200, "output_tokens": 20, "prompt_logprobs": 5, "n": 2}]
    p = write(tmp_path, "t.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n\n")  # trailing blank lines are fine
    fmt, rows = read_trace(p, "auto")
    assert fmt == "autotune"
    assert rows[0].options is None and rows[1].options == RequestOptions(prompt_logprobs=5, n=2)


def test_window_cap_and_speed(tmp_path):
    p = write(tmp_path, "m.jsonl", mooncake([(t * 1000, 100 + t, 5, []) for t in range(10)]))  # one a second
    _, rows = read_trace(p, "auto", start_s=2, end_s=7)
    assert [r.prompt_tokens for r in rows] == [102, 103, 104, 105, 106]
    _, rows = read_trace(p, "auto", start_s=2, limit=3)
    assert [r.prompt_tokens for r in rows] == [102, 103, 104]
    spec = WorkloadSpec(trace={"path": str(p), "speed": 4.0, "start_s": 2}, num_requests=3, concurrency=None).loaded()
    assert spec.num_requests == 3 and spec.arrivals == "trace"
    trace = generate_trace(spec)
    # Replayed at 4x the recorded rate, from the window's first request.
    assert [t.arrival_s for t in trace] == [0.0, 0.25, 0.5]
    assert [t.prompt_len for t in trace] == [102, 103, 104]


def test_fewer_requests_than_num_requests_replays_them_all(tmp_path):
    p = write(tmp_path, "a.csv", AZURE)
    spec = WorkloadSpec(trace={"path": str(p)}).loaded()  # num_requests defaults to 1000
    assert spec.num_requests == 3 and len(generate_trace(spec)) == 3


BAD = [
    ("malformed-json", "m.jsonl", mooncake([(0, 10, 5, [])]) + "{not json\n", 2, "malformed line"),
    ("malformed-csv-row", "a.csv", AZURE + "2023-11-16 18:16:00.0,12\n", 5, "malformed line: 2 fields"),
    ("missing-column", "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,374\n", 1,
     "missing column 'GeneratedTokens'"),
    ("missing-key", "m.jsonl", '{"timestamp": 0, "input_length": 10}\n', 1, "missing key 'output_length'"),
    ("negative-timestamp", "b.csv", BURSTGPT.replace("45,ChatGPT", "-45,ChatGPT"), 3, "negative"),
    ("decreasing-timestamp", "b.csv", BURSTGPT.replace("118,GPT-4", "40,GPT-4"), 4, "before the previous"),
    ("zero-prompt", "m.jsonl", mooncake([(0, 10, 5, []), (1, 0, 5, [])]), 2, "zero-length prompt"),
    ("zero-output", "b.csv", BURSTGPT.replace("1087,230", "1087,0"), 3, "BurstGPT_without_fails"),
    ("unknown-format", "x.txt", "time,in,out\n1,2,3\n", 1, "unknown trace format"),
    ("unknown-json-keys", "x.jsonl", '{"t": 0, "len": 3}\n', 1, "unknown trace format"),
    ("not-integer", "b.csv", BURSTGPT.replace("472,18", "47.5,18"), 2, "must be an integer"),
    ("bad-option", "t.jsonl", '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, "n": 0}\n', 1, "n must be >= 1"),
    ("unknown-key", "t.jsonl", '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, "temp": 1}\n', 1,
     "unknown key; the autotune format knows"),
]


@pytest.mark.parametrize(("name", "file", "text", "line", "problem"), BAD, ids=[b[0] for b in BAD])
def test_bad_trace_names_file_line_and_problem(tmp_path, name, file, text, line, problem):
    p = write(tmp_path, file, text)
    with pytest.raises(TraceFileError) as e:
        read_trace(p, "auto")
    msg = str(e.value)
    assert msg.startswith(f"{p} line {line}: ") and problem in msg and "\n" not in msg


def test_explicit_format_must_match_the_file(tmp_path):
    p = write(tmp_path, "b.csv", BURSTGPT)
    with pytest.raises(TraceFileError, match="line 1: missing column 'TIMESTAMP'"):
        read_trace(p, "azure")


def test_missing_file_and_empty_window(tmp_path):
    with pytest.raises(TraceFileError, match="no such trace file"):
        read_trace(tmp_path / "nope.jsonl", "auto")
    with pytest.raises(TraceFileError, match="no requests in the selected window"):
        read_trace(write(tmp_path, "b.csv", BURSTGPT), "auto", start_s=500)

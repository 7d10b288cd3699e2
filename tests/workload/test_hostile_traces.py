"""A trace path can point at any file: refused in one line that names the file and line and
what was expected, never quoting the file; memory stays bounded whatever the file holds."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
import yaml

from autotune.workload import TraceFileError
from autotune.workload.files import MAX_LINE_BYTES, read_trace
from tests.conftest import run_cli
from tests.workload.test_bad_trace_cli import trace_space

MARK = "hf_planted_SECRET_9f8e7d"

# Each file fails on a field, key or header holding MARK: the message must not carry it.
CONTENT_CASES = [
    ("header", "x.csv", f"{MARK},ContextTokens\n1,2\n", "azure", "line 1: missing column 'TIMESTAMP'"),
    ("unknown-format", "x.txt", f"{MARK}\n", "auto", "line 1: unknown trace format"),
    ("json-keys", "x.jsonl", json.dumps({MARK: 1}) + "\n", "auto", "line 1: unknown trace format"),
    ("unknown-key", "x.jsonl", json.dumps({"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, MARK: 1}) + "\n",
     "auto", "line 1: unknown key;"),
    ("near-miss-key", "x.jsonl", json.dumps({"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5,
                                             "prompt_logprob": 1}) + "\n", "auto", "did you mean 'prompt_logprobs'?"),
    ("text-number", "x.jsonl", json.dumps({"arrival_s": MARK, "prompt_tokens": 5, "output_tokens": 5}) + "\n",
     "auto", "line 1: arrival_s must be a number, got text"),
    ("text-int", "b.csv", f"Timestamp,Request tokens,Response tokens\n1,{MARK},3\n", "auto",
     "line 2: Request tokens must be an integer, got text"),
    ("azure-time", "a.csv", f"TIMESTAMP,ContextTokens,GeneratedTokens\n{MARK},3,4\n", "auto",
     "line 2: TIMESTAMP is not a date-time"),
    ("deep-json", "x.jsonl", "[" * 100_000 + "\n", "autotune", "line 1: malformed line: JSON nested too deeply"),
    ("huge-int", "x.jsonl", '{"arrival_s": 0, "prompt_tokens": ' + "9" * 5000 + ', "output_tokens": 1}\n', "auto",
     "line 1: malformed line: a number out of range"),
]


@pytest.mark.parametrize(("name", "file", "text", "fmt", "expect"), CONTENT_CASES, ids=[c[0] for c in CONTENT_CASES])
def test_no_message_quotes_the_file(tmp_path, name, file, text, fmt, expect):
    p = tmp_path / file
    p.write_text(text)
    with pytest.raises(TraceFileError) as e:
        read_trace(p, fmt)
    msg = str(e.value)
    assert msg.startswith(f"{p} line ") and expect in msg, msg
    assert MARK not in msg and "SECRET" not in msg and "\n" not in msg and len(msg) < 600


def test_proc_environ_through_the_cli_leaks_nothing(tmp_path, monkeypatch, capsys):
    """The issue's repro: the whole environment, HF_TOKEN included, used to be the error."""
    monkeypatch.setenv("HF_TOKEN", MARK)
    space = trace_space(tmp_path, Path("/proc/self/environ"))
    d = yaml.safe_load(space.read_text())
    d["workload"]["trace"]["format"] = "azure"  # as in the issue: the header check used to quote line 1
    space.write_text(yaml.safe_dump(d))
    code, out, err = run_cli(["simulate", "--space", str(space), "--json"], capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "/proc/self/environ: a /proc file, not a regular file" in err
    assert MARK not in err and "PATH=" not in err


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "dir", "fifo", "/proc/self/environ", "/sys/kernel/mm",
                                    "link-to-environ"])
def test_only_regular_files_are_read(tmp_path, target):
    if target == "dir":
        path = tmp_path
    elif target == "link-to-environ":
        path = tmp_path / "trace.csv"
        path.symlink_to("/proc/self/environ")  # judged by what is opened, not by the name
    elif target == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)  # no writer: opening it for reading must not block
    else:
        path = Path(target)
        if not path.exists():
            pytest.skip(f"{target} absent here")
    with pytest.raises(TraceFileError) as e:
        read_trace(path, "auto")
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and ("regular file" in msg or "is a directory" in msg), msg


def _peak_mib(fn) -> tuple[float, str]:
    tracemalloc.start()
    try:
        try:
            fn()
            msg = ""
        except TraceFileError as e:
            msg = str(e)
        return tracemalloc.get_traced_memory()[1] / 2**20, msg
    finally:
        tracemalloc.stop()


def test_a_50mb_one_line_json_is_refused_in_bounded_memory(tmp_path):
    """It used to be read whole and returned as a 47 MB error line."""
    p = tmp_path / "big.jsonl"
    with p.open("w") as f:
        f.write('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, "pad": "')
        chunk = "A" * (1 << 20)
        for _ in range(50):
            f.write(chunk)
        f.write('"}\n')
    peak, msg = _peak_mib(lambda: read_trace(p, "auto"))
    assert f"{p} line 1: line longer than {MAX_LINE_BYTES >> 20} MiB" in msg
    assert peak < 8, f"peak {peak:.1f} MiB"
    assert len(msg) < 300


def test_many_lines_stop_at_the_cap_in_bounded_memory(tmp_path):
    p = tmp_path / "long.jsonl"
    line = json.dumps({"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}) + "\n"
    p.write_text(line * 200_000)
    peak, msg = _peak_mib(lambda: read_trace(p, "auto", limit=100))
    assert msg == "" and peak < 8, f"peak {peak:.1f} MiB"

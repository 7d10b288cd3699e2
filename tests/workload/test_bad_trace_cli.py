"""A bad trace file through `autotune simulate`: one line naming file, line and problem; exit 2;
nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_cli
from tests.workload.test_trace_files import AZURE, BAD, BURSTGPT

SPACE = REPO / "tests" / "data" / "sim_small.yaml"


def trace_space(tmp_path: Path, trace: Path, **workload) -> Path:
    """sim_small.yaml with its synthetic workload replaced by ``trace``."""
    d = yaml.safe_load(SPACE.read_text())
    d["workload"] = {"trace": {"path": str(trace)}, "num_requests": 50, **workload}
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.mark.parametrize(("name", "file", "text", "line", "problem"), BAD, ids=[b[0] for b in BAD])
def test_bad_trace_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, capsys, name, file, text, line,
                                                         problem):
    trace = tmp_path / file
    trace.write_text(text)
    space = trace_space(tmp_path, trace)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    code, out, err = run_cli(["simulate", "--space", str(space), "--json"], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{trace} line {line}: " in err and problem in err
    assert sorted(tmp_path.rglob("*")) == before  # no study, no run directory, nothing


@pytest.mark.parametrize(("name", "text"), [("a.csv", AZURE), ("b.csv", BURSTGPT)])
def test_a_good_trace_simulates(tmp_path, capsys, name, text):
    trace = tmp_path / name
    trace.write_text(text)
    code, out, err = run_cli(["simulate", "--space", str(trace_space(tmp_path, trace)), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["requests"] == 3

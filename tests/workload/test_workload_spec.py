"""The workload schema: old spaces unchanged, arrivals, trace sources, relative paths, pinning."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from pydantic import ValidationError

from autotune.space import load_space
from autotune.workload import TraceFileError, WorkloadSpec, generate_trace

REPO = Path(__file__).resolve().parents[2]
# The spaces written before workloads had traces, arrivals and options: they must load with the
# same closed-loop workload. (The scenario suite's spaces use the new fields on purpose; tests/scenarios
# loads and simulates every search_spaces/*.yaml.)
SPACES = sorted([REPO / "search_spaces" / "qwen72b.yaml", REPO / "search_spaces" / "tiny-cpu.yaml",
                 *REPO.glob("tests/data/*.yaml")])


def mooncake_file(path: Path, n: int = 6) -> Path:
    path.write_text("".join(json.dumps({"timestamp": 500 * i, "input_length": 600 + i, "output_length": 7,
                                        "hash_ids": [0, 1 + i]}) + "\n" for i in range(n)))
    return path


@pytest.mark.parametrize("path", SPACES, ids=[p.name for p in SPACES])
def test_committed_spaces_load_with_the_same_workload(path):
    wl = load_space(path).workload
    assert wl.arrivals == "closed" and wl.closed_loop and wl.trace is None
    trace = generate_trace(wl, 8192)
    assert len(trace) == wl.num_requests and all(t.arrival_s is None for t in trace)
    assert all(t.options.payload() == {} for t in trace)  # no option appears unasked


@pytest.mark.parametrize(("kw", "arrivals"), [
    ({}, "closed"),
    ({"request_rate": 2.0}, "poisson"),
    ({"request_rate": 2.0, "burstiness": 0.5}, "gamma"),
    ({"request_rate": 2.0, "arrivals": "gamma"}, "gamma"),
])
def test_arrivals_are_inferred_from_the_old_fields(kw, arrivals):
    assert WorkloadSpec(**kw).arrivals == arrivals


@pytest.mark.parametrize(("kw", "problem"), [
    ({"arrivals": "poisson"}, "needs workload.request_rate"),
    ({"arrivals": "trace"}, "needs workload.trace"),
    ({"arrivals": "closed", "request_rate": 1.0}, "request_rate is for poisson or gamma"),
    ({"burstiness": 0.5}, "burstiness applies to gamma arrivals"),
    ({"arrivals": "poisson", "request_rate": 1.0, "burstiness": 2}, "use arrivals: gamma"),
    ({"concurrency": None}, "set workload.concurrency"),
    ({"options": {"n": {"fraction": 0.1, "value": 1}}}, "n.value must be >= 2"),
    ({"goodput_slo": {"ttft_s": 0, "tpot_s": 0.1}}, "greater than 0"),
])
def test_bad_workload_fields_are_refused(kw, problem):
    with pytest.raises(ValidationError, match=problem):
        WorkloadSpec(**kw)


def test_a_trace_brings_its_own_lengths(tmp_path):
    p = mooncake_file(tmp_path / "m.jsonl")
    with pytest.raises(ValidationError, match="prompt_len does not apply with a trace"):
        WorkloadSpec(trace={"path": str(p)}, prompt_len={"mean": 100})
    with pytest.raises(ValidationError, match="shared_prefix_len does not apply with a trace"):
        WorkloadSpec(trace={"path": str(p)}, shared_prefix_len=10)
    closed = WorkloadSpec(trace={"path": str(p)}, arrivals="closed").loaded()
    assert closed.closed_loop and all(t.arrival_s is None for t in generate_trace(closed))


def test_relative_trace_paths_are_relative_to_the_space_dir(tmp_path, monkeypatch):
    space_dir = tmp_path / "spaces"
    (space_dir / "traces").mkdir(parents=True)
    mooncake_file(space_dir / "traces" / "m.jsonl")
    monkeypatch.chdir(tmp_path)  # somewhere else: the space's directory decides
    spec = WorkloadSpec.model_validate({"trace": {"path": "traces/m.jsonl"}}).loaded(space_dir)
    assert spec.num_requests == 6 and spec.trace is not None and spec.trace.path == "traces/m.jsonl"
    # The file is read when the workload is loaded, not when it is validated.
    with pytest.raises(TraceFileError, match="no such trace file"):
        WorkloadSpec.model_validate({"trace": {"path": "traces/m.jsonl"}}).loaded()  # no space dir: the cwd


def test_sha256_pins_the_content(tmp_path):
    p = mooncake_file(tmp_path / "m.jsonl")
    spec = WorkloadSpec(trace={"path": str(p)}).loaded()
    assert spec.trace is not None and spec.trace.format == "mooncake" and len(spec.trace.sha256 or "") == 64
    # A dump validates back to the same spec (what a resumed study compares).
    again = WorkloadSpec.model_validate(spec.model_dump(mode="json")).loaded()
    assert again == spec and generate_trace(again) == generate_trace(spec)
    mooncake_file(p, n=5)
    with pytest.raises(TraceFileError, match="content changed since the space pinned it"):
        WorkloadSpec.model_validate(spec.model_dump(mode="json")).loaded()


def test_a_loaded_trace_travels_with_the_spec(tmp_path):
    """Workers on other nodes never see the file: the rows go inside the pickled spec."""
    spec = WorkloadSpec(trace={"path": str(mooncake_file(tmp_path / "m.jsonl"))}).loaded()
    (tmp_path / "m.jsonl").unlink()
    shipped = pickle.loads(pickle.dumps(spec))
    assert generate_trace(shipped) == generate_trace(spec)
    fewer = spec.model_copy(update={"num_requests": 4})
    assert len(generate_trace(fewer)) == 4


def test_validation_reads_no_file_and_an_unread_trace_is_refused(tmp_path):
    """Issue 22: the schema checks what the fields say; the file is read by ``loaded`` (which
    load_space calls), and a spec whose trace was never read says so instead of generating."""
    spec = WorkloadSpec(trace={"path": str(tmp_path / "not-yet.jsonl")})  # no such file: not read yet
    assert spec.trace is not None and spec.trace.sha256 is None
    with pytest.raises(ValueError, match="the trace file was not read"):
        generate_trace(spec)
    with pytest.raises(ValidationError, match="unknown trace format 'csv'; use auto"):
        WorkloadSpec(trace={"path": "t.csv", "format": "csv"})
    with pytest.raises(ValidationError, match="trace.path is empty"):
        WorkloadSpec(trace={"path": " "})

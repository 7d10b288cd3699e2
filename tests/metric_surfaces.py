"""What a user reads about a study's metric, checked on every surface: `autotune status`
(table and --json), the exported config's header and MLflow. They must name the same
metric with the same unit, the registry's (autotune.metrics). Shared by the simulator's and
real vLLM's end-to-end tests."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
from mlflow.tracking import MlflowClient

from autotune.metrics import get
from autotune.study.trials.record import records


def check_surfaces(out: Path, study_name: str, metric: str, slo_metric: str, status_json: str,
                   status_text: str, exported: str) -> None:
    """``status_json``/``status_text``: `autotune status --out OUT [--json]`'s stdout;
    ``exported``: the file `autotune export` wrote. ``metric`` is the objective the export ranks by."""
    m = get(metric)
    rec = json.loads(status_json)["recommended"]
    assert rec is not None and rec["metric"] == metric and rec["unit"] == m.unit, rec
    assert m.label in status_text, status_text  # the table's column: `p95_ttft_s [s]`
    assert re.search(rf"recommended: trial {rec['trial']}, {re.escape(metric)} [0-9.e+-]+ {re.escape(m.unit)} ",
                     status_text), status_text
    assert re.search(rf"# measured: .*{re.escape(metric)}=[0-9.e+-]+ {re.escape(m.unit)}", exported), exported
    assert re.search(rf"# {re.escape(metric)}: [0-9.e+-]+ {re.escape(m.unit)} ", exported), exported
    assert f"study: {study_name}   trial: {rec['trial']}" in exported

    c = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = c.get_experiment_by_name(study_name)
    assert f"`{metric}` ({m.unit})" in exp.tags["mlflow.note.content"]
    runs = c.search_runs([exp.experiment_id], filter_string="tags.`autotune.kind` = 'trial'", max_results=1000)
    served = [r for r in runs if r.data.tags.get("state") == "complete" and "p99_e2e_s" in r.data.metrics]
    assert served and all({metric, slo_metric} <= set(r.data.metrics) for r in served)
    recommended = [r for r in runs if r.data.tags.get("recommended") == "true"]
    assert [int(r.data.tags["autotune.trial_number"]) for r in recommended] == [rec["trial"]]
    assert f"{metric} " in recommended[0].data.tags["evidence"] and f" {m.unit}" in recommended[0].data.tags["evidence"]

    study = optuna.load_study(study_name=study_name, storage=f"sqlite:///{out / 'optuna.db'}")
    told = records(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    assert told and all(f"slo:{slo_metric}" in r.constraints for r in told)  # the SLO reached Optuna

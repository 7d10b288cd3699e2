"""Logging trials to MLflow so they can be compared side by side in the MLflow UI.

Only the study driver talks to MLflow, through one ``MlflowClient`` (no global active
run), so workers never race on the store. Child runs are created after Optuna is told,
and keyed by trial number: a resumed driver logs any told-but-unlogged trial and never
logs one twice.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from mlflow.entities import Metric, Param, RunStatus  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

TRIAL_TAG = "autotune.trial_number"
STUDY_TAG = "autotune.study"
KIND_TAG = "autotune.kind"


@dataclass
class TrialLog:
    """What one child run holds."""

    number: int
    state: str  # complete | failed | rejected
    params: dict[str, Any]  # every flag the trial ran with (fixed + sampled)
    metrics: dict[str, float]
    tags: dict[str, str] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)


class MlflowTracker:
    def __init__(self, tracking_uri: str, artifact_root: Path, study_name: str) -> None:
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.study_name = study_name
        self.experiment_id = self._experiment(study_name, artifact_root)
        self.parent_run_id: str | None = None

    def _experiment(self, name: str, artifact_root: Path) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            return exp.experiment_id
        artifact_root.mkdir(parents=True, exist_ok=True)
        return self.client.create_experiment(name, artifact_location=artifact_root.resolve().as_uri())

    def start_invocation(self, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"{self.study_name}-{time.strftime('%Y%m%d-%H%M%S')}",
            tags={STUDY_TAG: self.study_name, KIND_TAG: "invocation", **tags},
        )
        self.parent_run_id = run.info.run_id
        self.client.log_batch(self.parent_run_id, params=[Param(k, _param_str(v)) for k, v in params.items()])
        return self.parent_run_id

    def end_invocation(self, status: str = "FINISHED", metrics: Mapping[str, float] | None = None) -> None:
        if self.parent_run_id is None:
            return
        if metrics:
            self.client.log_batch(self.parent_run_id, metrics=_metrics(metrics))
        self.client.set_terminated(self.parent_run_id, status=status)

    def logged_trials(self) -> dict[int, str]:
        """Trial number -> child run id, for every trial of this study already logged."""
        out: dict[int, str] = {}
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{KIND_TAG}` = 'trial'",
                max_results=1000,
                page_token=token,
            )
            for r in page:
                n = r.data.tags.get(TRIAL_TAG)
                if n is not None:
                    out.setdefault(int(n), r.info.run_id)
            token = page.token
            if not token:
                return out

    def log_trial(self, t: TrialLog) -> str:
        tags = {
            STUDY_TAG: self.study_name,
            KIND_TAG: "trial",
            TRIAL_TAG: str(t.number),
            "state": t.state,
            **t.tags,
        }
        if self.parent_run_id:
            tags["mlflow.parentRunId"] = self.parent_run_id
        run = self.client.create_run(self.experiment_id, run_name=f"trial-{t.number:04d}", tags=tags)
        rid = run.info.run_id
        params = [Param(k, _param_str(v)) for k, v in sorted(t.params.items())]
        self.client.log_batch(rid, params=params, metrics=_metrics(t.metrics))
        for path in t.artifacts:
            if path.exists():
                self.client.log_artifact(rid, str(path))
        status = RunStatus.to_string(RunStatus.FINISHED if t.state != "failed" else RunStatus.FAILED)
        self.client.set_terminated(rid, status=status)
        return rid

    def tag_pareto(self, logged: Mapping[int, str], pareto: Iterable[int]) -> None:
        front = set(pareto)
        for number, rid in logged.items():
            self.client.set_tag(rid, "pareto", "true" if number in front else "false")

    def log_plots(self, paths: Iterable[Path]) -> None:
        if self.parent_run_id is None:
            return
        for p in paths:
            if p.exists():
                self.client.log_artifact(self.parent_run_id, str(p), artifact_path="plots")


def _param_str(v: Any) -> str:
    s = "None" if v is None else str(v)
    return s[:6000]


def _metrics(values: Mapping[str, float]) -> list[Metric]:
    ts = int(time.time() * 1000)
    out = []
    for k, v in values.items():
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out.append(Metric(k, float(v), ts, 0))
    return out

"""How a study opens in the MLflow UI: its description, two saved views, and links to them.

MLflow 3.17's UI does not read what a client sets to choose columns, charts or even the
page (checked against its source and bundle; docs/tracking.md):

* the classic runs table or the GenAI overview is chosen per browser by the *workflow
  type*, and only the URL's ``workflowType=machine_learning`` overrides it; the experiment
  tag ``mlflow.experimentKind`` is ignored (it is still set: MLflow documents it and older
  UIs read it);
* columns, sort, filter and charts are browser state, except a *shared view*: an
  experiment tag ``mlflow.sharedViewState.<key>`` holding that state, opened by a URL with
  ``viewStateShareKey=<key>``;
* the compare page's parallel-coordinates plot shows the first three differing params and
  the first metric, and no URL can change that; a ``PARALLEL`` chart stored in a shared
  view, opened with ``compareRunsMode=CHART``, shows the axes it names.

So autotune stores two views per experiment and prints links that open them: every trial
as a table (:data:`TRIALS_VIEW`), and vLLM's defaults next to the Pareto trials as charts
(:data:`COMPARE_VIEW`), both with the searched flags, the objectives and the SLO metrics.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from autotune.backend_kinds import is_simulated
from autotune.metrics import get as get_metric
from autotune.space import SearchSpace
from autotune.tracking.naming import abbreviations, for_people

KIND_TAG = "autotune.kind"
# Set to "true" on the baseline (vLLM's defaults), the recommended trial and the Pareto trials:
# what the compare view shows.
COMPARE_TAG = "autotune.compare"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
DESCRIPTION_TAG = "mlflow.note.content"
KIND_OF_EXPERIMENT = ("mlflow.experimentKind", "custom_model_development")
TRIALS_VIEW = "autotune-trials"
COMPARE_VIEW = "autotune-compare"
_SECTION = "autotune"
# The runs table's run-name column (its id in MLflow 3.17's grid) and its width in pixels.
RUN_NAME_COLUMN = "attributes.`Run Name`"
RUN_NAME_WIDTH_PX = 440
# The `evidence` tag: the figures rounded for reading, and what they stand on (tracking/report.py).
EVIDENCE_COLUMN = "tags.`evidence`"
EVIDENCE_WIDTH_PX = 280


def experiment_tags(space: SearchSpace, study: str, experiment_id: str, created_ms: int = 0) -> dict[str, str]:
    """Every experiment tag autotune writes: the description, the kind, the two views
    (``created_ms``: the date the views are listed with, the experiment's own)."""
    return {
        DESCRIPTION_TAG: description(space, study, experiment_id),
        KIND_OF_EXPERIMENT[0]: KIND_OF_EXPERIMENT[1],
        VIEW_TAG_PREFIX + TRIALS_VIEW: _saved_view(f"{study}: all trials", trials_state(space), created_ms),
        VIEW_TAG_PREFIX + COMPARE_VIEW: _saved_view(f"{study}: vLLM defaults, recommended, Pareto front",
                                                    compare_state(space),
                                                    created_ms),
    }


def experiment_path(experiment_id: str) -> str:
    """The experiment's trials, as a table (the part of the URL after the host)."""
    return _runs_path(experiment_id, viewStateShareKey=TRIALS_VIEW)


def compare_path(experiment_id: str) -> str:
    """vLLM's defaults and the Pareto trials, as a parallel-coordinates plot and a scatter."""
    return _runs_path(experiment_id, viewStateShareKey=COMPARE_VIEW, compareRunsMode="CHART")


def invocations_path(experiment_id: str) -> str:
    """One run per `autotune run`, with the Pareto and history plots as artifacts."""
    return _runs_path(experiment_id, searchFilter=f"tags.`{KIND_TAG}` = 'invocation'")


def run_path(experiment_id: str, run_id: str) -> str:
    return f"#/experiments/{experiment_id}/runs/{run_id}?workflowType=machine_learning"


def trials_state(space: SearchSpace) -> dict[str, Any]:
    """Every trial, one row each, by run name: by role, then in trial order.

    The invocation runs the trials are nested under are filtered out, and the order is not
    the start time: sorted by start time (or unsorted and unfiltered) the UI folds child
    runs under their parent, out of the table and out of the charts.
    """
    columns = _columns(space)
    return {
        "searchFilter": f"tags.`{KIND_TAG}` = 'trial'",
        "orderByKey": _col("tags", "mlflow.runName"),
        "orderByAsc": True,
        "selectedColumns": columns,
        # The run name first and wide enough to read (`search-0041 gmu=0.92 mns=128 ...`; the
        # UI's default cuts it at ~20 characters), then the columns in the order listed: the UI
        # applies the widths only together with an order.
        "columnOrder": [RUN_NAME_COLUMN, *columns],
        "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH_PX, EVIDENCE_COLUMN: EVIDENCE_WIDTH_PX},
        "compareRunCharts": _charts(space),
        # One chart per row: a parallel-coordinates plot needs the width for its axes.
        "compareRunSections": [{"uuid": _SECTION, "name": "autotune", "display": True, "isReordered": False,
                                "columns": 1, "cardHeight": 420}],
        "isAccordionReordered": False,
        "runsHiddenMode": "SHOW_ALL",
    }


def compare_state(space: SearchSpace) -> dict[str, Any]:
    """The trials view narrowed to vLLM's defaults and the Pareto front."""
    return {**trials_state(space), "searchFilter": f"tags.`{COMPARE_TAG}` = 'true'"}


def description(space: SearchSpace, study: str, experiment_id: str) -> str:
    """The experiment's description (markdown): what was tuned, the space, the objectives,
    and how to compare the trials."""
    e = space.engine
    sim = " (SIMULATED figures, not GPU measurements)" if is_simulated(e.backend) else ""
    objectives = ", ".join(f"{o.direction} `{o.metric}` ({get_metric(o.metric).unit})" for o in space.objectives)
    short = abbreviations(space.params, [n for n, p in space.params.items() if p.type == "bool"])
    lines = [
        f"**autotune study `{study}`**: Bayesian search (Optuna) over `vllm serve` flags for **{e.model}** "
        f"on **{e.gpu}**, backend `{e.backend}`{sim}.",
        "",
        f"**Objectives**: {objectives}.",
    ]
    if space.slo:
        lines.append("**SLOs** (a trial outside them is infeasible): "
                     + ", ".join(_slo(name, s.max, s.min) for name, s in space.slo.items()) + ".")
    lines += [
        f"**Workload** (the same for every trial): {_workload(space)}.",
        "**Fixed flags**: " + (", ".join(f"`{k}={for_people(v)}`" for k, v in e.flags.items()) or "none") + ".",
        "",
        "**Searched flags** (short name in run names):",
        *(f"- `{name}` ({short[name]}): {_range(p)}" for name, p in space.params.items()),
        "",
        "**How to compare**: one run per trial, named `role-number` and the searched flags. "
        "Roles: `baseline` (vLLM's defaults, measured first), `reference` (hand-tuned configs of the space), "
        "`search` (sampled), `confirm` (a repeat of the trial named after it), `rejected` (ruled out without "
        "launching). Tags: `recommended` (the config `autotune export` writes and `autotune status` marks R; "
        "the experiment's `autotune.recommended_trial` names it), `pareto` (on the Pareto front, configs at the "
        "mean of their runs), `evidence` (a single run, or the mean of how many), `feasible`, `failure_class`. "
        "A config measured more than once has `mean.<metric>` and its 95 % interval `ci95_low.<metric>` to "
        "`ci95_high.<metric>` on its first run.",
        f"- [All trials]({experiment_path(experiment_id)}): objectives, SLO metrics and searched flags as columns.",
        f"- [vLLM defaults, the recommendation and the Pareto front]({compare_path(experiment_id)}): a "
        "parallel-coordinates plot of the searched flags and the objectives, and the objectives against each other.",
        f"- [Invocations]({invocations_path(experiment_id)}): one run per `autotune run`, with the Pareto front and "
        "optimisation history plots.",
        "",
        "`autotune ui --out <run dir>` serves this store and prints these links.",
    ]
    return "\n".join(lines)


def _runs_path(experiment_id: str, **query: str) -> str:
    q = urllib.parse.urlencode({"workflowType": "machine_learning", **query}, quote_via=urllib.parse.quote)
    return f"#/experiments/{experiment_id}/runs?{q}"


def _saved_view(name: str, state: dict[str, Any], created_ms: int) -> str:
    # MLflow 3.17's saved-view envelope: the view is listed by name in the UI's "Views" menu.
    return json.dumps({"name": name, "createdAt": created_ms, "state": json.dumps(state)})


def _col(kind: str, key: str) -> str:
    return f"{kind}.`{key}`"  # the UI's canonical column key


def _columns(space: SearchSpace) -> list[str]:
    slo = [m for m in space.slo if m not in space.objective_names]
    # A config measured more than once: its mean and 95 % interval on the trial that stands
    # for it (tracking/report.py), next to the run's own figures; `evidence` says which is which.
    means = [f"{k}.{m}" for m in space.objective_names for k in ("mean", "ci95_low", "ci95_high")
             if not (m == "oom_per_1k" and k != "mean")]
    return [
        # What a first look needs, left to right: what the figures stand on, the objectives,
        # which trial is recommended and on the front; then the rest.
        EVIDENCE_COLUMN,
        *(_col("metrics", m) for m in space.objective_names),
        _col("tags", "recommended"),
        _col("tags", "pareto"),
        _col("tags", "role"),
        *(_col("metrics", m) for m in slo),
        *(_col("metrics", m) for m in means),
        _col("tags", "feasible"),
        _col("attributes", "Duration"),
        *(_col("params", p) for p in space.params),
    ]


def _charts(space: SearchSpace) -> list[dict[str, Any]]:
    common = {"metricSectionId": _SECTION, "deleted": False, "isGenerated": False, "runsCountToCompare": 100}
    charts: list[dict[str, Any]] = [{
        **common, "uuid": "autotune-parallel", "type": "PARALLEL", "showAllRuns": True,
        "selectedParams": list(space.params), "selectedMetrics": list(space.objective_names),
    }]
    names = space.objective_names
    if len(names) >= 2:
        charts.append({**common, "uuid": "autotune-objectives", "type": "SCATTER",
                       "xaxis": {"key": names[1], "type": "METRIC"}, "yaxis": {"key": names[0], "type": "METRIC"}})
    return charts


def _slo(name: str, hi: float | None, lo: float | None) -> str:
    return f"`{name}` <= {for_people(hi)}" if hi is not None else f"`{name}` >= {for_people(lo)}"


def _range(p: Any) -> str:
    if p.type == "bool":
        return "on or off"
    if p.type == "categorical":
        return "one of " + ", ".join(for_people(c) for c in p.choices or [])
    num = (lambda x: str(int(x))) if p.type == "int" else for_people  # YAML's 16 arrives as 16.0
    scale = ", log scale" if p.log else (f", step {num(p.step)}" if p.step is not None else "")
    return f"{num(p.low)} to {num(p.high)}{scale}"


def _workload(space: SearchSpace) -> str:
    w = space.workload
    if w.trace is not None:
        how = "replayed from a trace"
    elif w.request_rate is not None:
        how = f"at {for_people(w.request_rate)} req/s"
    else:
        how = f"{w.concurrency} concurrent"
    return f"{w.num_requests} requests, {how}"

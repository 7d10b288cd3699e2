"""The experiment's description, its two saved views and the links to them, as MLflow 3.17's UI reads them.

The browser test (tests/ui) checks that the UI does what these say; these check what is
stored, for any space (objectives, SLOs, every searched flag), cheaply.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import yaml

from autotune.space.loader import load_space, parse_space
from autotune.tracking import views
from tests.conftest import with_setting

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


def _space_with_slo():
    path = DATA / "sim_small.yaml"
    data = with_setting(yaml.safe_load(path.read_text()), "slo", {"p99_ttft_s": {"max": 2.0},
                                                                  "output_tok_per_s": {"min": 500}})
    return parse_space(data, path)


def _state(tags: dict[str, str], key: str) -> dict:
    envelope = json.loads(tags[views.VIEW_TAG_PREFIX + key])
    assert envelope["name"] and isinstance(envelope["createdAt"], int)
    return json.loads(envelope["state"])


def test_views_show_objectives_slo_metrics_and_searched_flags_as_columns():
    space = _space_with_slo()
    tags = views.experiment_tags(space, "s", "7")
    for key in (views.TRIALS_VIEW, views.COMPARE_VIEW):
        cols = _state(tags, key)["selectedColumns"]
        for metric in ("oom_per_1k", "p99_e2e_s", "p99_ttft_s", "output_tok_per_s"):
            assert f"metrics.`{metric}`" in cols
        for flag in space.params:
            assert f"params.`{flag}`" in cols
        assert "tags.`pareto`" in cols and "tags.`role`" in cols


def test_trials_view_lists_trials_flat_and_compare_view_the_baseline_and_front():
    tags = views.experiment_tags(_space_with_slo(), "s", "7")
    trials, compare = _state(tags, views.TRIALS_VIEW), _state(tags, views.COMPARE_VIEW)
    assert trials["searchFilter"] == "tags.`autotune.kind` = 'trial'"
    assert compare["searchFilter"] == "tags.`autotune.compare` = 'true'"
    for state in (trials, compare):
        # Sorted by start time the UI folds child runs under their invocation run.
        assert state["orderByKey"] != "attributes.start_time"
        assert state["runsHiddenMode"] == "SHOW_ALL"


def test_the_parallel_coordinates_chart_names_every_searched_flag_and_objective():
    space = _space_with_slo()
    charts = _state(views.experiment_tags(space, "s", "7"), views.COMPARE_VIEW)["compareRunCharts"]
    (parallel,) = [c for c in charts if c["type"] == "PARALLEL"]
    assert parallel["selectedParams"] == list(space.params)
    assert parallel["selectedMetrics"] == ["oom_per_1k", "p99_e2e_s"]
    (scatter,) = [c for c in charts if c["type"] == "SCATTER"]
    assert {scatter["xaxis"]["key"], scatter["yaxis"]["key"]} == {"oom_per_1k", "p99_e2e_s"}
    sections = {s["uuid"] for s in _state(views.experiment_tags(space, "s", "7"), views.COMPARE_VIEW)["compareRunSections"]}
    assert all(c["metricSectionId"] in sections for c in charts)


def test_links_open_the_classic_runs_table_with_the_views():
    for path in (views.experiment_path("7"), views.compare_path("7")):
        assert path.startswith("#/experiments/7/runs?")
        query = urllib.parse.parse_qs(path.split("?", 1)[1])
        assert query["workflowType"] == ["machine_learning"]  # not MLflow's GenAI overview
    assert urllib.parse.parse_qs(views.compare_path("7").split("?", 1)[1])["compareRunsMode"] == ["CHART"]
    assert "viewStateShareKey=" + views.TRIALS_VIEW in views.experiment_path("7")


def test_description_says_what_was_tuned_and_how_to_compare():
    space = _space_with_slo()
    text = views.experiment_tags(space, "sim_small", "7")[views.DESCRIPTION_TAG]
    assert "Qwen/Qwen2.5-72B-Instruct" in text and "A100-80GB" in text and "SIMULATED" in text
    assert "minimize `oom_per_1k`" in text and "minimize `p99_e2e_s`" in text
    assert "`p99_ttft_s` <= 2.0" in text and "`output_tok_per_s` >= 500" in text
    assert "`gpu_memory_utilization` (gmu): 0.85 to 0.98, step 0.005" in text
    assert "`max_num_seqs` (mns): 16 to 256, log scale" in text
    assert "`block_size` (bs): one of 16, 32" in text
    assert views.compare_path("7") in text and views.experiment_path("7") in text
    assert "hf_planted_secret_value" not in text  # engine.env never reaches MLflow


def test_experiment_tags_fit_mlflows_limit_for_the_shipped_spaces():
    for path in sorted((REPO / "search_spaces").glob("*.yaml")):
        tags = views.experiment_tags(load_space(path), path.stem, "123")
        assert tags["mlflow.experimentKind"] == "custom_model_development"
        assert max(len(v) for v in tags.values()) <= 20000  # MLflow's experiment tag value limit

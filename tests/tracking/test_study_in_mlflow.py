"""`autotune run` as a user runs it, from a directory of their own: what MLflow ends up holding.

Real Ray (logical GPUs), real Optuna SQLite, real MLflow SQLite: each trial's run carries
the trial's start and end as Optuna recorded them, a readable name, rounded params; the
experiment carries its description and views; nothing lands in the working directory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient

from autotune.space import load_space
from autotune.study.trials.record import TrialRecord
from autotune.tracking.mlflow_tracker import REPEAT_RUN_TAG, REPEAT_TAG
from autotune.tracking.report import run_name
from autotune.tracking.views import COMPARE_TAG, DESCRIPTION_TAG, VIEW_TAG_PREFIX
from tests.conftest import run_cli, with_setting

DATA = Path(__file__).resolve().parents[1] / "data"
SPACE_PATH = DATA / "sim_small.yaml"


@pytest.fixture(scope="module")
def study_from_elsewhere(ray_cluster, tmp_path_factory):
    """A small study run by the CLI from an empty working directory, twice (a resume)."""
    base = tmp_path_factory.mktemp("cwd-test")
    cwd, out, space_path = base / "cwd", base / "run", base / "sim_small.yaml"
    cwd.mkdir()
    # One confirmation run: the search's best config measured once more.
    data = with_setting(yaml.safe_load(SPACE_PATH.read_text()), "study.confirm", {"finalists": 1, "repeats": 1})
    space_path.write_text(yaml.safe_dump(data, sort_keys=False))
    mp = pytest.MonkeyPatch()
    mp.chdir(cwd)
    try:
        for trials in (3, 5):  # the second invocation resumes the study
            code = _run(["run", "--space", str(space_path), "--out", str(out), "--trials", str(trials),
                         "--progress", "none"])
            assert code == 0
    finally:
        mp.undo()
    return cwd, out, space_path


def _run(args: list[str]) -> int:
    class _Capture:  # run_cli wants capsys; output is not what this module checks
        def readouterr(self):
            return "", ""

    code, _, _ = run_cli(args, _Capture())
    return code


def _client(out: Path) -> MlflowClient:
    return MlflowClient(f"sqlite:///{out / 'mlflow.db'}")


def test_nothing_lands_in_the_working_directory_and_no_default_experiment_shows(study_from_elsewhere):
    cwd, out, _ = study_from_elsewhere
    assert list(cwd.iterdir()) == []  # no mlruns/, mlflow.db or mlartifacts/
    client = _client(out)
    assert [e.name for e in client.search_experiments()] == ["sim_small"]
    default = client.get_experiment("0")
    assert default.lifecycle_stage == "deleted"
    assert default.artifact_location.startswith(out.resolve().as_uri())


def test_runs_show_the_trials_real_times_names_and_rounded_params(study_from_elsewhere):
    _, out, space_path = study_from_elsewhere
    space = load_space(space_path)
    study = optuna.load_study(study_name="sim_small", storage=f"sqlite:///{out / 'optuna.db'}")
    client = _client(out)
    exp = client.get_experiment_by_name("sim_small")
    runs = {int(r.data.tags["autotune.trial_number"]): r
            for r in client.search_runs([exp.experiment_id], "tags.`autotune.kind` = 'trial'")}
    finished = [t for t in study.trials if t.state.is_finished()]
    assert sorted(runs) == [t.number for t in finished]
    for t in finished:
        run = runs[t.number]
        assert run.info.start_time == int(t.datetime_start.timestamp() * 1000)
        assert run.info.end_time == int(t.datetime_complete.timestamp() * 1000)  # rejected ones too
        assert run.info.run_name == run_name(TrialRecord.from_frozen(t), space)
        for name, value in run.data.params.items():  # 0.92, never 0.9199999999999999
            assert not re.fullmatch(r"-?\d+\.\d{7,}", value), f"{name}={value}"
    assert runs[0].info.run_name.startswith("baseline-0000 vllm-defaults gmu=")
    assert sum(r.data.tags[COMPARE_TAG] == "true" for r in runs.values()) >= 1


def test_a_confirmation_run_is_linked_to_the_trial_it_repeats(study_from_elsewhere):
    _, out, _ = study_from_elsewhere
    study = optuna.load_study(study_name="sim_small", storage=f"sqlite:///{out / 'optuna.db'}")
    confirms = [r for r in map(TrialRecord.from_frozen, study.trials) if r.repeat_of is not None]
    assert confirms, "the space asks for one confirmation run"
    client = _client(out)
    exp = client.get_experiment_by_name("sim_small")
    runs = {int(r.data.tags["autotune.trial_number"]): r
            for r in client.search_runs([exp.experiment_id], "tags.`autotune.kind` = 'trial'")}
    for c in confirms:
        run = runs[c.number]
        assert run.data.tags["role"] == "confirm"
        assert run.data.tags[REPEAT_TAG] == str(c.repeat_of)
        assert run.data.tags[REPEAT_RUN_TAG] == runs[c.repeat_of].info.run_id
        assert f"repeats-{c.repeat_of:04d}" in run.info.run_name


def test_the_experiment_carries_its_description_and_views_once(study_from_elsewhere):
    _, out, _ = study_from_elsewhere
    exp = _client(out).get_experiment_by_name("sim_small")
    assert "autotune study `sim_small`" in exp.tags[DESCRIPTION_TAG]
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    views = sorted(k for k in exp.tags if k.startswith(VIEW_TAG_PREFIX))
    assert views == [VIEW_TAG_PREFIX + "autotune-compare", VIEW_TAG_PREFIX + "autotune-trials"]
    for key in views:  # dated by the experiment, so a resumed driver finds them unchanged
        assert json.loads(exp.tags[key])["createdAt"] == exp.creation_time

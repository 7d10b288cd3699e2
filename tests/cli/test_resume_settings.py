"""A resume may change what the study's fingerprint leaves free (the export rule's settings, the
confirmation, the budget). The run directory's copy of the space then holds the new settings, so
status and the export read what MLflow was told; a resume the fingerprint refuses leaves the copy
as it was, and so does a second study sent to the same run directory. Real Ray (logical GPUs), Optuna SQLite and MLflow SQLite, the simulator backend."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from autotune.rundir import RunDir
from autotune.space.loader import load_space
from autotune.tracking.report import RECOMMENDED_TAG
from tests.conftest import run_cli, with_setting

SPACE = Path(__file__).resolve().parents[1] / "data" / "sim_small.yaml"


def _run(space: dict, tmp_path: Path, out: Path, trials: int, capsys) -> tuple[int, str]:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    code, _, err = run_cli(["run", "--space", str(path), "--out", str(out), "--trials", str(trials),
                            "--progress", "none"], capsys)
    return code, err


def test_a_resume_with_new_export_settings_is_what_status_export_and_mlflow_read(ray_cluster, tmp_path, capsys):
    out = tmp_path / "run"
    first = yaml.safe_load(SPACE.read_text())
    assert _run(first, tmp_path, out, 3, capsys)[0] == 0
    rd = RunDir(out)
    assert load_space(rd.space_copy).export.min_headroom_gib == 1.0

    resumed = with_setting(first, "export.min_headroom_gib", 7.5)
    code, err = _run(resumed, tmp_path, out, 4, capsys)
    assert code == 0, err
    assert load_space(rd.space_copy).export.min_headroom_gib == 7.5
    assert "hf_planted_secret_value" not in rd.space_copy.read_text()  # rewritten masked, as the first copy

    code, text, err = run_cli(["status", "--out", str(out), "--json"], capsys)
    assert code == 0, err
    rec = json.loads(text)["recommended"]["trial"]
    exp = MlflowClient(rd.mlflow_url).get_experiment_by_name("sim_small")
    assert exp.tags[RECOMMENDED_TAG] == str(rec)
    target = tmp_path / "deploy.yaml"
    code, _, err = run_cli(["export", "--out", str(out), "-o", str(target)], capsys)
    assert code == 0, err
    head = target.read_text()
    assert f"# recommended trial: {rec} " in head and "required margin 7.5 GiB" in head

    before = rd.space_copy.read_bytes()
    refused = with_setting(resumed, "workload.num_requests", 300)  # another landscape: a new study's
    code, err = _run(refused, tmp_path, out, 5, capsys)
    assert code != 0 and "created from a different space" in err
    assert rd.space_copy.read_bytes() == before


def test_a_second_study_in_the_same_run_directory_is_refused_before_anything_is_written(ray_cluster, tmp_path,
                                                                                          capsys):
    import optuna

    out = tmp_path / "run"
    space = yaml.safe_load(SPACE.read_text())
    assert _run(space, tmp_path, out, 2, capsys)[0] == 0
    rd = RunDir(out)
    before = rd.space_copy.read_bytes()
    assert yaml.safe_load(before)["study"]["name"] == "sim_small"  # the name the run gave the study
    path = tmp_path / "space.yaml"
    code, _, err = run_cli(["run", "--space", str(path), "--out", str(out), "--study", "other", "--trials", "2",
                            "--progress", "none"], capsys)
    assert code == 2 and "holds study 'sim_small'" in err and "another --out" in err and "Traceback" not in err
    assert rd.space_copy.read_bytes() == before
    assert optuna.get_all_study_names(rd.optuna_url) == ["sim_small"]


def test_a_directory_where_the_copy_goes_is_one_line_before_anything_is_created(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "space.yaml").mkdir(parents=True)
    path = tmp_path / "space.yaml"
    path.write_text(SPACE.read_text())
    code, _, err = run_cli(["run", "--space", str(path), "--out", str(out), "--trials", "2", "--progress", "none"],
                           capsys)
    assert code == 2 and "space.yaml: not a file" in err and "move it aside" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["space.yaml"]  # no optuna.db, no mlflow.db

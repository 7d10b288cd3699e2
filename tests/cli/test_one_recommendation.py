"""One answer to "which config?": `status --json`, MLflow's tags and the export header name the
same trial, on a study whose lowest single p99 is a lucky run (tests/cli/recommendation_study.py);
and a trial that never served reads as a failure, with its whole reason."""

from __future__ import annotations

import json
import re

import optuna
import yaml
from mlflow.tracking import MlflowClient
from optuna.distributions import FloatDistribution, IntDistribution

from autotune.rundir import RunDir
from autotune.space.loader import load_space
from autotune.study.analysis.pareto import FrontCache
from autotune.study.loop.callbacks import StudyContext, Tally
from autotune.study.storages.recovery import Coordinator
from autotune.study.storages.storage import storage_from_url
from autotune.study.trials.record import Role, State, TrialRecord
from autotune.tracking.callback import MlflowLogger
from autotune.tracking.report import EVIDENCE_TAG, RECOMMENDED_TAG
from autotune.tracking.views import COMPARE_TAG
from tests.cli.recommendation_study import (
    LUCKY,
    NEVER_SERVED,
    RECOMMENDED,
    SINGLE,
    STARTUP_FAILURE,
    STUDY,
    lucky_study,
)
from tests.conftest import run_cli


def _log_to_mlflow(rd, name: str = STUDY) -> MlflowClient:
    """What `autotune run`'s MLflow callback writes at the start and end of an invocation."""
    study = optuna.load_study(study_name=name, storage=rd.optuna_url)
    space = load_space(rd.space_copy)
    logger = MlflowLogger(rd.mlflow_url, rd, {"study": name}, {})
    logger.on_study_start(StudyContext(study, space, len(study.trials), Tally(), FrontCache(study), Coordinator(study)))
    logger.on_study_end("FINISHED")
    return MlflowClient(rd.mlflow_url)


def test_status_mlflow_and_export_name_the_same_recommended_trial(tmp_path, capsys):
    rd = lucky_study(tmp_path / "run")
    code, out, err = run_cli(["status", "--out", str(rd.root), "--json"], capsys)
    assert code == 0, err
    st = json.loads(out)
    rec = st["recommended"]
    assert rec["trial"] == RECOMMENDED and rec["confirmed"] and rec["runs"] == 3 and "confirmed" in rec["rule"]
    assert [t["number"] for t in st["trials"] if t["recommended"]] == [RECOMMENDED]
    # The front is on confirmed means: the lucky run's config averages 26.7 s, so it is off.
    assert st["pareto"] == [RECOMMENDED, SINGLE] and st["pareto_runs"] == {str(RECOMMENDED): 3, str(SINGLE): 1}
    assert LUCKY not in st["pareto"]

    client = _log_to_mlflow(rd)
    exp = client.get_experiment_by_name(STUDY)
    assert exp.tags[RECOMMENDED_TAG] == str(RECOMMENDED)
    parent = client.search_runs([exp.experiment_id], "tags.`autotune.kind` = 'invocation'")[0]
    assert parent.data.tags[RECOMMENDED_TAG] == str(RECOMMENDED)
    runs = {int(r.data.tags["autotune.trial_number"]): r for r in
            client.search_runs([exp.experiment_id], "tags.`autotune.kind` = 'trial'")}
    assert [n for n, r in runs.items() if r.data.tags.get("recommended") == "true"] == [RECOMMENDED]
    compared = sorted(n for n, r in runs.items() if r.data.tags.get(COMPARE_TAG) == "true")
    assert compared == [0, RECOMMENDED, SINGLE]  # vLLM's defaults, the recommendation, the front
    mean = runs[RECOMMENDED].data.metrics
    assert abs(mean["mean.p99_e2e_s"] - (25.8 + 26.0 + 25.9) / 3) < 1e-9 and mean["runs"] == 3
    assert mean["ci95_low.p99_e2e_s"] < mean["mean.p99_e2e_s"] < mean["ci95_high.p99_e2e_s"]
    assert runs[RECOMMENDED].data.metrics["p99_e2e_s"] == 25.8  # the run's own figure stays
    assert runs[SINGLE].data.tags[EVIDENCE_TAG] == "single run: p99_e2e_s 25.5 s"
    assert runs[NEVER_SERVED].data.tags[EVIDENCE_TAG].startswith("never served")
    assert runs[RECOMMENDED].data.tags[EVIDENCE_TAG].startswith("mean of 3 runs")

    target = tmp_path / "deploy.yaml"
    code, out, err = run_cli(["export", "--out", str(rd.root), "-o", str(target)], capsys)
    assert code == 0, err
    head = target.read_text()
    assert re.search(r"^# study: lucky\s+trial: (\d+)", head, re.M).group(1) == str(RECOMMENDED)
    assert f"# recommended trial: {RECOMMENDED} " in head


def test_a_trial_that_never_served_reads_as_failed_with_its_whole_reason(tmp_path, capsys, monkeypatch):
    rd = lucky_study(tmp_path / "run")
    code, out, err = run_cli(["status", "--out", str(rd.root), "--json"], capsys)
    st = json.loads(out)
    t = st["trials"][NEVER_SERVED]
    assert t["state"] == "failed" and t["served"] is False and t["values"] is None  # not 1000 and 600
    assert st["n_failed"] == 1 and st["n_never_served"] == 1 and st["n_complete"] == 8 and st["n_launched"] == 9
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(["status", "--out", str(rd.root)], capsys)
    assert code == 0, err
    assert "1 failed (1 never served)" in out
    row = next(line for line in out.splitlines() if re.match(rf"\s*{NEVER_SERVED}\s", line))
    assert " failed " in row and "1000" not in row and "600" not in row
    words = " ".join(out.split())
    assert " ".join(STARTUP_FAILURE.split()) in words  # whole, wrapped at spaces, never cut mid-word
    assert f"recommended: trial {RECOMMENDED}" in words


def test_status_fits_80_columns(tmp_path, capsys, monkeypatch):
    rd = lucky_study(tmp_path / "run")
    for columns in ("80", "60", "120"):
        monkeypatch.setenv("COLUMNS", columns)
        code, out, err = run_cli(["status", "--out", str(rd.root)], capsys)
        assert code == 0, err
        too_long = [line for line in out.splitlines() if len(line) > int(columns)]
        assert not too_long, (columns, too_long)


def test_a_12_trial_simulator_study_names_one_recommendation_everywhere(tmp_path, capsys):
    """The same agreement on a real (simulated) 12-trial study with its confirmation runs."""
    from tests.study.test_export_cli import _confirmed_run_dir

    (tmp_path / "space").mkdir()
    rd = _confirmed_run_dir(tmp_path / "space")
    code, out, err = run_cli(["status", "--out", str(rd.root), "--json"], capsys)
    assert code == 0, err
    rec = json.loads(out)["recommended"]["trial"]
    study = optuna.load_study(study_name="cli", storage=rd.optuna_url)
    space = load_space(rd.space_copy)
    logger = MlflowLogger(rd.mlflow_url, rd, {"study": "cli"}, {})
    logger.on_study_start(StudyContext(study, space, len(study.trials), Tally(), FrontCache(study), Coordinator(study)))
    logger.on_study_end("FINISHED")
    exp = MlflowClient(rd.mlflow_url).get_experiment_by_name("cli")
    assert exp.tags[RECOMMENDED_TAG] == str(rec)
    target = tmp_path / "deploy.yaml"
    code, out, err = run_cli(["export", "--out", str(rd.root), "-o", str(target)], capsys)
    assert code == 0, err
    assert f"# recommended trial: {rec} " in target.read_text()


def _one_flag_study(tmp_path, name: str, flag: str, dist, trials, export: dict | None = None):
    """A run directory holding a noop-backend space searching ``flag`` alone and a study of
    ``trials``: (p99, flag value, role, repeat_of), each with no OOMs in 1000 requests."""
    rd = RunDir(tmp_path / "run").ensure()
    low, high = dist.low, dist.high
    space = {"version": 1, "engine": {"backend": "noop", "model": "m"},
             "params": {flag: {"type": "float" if isinstance(dist, FloatDistribution) else "int", "low": low,
                               "high": high}},
             "study": {"name": name}, **({"export": export} if export else {})}
    rd.space_copy.write_text(yaml.safe_dump(space, sort_keys=False))
    study = optuna.create_study(storage=storage_from_url(rd.optuna_url), study_name=name,
                                directions=["minimize", "minimize"])
    for p99, value, role, of in trials:
        m = {"oom_per_1k": 0.0, "p99_e2e_s": p99, "requests": 1000.0, "requests_oom": 0.0}
        r = TrialRecord(len(study.trials), State.COMPLETE, role, params={flag: value}, flags={flag: value},
                        metrics=m, values=[0.0, p99], repeat_of=of)
        study.add_trial(optuna.trial.create_trial(params=r.params, distributions={flag: dist}, values=r.values,
                                                  user_attrs=r.user_attrs()))
    return rd, study


def test_with_export_gmu_edge_status_mlflow_and_export_name_the_config_below_the_edge(tmp_path, capsys):
    """`export.gmu_edge` changes the one answer everywhere at once: the edge config's mean is the
    lowest, the config below the edge is within its interval, and all three name the latter. The
    noop backend reports no memory and its model has no memory model, so headroom is unknown:
    the gmu edge is the margin judged."""
    rd, _ = _one_flag_study(tmp_path, "edge", "gpu_memory_utilization", FloatDistribution(0.85, 0.98),
                            ((25.0, 0.96, Role.SEARCH, None), (25.3, 0.93, Role.SEARCH, None),
                             (25.3, 0.96, Role.CONFIRM, 0), (24.8, 0.96, Role.CONFIRM, 0),
                             (25.1, 0.93, Role.CONFIRM, 1), (25.5, 0.93, Role.CONFIRM, 1)),
                            export={"gmu_edge": 0.95})
    code, out, err = run_cli(["status", "--out", str(rd.root), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["recommended"]["trial"] == 1
    client = _log_to_mlflow(rd, "edge")
    assert client.get_experiment_by_name("edge").tags[RECOMMENDED_TAG] == "1"
    target = tmp_path / "deploy.yaml"
    code, out, err = run_cli(["export", "--out", str(rd.root), "-o", str(target)], capsys)
    assert code == 0, err
    head = target.read_text()
    assert "# recommended trial: 1 " in head and "gpu_memory_utilization 0.96, at or above export.gmu_edge 0.95" in head


def test_while_a_repeat_runs_status_and_export_name_the_same_trial(tmp_path, capsys):
    """While a confirmation repeat of a config runs, the export rule counts that config as
    confirmed (so the answer does not jump to whichever finalist's repeat lands first). status
    and MLflow read it so; `autotune export` of the running study must too."""
    rd, study = _one_flag_study(tmp_path, "racing", "max_num_seqs", IntDistribution(1, 512),
                                ((24.0, 64, Role.SEARCH, None), (26.0, 128, Role.SEARCH, None),
                                 (26.1, 128, Role.CONFIRM, 1)))

    def named() -> tuple[int, str]:
        code, out, err = run_cli(["status", "--out", str(rd.root), "--json"], capsys)
        assert code == 0, err
        target = tmp_path / "deploy.yaml"
        code, _, err = run_cli(["export", "--out", str(rd.root), "-o", str(target)], capsys)
        assert code == 0, err
        return json.loads(out)["recommended"]["trial"], target.read_text()

    rec, head = named()
    assert rec == 1 and "# recommended trial: 1 " in head  # the confirmed config first
    running = study.ask()  # trial 0's repeat, under way (as the loop enqueues it)
    running.set_user_attr("role", str(Role.CONFIRM))
    running.set_user_attr("repeat_of", 0)
    rec, head = named()
    assert rec == 0 and "# recommended trial: 0 " in head

"""MlflowTracker against a real MLflow SQLite store: times, values, links, tags, the Default experiment."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from autotune.tracking.mlflow_tracker import REPEAT_RUN_TAG, REPEAT_TAG, MlflowTracker, TrialLog
from autotune.tracking.views import COMPARE_TAG, DESCRIPTION_TAG

T0 = 1_777_000_000_000  # epoch ms, long before the test runs


def _tracker(tmp_path: Path, own_store: bool = True) -> tuple[MlflowTracker, MlflowClient]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri, tmp_path / "mlartifacts", "study-t", own_store=own_store)
    tracker.start_invocation({"study": "study-t"}, {})
    return tracker, MlflowClient(uri)


def test_a_run_shows_the_trials_real_start_and_end(tmp_path: Path):
    tracker, client = _tracker(tmp_path)
    rid = tracker.log_trial(TrialLog(3, "complete", {}, {"p99_e2e_s": 1.0}, name="search-0003 gmu=0.9",
                                     start_ms=T0, end_ms=T0 + 540_000))
    run = client.get_run(rid)
    assert (run.info.start_time, run.info.end_time) == (T0, T0 + 540_000)  # 9 minutes, as the trial ran
    assert run.info.run_name == "search-0003 gmu=0.9"
    assert run.info.status == "FINISHED"
    assert [m.timestamp for m in client.get_metric_history(rid, "p99_e2e_s")] == [T0 + 540_000]


def test_params_are_rounded_for_people(tmp_path: Path):
    tracker, client = _tracker(tmp_path)
    rid = tracker.log_trial(TrialLog(0, "complete", {"gpu_memory_utilization": 0.85 + 0.07, "max_num_seqs": 128,
                                                     "enforce_eager": False}, {}))
    assert client.get_run(rid).data.params == {"gpu_memory_utilization": "0.92", "max_num_seqs": "128",
                                               "enforce_eager": "False"}


def test_a_confirmation_run_links_to_the_trial_it_repeats(tmp_path: Path):
    tracker, client = _tracker(tmp_path)
    original = tracker.log_trial(TrialLog(41, "complete", {}, {}))
    rid = tracker.log_trial(TrialLog(45, "complete", {}, {}, name="confirm-0045 repeats-0041", repeat_of=41),
                            repeated_run=original)
    tags = client.get_run(rid).data.tags
    assert tags[REPEAT_TAG] == "41" and tags[REPEAT_RUN_TAG] == original
    assert f"runs/{original}" in tags[DESCRIPTION_TAG]  # a link in the run's description
    assert REPEAT_TAG not in client.get_run(original).data.tags


def test_compare_tag_marks_the_baseline_and_the_pareto_trials(tmp_path: Path):
    tracker, client = _tracker(tmp_path)
    logged = {n: tracker.log_trial(TrialLog(n, "complete", {}, {})) for n in range(4)}
    tracker.tag_pareto(logged, pareto=[2, 3], baseline=[0])
    tags = {n: client.get_run(rid).data.tags for n, rid in logged.items()}
    assert [tags[n]["pareto"] for n in range(4)] == ["false", "false", "true", "true"]
    assert [tags[n][COMPARE_TAG] for n in range(4)] == ["true", "false", "true", "true"]


def test_own_store_keeps_default_inside_the_run_directory_and_hidden(tmp_path: Path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tracker, client = _tracker(run_dir)
    default = client.get_experiment("0")
    assert default.lifecycle_stage == "deleted"
    assert default.artifact_location.startswith((run_dir / "mlartifacts").resolve().as_uri())
    assert [e.name for e in client.search_experiments()] == ["study-t"]
    MlflowTracker(f"sqlite:///{run_dir / 'mlflow.db'}", run_dir / "mlartifacts", "study-t", own_store=True)
    assert client.get_experiment("0").lifecycle_stage == "deleted"  # reopening does not bring it back
    assert list(cwd.iterdir()) == []


def test_a_shared_store_keeps_its_default_experiment(tmp_path: Path):
    tracker, client = _tracker(tmp_path, own_store=False)
    assert client.get_experiment("0").lifecycle_stage == "active"


def test_a_run_cut_short_mid_log_is_unfinished_and_discarded_with_its_artifacts(tmp_path: Path, monkeypatch):
    """A child run is finished only once all of it is written: one cut short (the disk filled
    after its params) stays RUNNING, is reported as unfinished, and is deleted with its files."""
    tracker, client = _tracker(tmp_path)
    done = tracker.log_trial(TrialLog(0, "complete", {}, {"p99_e2e_s": 1.0}))
    (tmp_path / "flags.yaml").write_text("max_num_seqs: 64\n")
    real = tracker.client.set_terminated

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tracker.client, "set_terminated", full)
    try:
        tracker.log_trial(TrialLog(1, "complete", {}, {"p99_e2e_s": 2.0}, artifacts=[tmp_path / "flags.yaml"]))
    except OSError:
        pass
    monkeypatch.setattr(tracker.client, "set_terminated", real)
    runs = tracker.trial_runs()
    assert runs.finished == {0: done} and list(runs.unfinished) == [1]
    assert tracker.logged_trials() == {0: done}
    (cut,) = runs.unfinished[1]
    run_root = tmp_path / "mlartifacts" / cut  # the experiment's artifact location is the root itself
    assert (run_root / "artifacts" / "flags.yaml").exists()
    tracker.discard(cut)
    assert client.get_run(cut).info.lifecycle_stage == "deleted"
    assert not run_root.exists()
    assert tracker.trial_runs().unfinished == {}


def test_running_invocations_name_their_driver(tmp_path: Path):
    from autotune.tracking.mlflow_tracker import DRIVER_TAG

    tracker, _ = _tracker(tmp_path)  # started with no driver tag: an older autotune's run
    first = tracker.parent_run_id
    second = tracker.start_invocation({"study": "study-t"}, {DRIVER_TAG: "h:1:tok"})
    running = {rid: driver for rid, driver, _ in tracker.running_invocations()}
    assert running == {first: None, second: "h:1:tok"}
    tracker.close_run(first, "KILLED")
    assert [rid for rid, _, _ in tracker.running_invocations()] == [second]


def test_the_store_is_built_aside_and_renamed_into_place(tmp_path: Path):
    (tmp_path / ".mlflow.db.999999.tmp").write_text("left by a driver killed mid-migration")
    _tracker(tmp_path)
    assert (tmp_path / "mlflow.db").is_file()
    assert not list(tmp_path.glob(".mlflow.db.*.tmp"))

"""`autotune calibrate --out RUN_DIR`: a profile file, a report, before/after errors; bad input is one line.

The run directory is laid out as `autotune run` leaves it (optuna.db and space.yaml), filled by
autotune's trial loop against a perturbed truth (SIMULATED) without Ray, to stay fast.
"""

from __future__ import annotations

import json

import pytest
import yaml

from autotune.deploy import NOMINAL, SimProfile
from autotune.rundir import RunDir
from autotune.space.loader import parse_space
from autotune.study.loop.opening import open_study
from autotune.study.search.samplers import make_sampler
from autotune.study.storages.storage import storage_from_url
from tests.calibrate.conftest import qwen_space, run_against
from tests.conftest import run_cli


def make_run_dir(path, trials: int) -> RunDir:
    run_dir = RunDir(path).ensure()
    space = qwen_space(num_requests=300)
    run_dir.space_copy.write_text(yaml.safe_dump(space.model_dump(mode="json"), sort_keys=False))
    storage = storage_from_url(run_dir.optuna_url)
    if trials:
        run_against(space, NOMINAL.perturbed(1), trials=trials, storage=storage, name="qwen72b")
    else:
        open_study(space, "qwen72b", storage, make_sampler("autotune", space, 0))
    return run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run_dir(tmp_path_factory.mktemp("cal") / "run", trials=16)


def test_calibrate_writes_a_loadable_profile_and_prints_before_and_after(run_dir, capsys):
    code, out, err = run_cli(["calibrate", "--out", str(run_dir.root), "--requests", "100"], capsys)
    assert code == 0, err
    assert "calibrated the SIMULATOR's profile to study qwen72b" in out
    assert "held-out prediction error" in out and " -> " in out
    assert "p99_e2e_s" in out and "kv_cache_tokens" in out
    profile = SimProfile.load(run_dir.root / "sim_profile.yaml")
    assert profile != NOMINAL
    # The space takes it as engine.sim_profile (relative to the space file).
    saved = yaml.safe_load(run_dir.space_copy.read_text())
    saved["engine"]["sim_profile"] = "sim_profile.yaml"
    assert parse_space(saved, run_dir.space_copy).engine.profile == profile


def test_calibrate_json_is_one_object_with_the_errors(run_dir, capsys):
    code, out, err = run_cli(["calibrate", "--out", str(run_dir.root), "--requests", "100", "--json"], capsys)
    assert code == 0, err
    report = json.loads(out)
    assert report["study"] == "qwen72b" and report["simulated_fit"] is True
    assert report["held_out_trials"] and report["fitted_trials"]
    p99 = report["held_out_error"]["p99_e2e_s"]
    assert p99["trials"] >= 1 and p99["before"] >= 0 and p99["after"] >= 0
    assert {s["name"] for s in report["stages"]} == {"memory", "startup", "speed", "oom"}
    assert json.loads((run_dir.root / "calibration.json").read_text())["held_out_error"] == report["held_out_error"]


@pytest.mark.parametrize("args, message", [
    (["--holdout-every", "1"], "--holdout-every 1: must be at least 2"),
    (["--base", "no-such-profile.yaml"], "no such profile file"),
])
def test_bad_options_are_one_line(run_dir, capsys, args, message):
    code, out, err = run_cli(["calibrate", "--out", str(run_dir.root), *args], capsys)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_no_study_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(["calibrate", "--out", str(tmp_path / "nothing")], capsys)
    assert code == 2 and "no study here" in err and len(err.strip().splitlines()) == 1


def test_a_study_without_measurements_is_one_line(tmp_path, capsys):
    run_dir = make_run_dir(tmp_path / "empty", trials=0)
    code, _, err = run_cli(["calibrate", "--out", str(run_dir.root)], capsys)
    assert code == 2 and "no measured trial yet" in err and len(err.strip().splitlines()) == 1
    assert not (run_dir.root / "sim_profile.yaml").exists()


def test_too_few_trials_is_one_line_and_writes_nothing(tmp_path, capsys):
    run_dir = make_run_dir(tmp_path / "few", trials=3)
    code, _, err = run_cli(["calibrate", "--out", str(run_dir.root)], capsys)
    assert code == 2 and "too few measured trials to calibrate" in err and len(err.strip().splitlines()) == 1
    assert not (run_dir.root / "sim_profile.yaml").exists()

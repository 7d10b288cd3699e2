"""Run names and values as people read them in the MLflow UI."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from autotune.space import load_space
from autotune.study.trials.record import Role, State, TrialRecord
from autotune.tracking.naming import abbreviations, flags_label, for_people
from autotune.tracking.report import run_name, trial_log

DATA = Path(__file__).resolve().parents[1] / "data"
SPACE = load_space(DATA / "sim_small.yaml")


def test_floats_are_written_as_people_write_them():
    assert for_people(0.85 + 0.07) == "0.92"  # 0.9199999999999999 without rounding
    assert for_people(0.8 + 0.03) == "0.83"
    assert for_people(0.975) == "0.975"
    assert for_people(1e-7) == "1e-07" and for_people(123456789.0) == "123457000.0"
    assert for_people(128) == "128" and for_people(True) == "True" and for_people(None) == "None"


def test_abbreviations_are_initials_and_booleans_by_what_they_switch_on():
    short = abbreviations(["gpu_memory_utilization", "max_num_seqs", "block_size", "enforce_eager",
                           "enable_prefix_caching", "dtype"], bools=["enforce_eager", "enable_prefix_caching"])
    assert short == {"gpu_memory_utilization": "gmu", "max_num_seqs": "mns", "block_size": "bs",
                     "enforce_eager": "eager", "enable_prefix_caching": "prefix-caching", "dtype": "dtype"}


def test_a_shared_abbreviation_falls_back_to_the_full_names():
    short = abbreviations(["max_num_seqs", "max_num_steps", "block_size"])
    assert short == {"max_num_seqs": "max_num_seqs", "max_num_steps": "max_num_steps", "block_size": "bs"}


def test_flags_label():
    short = {"gpu_memory_utilization": "gmu", "enforce_eager": "eager"}
    values = {"gpu_memory_utilization": 0.9199999999999999, "enforce_eager": False, "kv_cache_dtype": "fp8"}
    assert flags_label(values, short) == "gmu=0.92 no-eager kv_cache_dtype=fp8"


def _record(**kw) -> TrialRecord:
    flags = {**SPACE.fixed_flags(), "gpu_memory_utilization": 0.9199999999999999, "max_num_seqs": 128,
             "block_size": 32, "enforce_eager": True, "enable_prefix_caching": False}
    return TrialRecord(41, kw.pop("state", State.COMPLETE), flags=flags, **kw)


def test_run_names_say_role_number_and_the_searched_flags_as_run():
    assert run_name(_record(), SPACE) == "search-0041 gmu=0.92 mns=128 bs=32 eager no-prefix-caching"
    ref = run_name(_record(role=Role.REFERENCE, reference="field-report-tuned"), SPACE)
    assert ref.startswith("reference-0041 field-report-tuned gmu=0.92")
    assert run_name(_record(state=State.REJECTED), SPACE).startswith("rejected-0041 ")


def test_a_confirmation_run_names_the_trial_it_repeats():
    r = _record(role=Role.CONFIRM, repeat_of=7)
    assert run_name(r, SPACE).startswith("confirm-0041 repeats-0007 gmu=0.92")
    assert trial_log(r, SPACE, []).repeat_of == 7
    assert trial_log(_record(), SPACE, []).repeat_of is None


def test_trial_log_carries_the_trials_real_start_and_end():
    start = dt.datetime(2026, 5, 1, 12, 0, 0)
    r = _record(started_at=start, finished_at=start + dt.timedelta(minutes=9))
    log = trial_log(r, SPACE, [])
    assert log.start_ms == int(start.timestamp() * 1000)
    assert log.end_ms - log.start_ms == 9 * 60 * 1000
    assert log.name == run_name(r, SPACE)

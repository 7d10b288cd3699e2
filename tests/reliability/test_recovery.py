"""recover_orphans on hand-made states that kills leave behind (no Ray, no subprocess)."""

from __future__ import annotations

import socket

import optuna
from optuna.trial import TrialState

from autotune.study.storages.recovery import DRIVER_ATTR, DriverId, recover_orphans
from autotune.study.storages.storage import storage_from_url
from autotune.study.trials.record import TrialRecord

DEAD = f"{socket.gethostname()}:999999:deadbeef"  # same host, a pid that cannot exist


def _study(tmp_path) -> optuna.Study:
    return optuna.create_study(storage=_storage_at(tmp_path), study_name="s", directions=["minimize", "minimize"])


def _storage_at(tmp_path) -> optuna.storages.BaseStorage:
    return storage_from_url(f"sqlite:///{tmp_path / 'o.db'}")


def _reruns(study: optuna.Study, number: int) -> list:
    return [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("requeued_from") == number]


def test_running_trial_of_dead_driver_is_failed_and_requeued_once(tmp_path):
    study = _study(tmp_path)
    t = study.ask()
    t.suggest_int("max_num_seqs", 8, 64)
    t.set_user_attr(DRIVER_ATTR, DEAD)
    me = DriverId.mine()
    assert recover_orphans(study, me) == [t.number]
    assert study.trials[t.number].state == TrialState.FAIL
    assert "died" in TrialRecord.from_frozen(study.trials[t.number]).failure_reason
    assert recover_orphans(study, me) == []  # idempotent: a second recovery adds nothing
    rerun = _reruns(study, t.number)
    assert len(rerun) == 1 and rerun[0].state == TrialState.WAITING


def test_trial_killed_before_its_suggestions_reruns_what_it_was_enqueued_with(tmp_path):
    study = _study(tmp_path)
    study.enqueue_trial({"max_num_seqs": 48}, user_attrs={"role": "baseline"})
    t = study.ask()  # popped from the queue, killed before suggest_*: no params yet
    t.set_user_attr(DRIVER_ATTR, DEAD)
    assert study.trials[t.number].params == {}
    assert TrialRecord.from_frozen(study.trials[t.number]).params == {"max_num_seqs": 48}  # what a re-run measures
    recover_orphans(study, DriverId.mine())
    rerun = _reruns(study, t.number)[0]
    assert rerun.system_attrs["fixed_params"] == {"max_num_seqs": 48} and rerun.user_attrs["role"] == "baseline"


def test_trial_killed_mid_sampling_drops_its_half_sample_and_keeps_what_it_was_enqueued_with(tmp_path):
    """The driver died between two suggest_* calls: the drawn value was half a sample of a
    stopped sampler, so the re-run fixes only the enqueued value and samples the rest."""
    study = _study(tmp_path)
    study.enqueue_trial({"max_num_seqs": 48})
    t = study.ask()
    t.suggest_int("max_num_seqs", 8, 64)
    t.suggest_float("gpu_memory_utilization", 0.8, 0.95)  # drawn, then the driver was killed
    t.set_user_attr(DRIVER_ATTR, DEAD)
    recover_orphans(study, DriverId.mine())
    assert _reruns(study, t.number)[0].system_attrs["fixed_params"] == {"max_num_seqs": 48}


def test_launched_trial_reruns_its_whole_config(tmp_path):
    study = _study(tmp_path)
    t = study.ask()
    t.suggest_int("max_num_seqs", 8, 64)
    t.suggest_float("gpu_memory_utilization", 0.8, 0.95)
    t.set_user_attr("flags", {"max_num_seqs": t.params["max_num_seqs"]})  # stored just before dispatch
    t.set_user_attr(DRIVER_ATTR, DEAD)
    recover_orphans(study, DriverId.mine())
    assert _reruns(study, t.number)[0].system_attrs["fixed_params"] == study.trials[t.number].params


def test_failed_but_never_requeued_trial_is_requeued(tmp_path):
    """A driver killed between failing a trial and re-enqueueing it: the next one heals it."""
    study = _study(tmp_path)
    t = study.ask()
    t.suggest_int("max_num_seqs", 8, 64)
    t.set_user_attr(DRIVER_ATTR, DEAD)
    study.tell(t, state=TrialState.FAIL)
    recover_orphans(study, DriverId.mine())
    assert len(_reruns(study, t.number)) == 1
    recover_orphans(study, DriverId.mine())
    assert len(_reruns(study, t.number)) == 1


def test_live_drivers_trials_are_left_alone(tmp_path):
    study = _study(tmp_path)
    other = DriverId.mine()  # this process is alive: its trials are not orphans
    t = study.ask()
    t.set_user_attr(DRIVER_ATTR, str(other))
    from autotune.study.storages.recovery import beat

    beat(study, other)
    assert recover_orphans(study, DriverId(other.host, other.pid, "othertoken")) == []
    assert study.trials[t.number].state == TrialState.RUNNING

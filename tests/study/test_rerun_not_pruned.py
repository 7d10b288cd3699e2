"""A re-run of an interrupted trial is measured, not rejected by the memory model.

The memory model learns from the study's startups, so a config it let through when it was
launched may be predicted to fail by the time the trial is re-run (its driver or worker
died). The re-run measures what was lost: it must launch. A trial that never got past the
model (killed before its config was let through) is re-run as a fresh proposal, pruned as
any other. No Ray, no engine: the proposal step on an in-memory study.
"""

from __future__ import annotations

import optuna
import pytest

from autotune.study.loop.driver import _store
from autotune.study.search.proposal import propose
from autotune.study.search.pruning import StartupPredictor
from autotune.study.storages.recovery import DRIVER_ATTR, DriverId, fail_and_requeue, recover_orphans
from autotune.study.trials.record import Role, stored_trial
from experiments.search import common as C

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _space():
    sp = C.space()
    # The plain model: it rejects vLLM's defaults at gpu_memory_utilization 0.89 outright
    # (tests/search/test_learned_pruning.py), standing in for "what it learnt since".
    strategy = sp.study.strategy.model_copy(update={"prune_learns_error": False})
    return sp.model_copy(update={"study": sp.study.model_copy(update={"strategy": strategy})})


# The searched flags at vLLM's defaults, with a memory fraction the plain model rejects.
CONFIG = {"gpu_memory_utilization": 0.89, "max_num_seqs": 256, "block_size": 16, "enforce_eager": False,
          "enable_prefix_caching": True, "max_num_batched_tokens": 8192, "kv_cache_dtype": "auto"}
DEAD = "elsewhere:1:deadbeef"  # a driver on another host with no heartbeat: gone


def _interrupted(study: optuna.Study, sp, launched: bool) -> optuna.trial.FrozenTrial:
    """A RUNNING trial of CONFIG whose driver died: let through to launch, or killed before."""
    study.enqueue_trial(CONFIG)
    trial = study.ask()
    trial.set_user_attr(DRIVER_ATTR, DEAD)
    p = propose(trial, sp, None)  # no model then: the config was let through
    assert not p.reject_reason
    if launched:
        _store(trial, p.record)  # what the loop stores just before dispatching a trial
    return stored_trial(study, trial.number)


def _rerun(study: optuna.Study, sp, predictor: StartupPredictor):
    trial = study.ask()
    return propose(trial, sp, predictor)


@pytest.mark.parametrize("how", ["driver died", "worker died"])
def test_a_rerun_of_a_launched_trial_is_measured_whatever_the_model_learnt(how):
    sp = _space()
    predictor = StartupPredictor.for_space(sp)
    assert predictor.failure({**sp.fixed_flags(), **CONFIG}).startswith("predicted startup failure")
    study = optuna.create_study(directions=["minimize", "minimize"])
    original = _interrupted(study, sp, launched=True)
    if how == "driver died":
        assert recover_orphans(study, DriverId.mine()) == [original.number]
    else:  # the loop's path when a Ray worker dies under the trial
        assert fail_and_requeue(study, original, "worker 0 died: killed")
    p = _rerun(study, sp, predictor)
    assert p.record.requeued_from == original.number
    assert p.record.params == CONFIG
    assert p.record.role == Role.SEARCH  # still a search trial: counted as one, not a confirmation
    assert p.reject_reason == ""


def test_a_rerun_of_a_trial_killed_before_launch_is_pruned_as_any_proposal():
    sp = _space()
    predictor = StartupPredictor.for_space(sp)
    study = optuna.create_study(directions=["minimize", "minimize"])
    original = _interrupted(study, sp, launched=False)
    assert recover_orphans(study, DriverId.mine()) == [original.number]
    p = _rerun(study, sp, predictor)
    assert p.record.requeued_from == original.number
    assert p.reject_reason.startswith("predicted startup failure")

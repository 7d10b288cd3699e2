"""From an asked Optuna trial to a launchable trial: sample, repair, prune; and its request.

Sampling follows the space (conditions), declarative constraints repair or reject a
sample, and the memory model rejects what cannot start, all before anything launches.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import optuna

from autotune.backends.base import ServerSpec, TrialRequest
from autotune.early_stop import EarlyStopRule
from autotune.space import SearchSpace
from autotune.study.search import seeding, strategy
from autotune.study.search.pruning import StartupPredictor
from autotune.study.storages import RERUN_OF_LAUNCHED_ATTR
from autotune.study.trials import State, TrialRecord, check_constraints, stored_trial, suggest_params


@dataclass
class Proposal:
    record: TrialRecord  # RUNNING, with the flags it would run with
    reject_reason: str  # '' when it may launch


def propose(trial: optuna.Trial, space: SearchSpace, predictor: StartupPredictor | None) -> Proposal:
    """Suggest the space's params on ``trial`` and decide whether the config may launch."""
    frozen = stored_trial(trial.study, trial.number)
    asked = TrialRecord.from_frozen(frozen)
    with warnings.catch_warnings():
        # The baseline measures vLLM's defaults, which may lie outside a searched range
        # (max_num_seqs 1024 on an H100 against a space's 32-512): Optuna warns of the
        # enqueued value; seeding.baseline_params has said so in our words.
        warnings.filterwarnings("ignore", message=r"Fixed parameter .* is out of range", category=UserWarning)
        params = suggest_params(trial, space)
    flags = {**space.fixed_flags(), **seeding.reference_fixed_overrides(space, asked.reference), **params}
    repaired, violated = check_constraints(params, space, flags)
    flags.update(repaired)
    # A re-run of a launched trial measures a config the memory model already let start: it
    # is not pruned now for what the model learnt since (study/storages/recovery.py).
    rerun = bool(frozen.user_attrs.get(RERUN_OF_LAUNCHED_ATTR))
    reason = "; ".join(violated) or ("" if rerun else strategy.prune_reason(predictor, flags, asked.role, trial.study))
    record = TrialRecord(trial.number, State.RUNNING, asked.role, asked.reference, params=params, flags=flags,
                         requeued_from=asked.requeued_from, repeat_of=asked.repeat_of, started_at=asked.started_at)
    return Proposal(record, reason)


def server_spec(space: SearchSpace) -> ServerSpec:
    """How every trial's engine is deployed. Relative paths in the space mean the directory
    autotune runs in; Ray workers run elsewhere, so they get absolute ones."""
    e = space.engine
    return ServerSpec(
        model=_local_path_or_id(e.model) or e.model, gpu=e.gpu, env=dict(e.env), host=e.host,
        download_dir=_local_path_or_id(e.download_dir), startup_timeout_s=e.startup_timeout_s,
        python=_local_path_or_id(e.python),
    )


def _local_path_or_id(value: str | None) -> str | None:
    """An existing relative path made absolute WITHOUT following symlinks: a venv's
    bin/python is a symlink to the base interpreter, which cannot import the venv's vLLM.
    Anything else (a hub model id, an absolute path) passes through."""
    if value and not os.path.isabs(value) and os.path.lexists(value):
        return os.path.abspath(value)
    return value


def trial_request(record: TrialRecord, space: SearchSpace, server: ServerSpec, seed: int,
                  early_stop: EarlyStopRule | None) -> TrialRequest:
    return TrialRequest(
        trial_number=record.number,
        server=server,
        flags=dict(record.flags),
        workload=space.workload,
        seed=seed * 100_003 + record.number,
        early_stop=early_stop,
    )

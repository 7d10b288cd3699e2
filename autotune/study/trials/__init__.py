"""What one trial is: the typed record every reader uses (role, state, flags, metrics, values), the
flags sampled from the space with its declarative constraints, and what Optuna is told (objective
and constraint values, penalties from the metric registry).
"""

from __future__ import annotations

from autotune.study.trials.objectives import (
    SERVING_CONSTRAINT,
    STARTUP_CONSTRAINT,
    constraint_values,
    objective_values,
    penalty,
)
from autotune.study.trials.params import check_constraints, suggest_params
from autotune.study.trials.record import (
    BASELINE_NAME,
    DRIVER_ATTR,
    PROCESS_DIED,
    Role,
    State,
    TrialRecord,
    died_reason,
    enqueue_attrs,
    owner_of,
    records,
    state_of,
    stored_trial,
)

__all__ = ["BASELINE_NAME", "DRIVER_ATTR", "PROCESS_DIED", "Role", "SERVING_CONSTRAINT", "STARTUP_CONSTRAINT", "State", "TrialRecord", "check_constraints", "constraint_values", "died_reason", "enqueue_attrs", "objective_values", "owner_of", "penalty", "records", "state_of", "stored_trial", "suggest_params"]

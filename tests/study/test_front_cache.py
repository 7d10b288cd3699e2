"""The driver's incremental Pareto front equals Optuna's best_trials after every tell."""

from __future__ import annotations

import random

import optuna

from autotune.study.analysis.pareto import FrontCache, pareto_trials
from autotune.study.trials.record import TrialRecord


def test_incremental_front_matches_best_trials():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    rng = random.Random(7)
    study = optuna.create_study(directions=["minimize", "minimize"])
    cache = FrontCache(study)
    for i in range(120):
        t = study.ask()
        t.suggest_int("max_num_seqs", 1, 64)
        role = "rejected" if i % 11 == 5 else "search"
        t.set_user_attr("role", role)
        t.set_constraint("startup_ok", 1.0 if rng.random() < 0.2 else -1.0)
        # Coarse values make ties and exact duplicates common.
        frozen = study.tell(t, [float(rng.randint(0, 5)), float(rng.randint(0, 8))])
        cache.add(TrialRecord.from_frozen(frozen))
        assert [x.number for x in cache.trials()] == [x.number for x in pareto_trials(study)]
    cache.invalidate()
    assert [x.number for x in cache.trials()] == [x.number for x in pareto_trials(study)]

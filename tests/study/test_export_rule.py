"""The export rule (docs/export.md) on a hand-made front, where the OOM limit decides."""

from __future__ import annotations

import optuna

from autotune.space.schema import SearchSpace
from autotune.study.analysis.export_rule import choose_for_export
from autotune.study.analysis.pareto import pareto_numbers
from autotune.study.trials.record import Role, State, TrialRecord

SPACE = SearchSpace.model_validate({
    "version": 1,
    "engine": {"backend": "noop", "model": "m"},
    "params": {"max_num_seqs": {"type": "int", "low": 1, "high": 512}},
})


def _add(study: optuna.Study, oom: float, p99: float, seqs: int, state: State = State.COMPLETE,
         early_stopped: bool = False) -> int:
    r = TrialRecord(len(study.trials), state, Role.SEARCH, params={"max_num_seqs": seqs},
                    flags={"max_num_seqs": seqs}, metrics={"oom_per_1k": oom, "p99_e2e_s": p99},
                    values=[oom, p99], early_stopped=early_stopped)
    study.add_trial(optuna.trial.create_trial(
        params=r.params, distributions={"max_num_seqs": optuna.distributions.IntDistribution(1, 512)},
        values=r.values, user_attrs=r.user_attrs()))
    return r.number


def _study() -> tuple[optuna.Study, dict[str, int]]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=["minimize", "minimize"])
    n = {
        "safe": _add(study, 0.0, 30.0, 32),  # no OOMs, slowest of the front
        "some": _add(study, 4.0, 20.0, 64),
        "fastest": _add(study, 40.0, 10.0, 256),  # lowest p99 of the front, many OOMs
        "dominated": _add(study, 5.0, 35.0, 128),
        "stopped": _add(study, 50.0, 9.0, 16, early_stopped=True),  # on the front, but estimates: never exported
        "rejected": _add(study, 1000.0, 600.0, 8, state=State.REJECTED),  # never ran: penalty values
    }
    return study, n


def test_the_oom_limit_excludes_the_lowest_p99_pareto_trial():
    study, n = _study()
    assert pareto_numbers(study) == sorted([n["safe"], n["some"], n["fastest"], n["stopped"]])
    # Default limit 1/1000: the fastest trial (40 OOM/1k) and the one with 4 are out.
    choice = choose_for_export(study, SPACE, max_oom_per_1k=1.0)
    assert choice is not None and choice.trial.number == n["safe"]
    assert choice.trial.flags == {"max_num_seqs": 32}
    assert "oom_per_1k <= 1" in choice.rule
    # A looser limit admits the middle trial, still not the fastest.
    assert choose_for_export(study, SPACE, max_oom_per_1k=10.0).trial.number == n["some"]
    # No limit: the lowest p99 of the front, never the early-stopped or the rejected one.
    assert choose_for_export(study, SPACE, max_oom_per_1k=1e9).trial.number == n["fastest"]


def test_no_trial_within_the_limit_falls_back_to_the_lowest_oom():
    study = optuna.create_study(directions=["minimize", "minimize"])
    _add(study, 50.0, 10.0, 256)
    lowest = _add(study, 8.0, 25.0, 64)
    choice = choose_for_export(study, SPACE, max_oom_per_1k=1.0)
    assert choice is not None and choice.trial.number == lowest and "lowest oom_per_1k" in choice.rule

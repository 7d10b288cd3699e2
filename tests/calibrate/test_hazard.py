"""The runtime-OOM hazard refitted to a study's engine deaths (autotune.calibrate.hazard) and
``export.oom_model``, which ranks a config it predicts over the OOM limit after those it does not.
Studies are hand-made on the flagship space (figures made up; the trajectories are the model's)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.calibrate import hazard
from autotune.deploy import NOMINAL
from autotune.export.header import predicted_oom_line
from autotune.study.analysis.evidence import summarize
from autotune.study.analysis.export_rule import PREDICTED_OVER, choose_for_export, finalists
from autotune.study.trials.record import records
from tests.conftest import with_setting
from tests.study.test_export_evidence import SPACE, _add, _study

SIGMA0 = NOMINAL.frag_sigma
ON = SPACE.model_validate(with_setting(SPACE.model_dump(), "export.oom_model", True))


def _flat(margin_gib: float, ratio: float, steps: int = 2000) -> hazard.Trajectory:
    """A trajectory of one draw: ``steps`` steps at log margin ratio ``ratio``."""
    return hazard.Trajectory(np.array([ratio]), np.array([float(steps)]), margin_gib)


def test_the_death_chance_grows_with_unknown_memory_and_its_scale():
    t = _flat(2.0, 6.0)
    model = hazard.death_chance(t, 0.0, 1.0, SIGMA0)
    assert 0.0 <= model < hazard.death_chance(t, 0.5, 1.0, SIGMA0) < hazard.death_chance(t, 1.0, 1.0, SIGMA0)
    assert model < hazard.death_chance(t, 0.0, 4.0, SIGMA0)
    assert hazard.death_chance(t, 2.0, 1.0, SIGMA0) == 1.0  # the unknown memory takes the whole margin
    assert hazard.death_chance(hazard.Trajectory(np.array([]), np.array([]), 2.0), 1.0, 8.0, 1.0) == 0.0


def test_the_fit_puts_the_risk_where_the_deaths_were():
    tight, middle, loose = _flat(1.0, 5.0), _flat(2.0, 6.0), _flat(4.0, 8.0)
    seen = [hazard.Observed(tight, 3, 2), hazard.Observed(middle, 3, 0), hazard.Observed(loose, 3, 0)]
    f = hazard.fit(seen, 16.0, SIGMA0)
    assert f is not None and (f.deaths, f.runs) == (2, 9)

    def loglik(d: float, a: float, s: float) -> float:
        ps = [min(max(hazard.death_chance(o.trajectory, d, a, s), 1e-9), 1 - 1e-9) for o in seen]
        return sum(o.deaths * math.log(p) + (o.runs - o.deaths) * math.log1p(-p) for o, p in zip(seen, ps, strict=True))

    assert loglik(f.shift_gib, f.scale, f.spread) >= loglik(0.0, 1.0, SIGMA0)  # at least as likely as the model's
    p = [f.death_chance(t) for t in (tight, middle, loose)]
    assert p[0] > 0.3 and p[0] > p[1] >= p[2]
    assert hazard.death_chance(tight, 0.0, 1.0, SIGMA0) < 0.01  # the model alone would not have said so
    assert f.oom_per_1k(tight) == pytest.approx(16.0 * p[0])


def test_no_death_no_fit():
    assert hazard.fit([hazard.Observed(_flat(1.5, 5.5), 3, 0)], 16.0, SIGMA0) is None


def _run(study, gmu: float, kv: str, p99: float, died: bool = False) -> int:
    return _add(study, (gmu, kv), p99, ooms=16 if died else 0, extra={"crashes": 1.0 if died else 0.0})


def _twin_study():
    """0.97 auto died in one run of three; its twin at the same memory margin, 0.97 fp8, ran three
    times clean and is the fastest; 0.93 fp8, far from the edge, is clean and slower."""
    study = _study()
    for died in (False, True, False):
        _run(study, 0.97, "auto", 31.0, died)
    twin = [_run(study, 0.97, "fp8", p) for p in (29.0, 29.4, 28.8)][0]
    safe = [_run(study, 0.93, "fp8", p) for p in (30.0, 30.3, 29.9)][0]
    return study, twin, safe


def test_export_oom_model_passes_over_a_clean_config_whose_twin_died():
    study, twin, safe = _twin_study()
    off = choose_for_export(study, SPACE, 1.0)
    assert off.trial.number == twin and math.isnan(off.config.oom.predicted_per_1k)  # the default: off
    choice = choose_for_export(study, ON, 1.0)
    assert choice is not None and choice.trial.number == safe and choice.tier < PREDICTED_OVER
    evidence = {c.first.number: c for c in summarize(records(study.trials), ON).configs}
    assert evidence[twin].oom.predicted_per_1k > 1.0 > evidence[safe].oom.predicted_per_1k
    assert any(f"trials {twin} ranked ahead" in n and "export.oom_model" in n for n in choice.notes)
    # what the prediction costs, in the ranked metric's means: 29.07 s against the chosen 30.07 s
    assert any(f"the best of them, trial {twin}, measured a mean p99_e2e_s 3.3 % lower" in n for n in choice.notes)
    assert "predicted oom_per_1k" in (predicted_oom_line(choice.config, 1.0) or "")
    # the race measures what the rule would pick: the safe config first
    assert finalists(list(evidence.values()), 1)[0].first.number == safe


def test_the_note_gives_no_cost_where_the_passed_over_config_measured_worse():
    """The rule ranks by an interval's pessimistic end: a passed-over twin run three times can rank ahead of a
    chosen config run twice on a worse mean. The note names it but claims no gain the means do not show."""
    study = _study()
    for died in (False, True, False):
        _run(study, 0.97, "auto", 31.0, died)
    twin = [_run(study, 0.97, "fp8", p) for p in (29.2, 29.4, 29.3)][0]
    safe = [_run(study, 0.93, "fp8", p) for p in (27.5, 30.7)][0]  # a better mean, a wider interval (two runs)
    choice = choose_for_export(study, ON, 1.0)
    assert choice.trial.number == safe
    note = next(n for n in choice.notes if f"trials {twin} ranked ahead" in n)
    assert "the best of them" not in note


def test_export_oom_model_when_every_clean_config_is_predicted_over():
    study = _study()
    for died in (False, True, False):
        _run(study, 0.97, "auto", 31.0, died)
    twin = [_run(study, 0.97, "fp8", p) for p in (29.0, 29.4, 28.8)][0]
    choice = choose_for_export(study, ON, 1.0)
    assert choice.trial.number == twin and choice.tier == PREDICTED_OVER and "predicted over it" in choice.rule


def test_export_oom_model_without_a_death_changes_nothing():
    study = _study()
    best = [_run(study, 0.97, "fp8", p) for p in (29.0, 29.4, 28.8)][0]
    [_run(study, 0.93, "fp8", p) for p in (30.0, 30.3, 29.9)]
    choice = choose_for_export(study, ON, 1.0)
    assert choice.trial.number == best and math.isnan(choice.config.oom.predicted_per_1k) and not choice.notes


def test_the_fits_grid_scores_each_point_as_death_chance_does():
    """The fit scores the grid in one pass per config; each point must be :func:`hazard.death_chance`."""
    t = hazard.trajectory(ON, {**ON.fixed_flags(), "gpu_memory_utilization": 0.98, "kv_cache_dtype": "fp8"})
    assert t is not None and 0 < len(t.steps) < 2000  # binned: a few hundred draws, not the run's thousands
    spreads = np.array(hazard.SPREADS) * SIGMA0
    grid = hazard._chance_grid(t, spreads)
    for i, d in enumerate(hazard.SHIFTS_GIB):
        for j in (0, len(hazard.SCALES) // 2, len(hazard.SCALES) - 1):
            for k, s in enumerate(spreads):
                assert grid[i, j, k] == pytest.approx(hazard.death_chance(t, d, hazard.SCALES[j], s), abs=1e-12)


def test_every_command_has_the_oom_model(tmp_path):
    """`autotune status` and `autotune export` rank with export.oom_model's predictions as the run did:
    the command line hands the evidence its OOM model whichever command imports it (a fresh process)."""
    import subprocess
    import sys

    code = ("import autotune.cli\nfrom autotune.study.analysis import evidence\n"
            "from autotune.calibrate import predicted_ooms\nassert evidence._oom_model is predicted_ooms\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, timeout=120)


def test_mlflow_gets_the_prediction_the_rule_ranked_by():
    """MLflow's trial runs carry ``oom_per_1k_predicted`` (status --json's key) only with the switch on,
    the same figure status and the export header show."""
    from autotune.tracking.report import PREDICTED_OOM_METRIC, RECOMMENDED_TAG, recommendation_tags

    study, twin, safe = _twin_study()
    exp, _, metrics = recommendation_tags(study, ON)
    assert exp[RECOMMENDED_TAG] == str(safe)
    evidence = {c.first.number: c for c in summarize(records(study.trials), ON).configs}
    for n in (twin, safe):
        assert metrics[n][PREDICTED_OOM_METRIC] == evidence[n].oom.predicted_per_1k
    assert metrics[twin][PREDICTED_OOM_METRIC] > 1.0 > metrics[safe][PREDICTED_OOM_METRIC]
    _, _, off = recommendation_tags(study, SPACE)
    assert not any(PREDICTED_OOM_METRIC in m for m in off.values())


def test_no_margin_at_all_is_certain_death_at_every_shift():
    """A config that starts with no memory left for unaccounted use (margin 0 or below: the model's every
    step has p = 1) dies for sure whatever the fit's shift; it must not divide by the margin."""
    for margin in (0.0, -0.05):
        t = hazard.Trajectory(np.array([-np.inf]), np.array([100.0]), margin)
        assert all(hazard.death_chance(t, d, 1.0, SIGMA0) == 1.0 for d in hazard.SHIFTS_GIB)
        assert np.all(hazard._chance_grid(t, np.array(hazard.SPREADS) * SIGMA0) == 1.0)


def test_the_oom_line_reads_the_configs_own_runs_when_it_is_predicted_over():
    """The twin's 3000 clean requests show the limit of 1 per 1000 by themselves; the prediction
    has its own line, so the OOM line may not say it is not shown (nor ask for negative requests)."""
    from autotune.export.header import oom_line

    study = _study()
    for died in (False, True, False):
        _run(study, 0.97, "auto", 31.0, died)
    twin = [_run(study, 0.97, "fp8", p) for p in (29.0, 29.4, 28.8)][0]
    choice = choose_for_export(study, ON, 1.0)
    assert choice.trial.number == twin and choice.config.oom.shown_within(1.0)
    line = oom_line(choice.config, 1.0)
    assert line.endswith("within the limit of 1") and "NOT" not in line
    assert "those shown within it with 95 % confidence are predicted over it" not in choice.rule  # tier's own rule


def test_the_passed_over_note_names_only_configs_that_would_have_competed():
    """Only confirmed configs compete when some are: a faster single run predicted over the limit
    was not passed over because of the prediction, so the note may not name it."""
    study, twin, safe = _twin_study()
    single = _run(study, 0.975, "fp8", 28.0)
    evidence = {c.first.number: c for c in summarize(records(study.trials), ON).configs}
    assert evidence[single].oom.predicted_per_1k > 1.0  # it is predicted over, as the twin is
    choice = choose_for_export(study, ON, 1.0)
    assert choice.trial.number == safe
    (note,) = [n for n in choice.notes if "export.oom_model" in n]
    assert f"trials {twin} ranked ahead" in note and str(single) not in note.split("ranked ahead")[0]


def test_the_measured_tiers_rule_says_why_a_shown_config_lost():
    """The safe config's 2000 requests do not show the limit; the twin's 3000 do, but it is predicted
    over: the rule may not say that no config is shown within the limit."""
    study = _study()
    for died in (False, True, False):
        _run(study, 0.97, "auto", 31.0, died)
    [_run(study, 0.97, "fp8", p) for p in (29.0, 29.4, 28.8)]
    safe = [_run(study, 0.93, "fp8", p) for p in (30.0, 30.3)][0]
    choice = choose_for_export(study, ON, 1.0)
    assert choice.trial.number == safe and not choice.config.oom.shown_within(1.0)
    assert "those shown within it with 95 % confidence are predicted over it" in choice.rule
    assert "none is shown" not in choice.rule


def test_a_shift_costs_a_logprobs_step_more_than_a_plain_one():
    """The same GiB taken from a step that has less left (its logprobs already need some of the
    margin) moves its log margin by ln(1 - d / its own margin), not the config's."""
    plain = _flat(2.0, 6.0)
    logprobs = hazard.Trajectory(np.array([6.0]), np.array([2000.0]), 2.0, np.array([1.0]))
    assert hazard.death_chance(logprobs, 0.0, 1.0, SIGMA0) == hazard.death_chance(plain, 0.0, 1.0, SIGMA0)
    assert hazard.death_chance(logprobs, 0.5, 1.0, SIGMA0) > hazard.death_chance(plain, 0.5, 1.0, SIGMA0)
    by_hand = _flat(2.0, 6.0 + math.log(1 - 0.5 / 1.0))
    assert hazard.death_chance(logprobs, 0.5, 1.0, SIGMA0) == pytest.approx(hazard.death_chance(by_hand, 0.0, 1.0, SIGMA0))
    assert hazard.death_chance(logprobs, 1.0, 1.0, SIGMA0) == 1.0  # the step has nothing left
    grid = hazard._chance_grid(logprobs, np.array(hazard.SPREADS) * SIGMA0)
    i = hazard.SHIFTS_GIB.index(0.5)
    j = int(np.argmin(np.abs(np.log(hazard.SCALES))))
    k = hazard.SPREADS.index(1.0)
    assert grid[i, j, k] == pytest.approx(hazard.death_chance(logprobs, 0.5, hazard.SCALES[j], SIGMA0), abs=1e-12)


def test_the_trajectory_is_a_run_that_did_not_die(monkeypatch):
    """A noise-free run that dies stops drawing where it died (or restarts with requests dropped):
    the trajectory comes from the first seed whose run walked the whole benchmark."""
    import dataclasses

    real = hazard.simulate_trial
    seeds: list[int] = []

    def first_seed_dies(*args, seed: int, **kw):
        seeds.append(seed)
        res = real(*args, seed=seed, **kw)
        return dataclasses.replace(res, crashes=1) if seed == 0 else res

    flags = {**ON.fixed_flags(), "gpu_memory_utilization": 0.93, "kv_cache_dtype": "fp8"}
    hazard._TRAJECTORIES.clear()
    monkeypatch.setattr(hazard, "simulate_trial", first_seed_dies)
    t = hazard.trajectory(ON, flags)
    assert seeds == [0, 1] and t is not None
    hazard._TRAJECTORIES.clear()


def test_a_logprobs_workload_gives_its_steps_their_own_margin():
    from pathlib import Path

    from autotune.space import load_space

    mixed = load_space(Path(__file__).resolve().parents[2] / "search_spaces" / "qwen72b-mixed.yaml")
    t = hazard.trajectory(mixed, {**mixed.fixed_flags(), "gpu_memory_utilization": 0.93})
    assert t is not None and t.step_margin_gib is not None
    assert t.step_margin_gib.min() < t.margin_gib and t.step_margin_gib.max() == pytest.approx(t.margin_gib)


def test_status_says_the_prediction_the_export_header_says():
    from autotune.cli.status import _recommended_line

    study, _, safe = _twin_study()
    on = choose_for_export(study, ON, 1.0)
    line = " ".join(_recommended_line(on, "p99_e2e_s").split())
    assert f"recommended: trial {safe}" in line
    assert (predicted_oom_line(on.config, 1.0) or "x")[1:] in line and "Predicted oom_per_1k" in line
    assert "redicted" not in _recommended_line(choose_for_export(study, SPACE, 1.0), "p99_e2e_s")

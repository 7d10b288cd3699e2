"""The export rule on hand-made studies: what the data supports, not the luckiest measurement.

Trials are written into an in-memory Optuna study as the trial loop stores them (records
with flags as run, metrics with request counts, roles and ``repeat_of`` links), on the
flagship space so the memory model predicts each config's headroom. Figures are made up.
"""

from __future__ import annotations

import optuna
import pytest

from autotune.export.header import engine_death_line, oom_line
from autotune.space import load_space
from autotune.study.analysis.evidence import summarize
from autotune.study.analysis.export_rule import MEASURED, SHOWN, Ranking, choose, choose_for_export, finalists
from autotune.study.trials.record import Role, State, TrialRecord, records
from tests.conftest import REPO, with_setting

optuna.logging.set_verbosity(optuna.logging.WARNING)
SPACE = load_space(REPO / "search_spaces" / "qwen72b.yaml")
DIST = {"gpu_memory_utilization": optuna.distributions.FloatDistribution(0.85, 0.98, step=0.005),
        "kv_cache_dtype": optuna.distributions.CategoricalDistribution(["auto", "fp8"])}
# Headroom per GPU the memory model predicts on the flagship (KV cache beyond one 8192-token
# request): gmu 0.90 with auto KV ~0.04 GiB (at the startup edge), 0.92 ~1.6 GiB, 0.95 ~3.5 GiB.
EDGE, MARGIN, ROOMY = (0.90, "auto"), (0.92, "auto"), (0.95, "fp8")


def _add(study: optuna.Study, cfg: tuple[float, str], p99: float, ooms: int = 0, requests: int = 1000,
         role: Role = Role.SEARCH, repeat_of: int | None = None, extra: dict[str, float] | None = None) -> int:
    params = {"gpu_memory_utilization": cfg[0], "kv_cache_dtype": cfg[1]}
    metrics = {"requests": float(requests), "requests_oom": float(ooms), "oom_per_1k": 1000.0 * ooms / requests,
               "p99_e2e_s": p99, **(extra or {})}
    r = TrialRecord(len(study.trials), State.COMPLETE, role, params=params, flags={**SPACE.fixed_flags(), **params},
                    metrics=metrics, values=[metrics["oom_per_1k"], p99], repeat_of=repeat_of,
                    constraints={"startup_ok": -1.0, "serving_ok": -1.0})
    study.add_trial(optuna.trial.create_trial(params=params, distributions=DIST, values=r.values,
                                              user_attrs=r.user_attrs(), constraints=r.constraints))
    return r.number


def _confirmed(study: optuna.Study, cfg: tuple[float, str], p99s: list[float], **kw) -> int:
    first = _add(study, cfg, p99s[0], **kw)
    for v in p99s[1:]:
        _add(study, cfg, v, role=Role.CONFIRM, repeat_of=first, **kw)
    return first


def _study() -> optuna.Study:
    return optuna.create_study(directions=["minimize", "minimize"])


def test_a_lucky_single_measurement_does_not_beat_a_confirmed_config():
    study = _study()
    a = _confirmed(study, ROOMY, [30.0, 30.6, 29.7])
    _confirmed(study, (0.94, "fp8"), [30.2, 31.0, 30.9])
    lucky = _add(study, (0.93, "fp8"), 28.9)  # the lowest p99 ever measured, once
    # What the old rule (lowest measured p99 on the Pareto front) would have exported:
    assert [t.number for t in study.best_trials] == [lucky]
    choice = choose_for_export(study, SPACE, 1.0)
    assert choice is not None and choice.trial.number == a and choice.config.n == 3
    assert choice.tier == SHOWN  # 0 OOMs in 3000 requests shows <= 1 per 1000
    assert "confirmed configs" in choice.rule and "shown (95 %)" in choice.rule
    i = choice.config.interval("p99_e2e_s")
    assert i.known and i.low < 30.1 < i.high


def test_without_confirmation_runs_the_lowest_bound_is_the_lowest_measurement():
    study = _study()
    _add(study, ROOMY, 30.0)
    best = _add(study, (0.93, "fp8"), 28.9)
    choice = choose_for_export(study, SPACE, 1.0)
    assert choice.trial.number == best
    assert choice.tier == MEASURED and "none is shown" in choice.rule
    assert not choice.config.interval("p99_e2e_s").known  # one run, nothing repeated: no interval


def test_a_limit_not_shown_by_the_requests_says_how_many_more_would_show_it():
    study = _study()
    _add(study, ROOMY, 30.0)  # 0 OOMs in 1000 requests: at most ~3 per 1000 with 95 % confidence
    ev = summarize(records(study.trials), SPACE)
    (c,) = ev.configs
    assert c.oom.upper_per_1k == pytest.approx(2.991, abs=1e-3)
    assert not c.oom.shown_within(1.0) and c.oom.requests_to_show(1.0) == 2995
    line = oom_line(c, 1.0)
    assert "NOT shown within the limit of 1" in line and "1995 more requests" in line
    # The looser limit of 5 per 1000 is shown by the same 1000 requests.
    assert choose(ev.configs, 5.0, 1.0).tier == SHOWN


def test_three_clean_runs_bound_a_runs_engine_death_chance_only_to_63_percent():
    # The OOM bound counts 3600 clean requests as independent (within 1 per 1000), but one
    # engine death fails every request in flight at once: runs are the independent unit.
    study = _study()
    _confirmed(study, ROOMY, [30.0, 30.6, 29.7], requests=1200, extra={"crashes": 0.0})
    (c,) = summarize(records(study.trials), SPACE).configs
    assert c.oom.shown_within(1.0) and c.oom.runs == 3 and c.oom.runs_with_death == 0
    assert c.oom.death_chance_upper == pytest.approx(1 - 0.05 ** (1 / 3))
    line = engine_death_line(c)
    assert line is not None and "in 0 of 3 runs" in line and "at most 63 %" in line
    assert c.to_dict()["runs_with_engine_death"] == 0


def test_a_run_whose_engine_died_counts_once_however_often_it_died():
    study = _study()
    first = _add(study, ROOMY, 30.0, ooms=40, requests=1200, extra={"crashes": 2.0})
    _add(study, ROOMY, 30.2, requests=1200, role=Role.CONFIRM, repeat_of=first, extra={"crashes": 0.0})
    (c,) = summarize(records(study.trials), SPACE).configs
    assert c.oom.runs_with_death == 1 and "in 1 of 2 runs" in (engine_death_line(c) or "")


def test_runs_without_a_crash_count_say_nothing_about_engine_deaths():
    study = _study()
    _add(study, ROOMY, 30.0)  # no "crashes" metric recorded
    (c,) = summarize(records(study.trials), SPACE).configs
    assert c.oom.runs_with_death is None and engine_death_line(c) is None
    assert c.to_dict()["engine_death_chance_upper95"] is None


def test_ooms_counted_over_all_runs_decide_before_latency():
    study = _study()
    fast = _confirmed(study, (0.97, "fp8"), [25.0, 25.4, 25.2], ooms=1)  # 3 OOMs in 3000: 1 per 1000, not shown
    safe = _confirmed(study, ROOMY, [30.0, 30.6, 29.7])
    choice = choose_for_export(study, SPACE, 1.0)
    assert choice.trial.number == safe
    assert choose_for_export(study, SPACE, 10.0).trial.number == fast  # 3 in 3000 shows <= 10 per 1000


def test_the_edge_config_gives_way_to_one_with_margin_within_its_interval():
    study = _study()
    edge = _confirmed(study, EDGE, [29.0, 30.2, 29.4])
    margin = _confirmed(study, MARGIN, [29.8, 30.4, 30.0])  # mean 30.07, within edge's interval
    choice = choose_for_export(study, SPACE, 1.0)
    assert choice.trial.number == margin
    assert choice.config.headroom.gib > 1.0
    assert any(f"trial {edge}'s config ranked first" in n for n in choice.notes)
    # With no margin required, the edge config (lowest bound) is exported.
    relaxed = with_setting(SPACE.model_dump(mode="json"), "export.min_headroom_gib", 0.0)
    assert choose_for_export(study, type(SPACE).model_validate(relaxed), 1.0).trial.number == edge


def test_the_edge_config_stays_when_nothing_with_margin_is_close_and_the_header_says_so():
    study = _study()
    edge = _confirmed(study, EDGE, [29.0, 29.2, 29.1])
    _confirmed(study, MARGIN, [33.0, 33.4, 33.1])  # far outside the edge config's interval
    choice = choose_for_export(study, SPACE, 1.0)
    assert choice.trial.number == edge
    assert choice.config.headroom.below(1.0)
    assert any("below the 1 GiB margin" in n for n in choice.notes)


def test_a_goodput_pair_across_a_cliff_does_not_make_the_worst_configs_rank_first():
    """Found by the reality-gap ceiling (grid-all on bursty-goodput dev truth 1): one config measured twice
    either side of a KV cliff (5.2 and 0.6 requests/s) sets a pooled spread of ~110 % on 1 degree of freedom,
    so a single run's interval is the mean +- ~14x itself. Ranked by the lower end, mean x (1 - 14), the
    higher a config's goodput the lower its bound: the cliff config and then the worst runs ranked first.
    The pessimistic end mean / (1 + r) keeps single runs in the order of their means."""
    data = with_setting(SPACE.model_dump(), "objectives", [{"metric": "goodput_rps_per_gpu", "direction": "maximize"},
                                                            {"metric": "oom_per_1k"}])
    space = SPACE.model_validate(with_setting(data, "workload.goodput_slo", {"ttft_s": 10.0, "tpot_s": 0.2}))
    study = _study()
    cliff = (0.93, "auto")
    _add(study, cliff, 20.0, extra={"goodput_rps_per_gpu": 5.2})
    _add(study, cliff, 20.0, extra={"goodput_rps_per_gpu": 0.6})
    best = _add(study, ROOMY, 20.0, extra={"goodput_rps_per_gpu": 26.9})
    _add(study, (0.94, "fp8"), 20.0, extra={"goodput_rps_per_gpu": 26.6})
    _add(study, (0.91, "fp8"), 20.0, extra={"goodput_rps_per_gpu": 12.0})
    configs = summarize(records(study.trials), space).configs
    rank = Ranking.for_space(space)
    by_cost = sorted(configs, key=rank.cost)
    assert [c.interval("goodput_rps_per_gpu").mean for c in by_cost] == pytest.approx([26.9, 26.6, 12.0, 2.9])
    assert choose(configs, 1.0, 0.0, rank=rank).trial.number == best
    assert [c.first.number for c in finalists(configs, 2, rank=rank)] == [best, best + 1]
    # the interval itself is unchanged: the single runs' lower ends are far below zero
    assert all(c.interval("goodput_rps_per_gpu").low < 0 for c in configs)


def test_finalists_are_the_rules_picks_in_order_and_include_one_with_margin():
    study = _study()
    e1 = _add(study, EDGE, 28.0)
    e2 = _add(study, (0.90, "fp8"), 28.1)  # ~0.66 GiB: also short of the margin
    e3 = _add(study, (0.905, "auto"), 28.2)
    roomy = _add(study, ROOMY, 29.5)
    _add(study, (0.93, "fp8"), 31.0)
    configs = summarize(records(study.trials), SPACE).configs
    assert [c.first.number for c in finalists(configs, 3)] == [e1, e2, e3]  # no margin required
    assert [c.first.number for c in finalists(configs, 3, min_headroom_gib=1.0)] == [e1, e2, roomy]



def test_a_goodput_study_exports_the_highest_goodput_not_the_lowest_latency():
    """The rule ranks by the space's own objective (after OOMs), in its direction."""
    data = with_setting(SPACE.model_dump(), "objectives", [{"metric": "goodput_rps_per_gpu", "direction": "maximize"},
                                                            {"metric": "oom_per_1k"}])
    space = SPACE.model_validate(with_setting(data, "workload.goodput_slo", {"ttft_s": 10.0, "tpot_s": 0.2}))
    study = _study()
    fast = _add(study, ROOMY, 20.0, extra={"goodput_rps_per_gpu": 3.0})
    busy = _add(study, (0.94, "fp8"), 40.0, extra={"goodput_rps_per_gpu": 5.0})
    choice = choose_for_export(study, space, 1.0)
    assert choice is not None and choice.trial.number == busy
    assert choice.rule.startswith("highest goodput_rps_per_gpu pessimistic end")
    # The same trials in the flagship space (objectives OOMs, p99): the lowest p99.
    assert choose_for_export(study, SPACE, 1.0).trial.number == fast


def test_a_median_export_passes_over_a_config_whose_mean_one_slow_start_inflated():
    study = _study()
    steady = _confirmed(study, (0.94, "fp8"), [31.0, 31.2, 30.8])
    unlucky = _confirmed(study, ROOMY, [30.0, 30.2, 40.0])  # one outlier start: mean 33.4, median 30.2
    assert choose_for_export(study, SPACE, 1.0).trial.number == steady
    median = SPACE.model_copy(update={"export": SPACE.export.model_copy(update={"center": "median"})})
    assert choose_for_export(study, median, 1.0).trial.number == unlucky


def test_a_median_export_says_median_where_it_words_the_ranked_value():
    """With export.center median the value shown is the median of the runs; the words say so
    (export header, status's recommended line, MLflow's evidence tag), and a config with two
    runs, which has no median apart from its mean, is still called a mean."""
    from autotune.cli.status import _recommended_line
    from autotune.export.header import evidence_lines
    from autotune.study.analysis.export_rule import study_evidence
    from autotune.tracking.report import _evidence_words

    median = SPACE.model_copy(update={"export": SPACE.export.model_copy(update={"center": "median"})})
    study = _study()
    unlucky = _confirmed(study, ROOMY, [30.0, 30.2, 40.0])
    pair = _confirmed(study, (0.94, "fp8"), [33.0, 33.2])
    choice = choose_for_export(study, median, 1.0)
    assert choice is not None and choice.trial.number == unlucky
    evidence = study_evidence(study, median)
    header = "\n".join(evidence_lines(choice, evidence, 1.0, median.export.min_headroom_gib))
    assert "p99_e2e_s: 30.2 s (median of the runs" in header and "mean of the runs" not in header
    assert "(median of 3 runs, 95 % interval" in _recommended_line(choice, "p99_e2e_s")
    assert _evidence_words(choice.config, unlucky, "p99_e2e_s").startswith("median of 3 runs: p99_e2e_s 30.2")
    two = next(c for c in evidence.configs if c.first.number == pair)
    assert _evidence_words(two, pair, "p99_e2e_s").startswith("mean of 2 runs")
    # The default space words the same study's values as means.
    mean_choice = choose_for_export(study, SPACE, 1.0)
    assert mean_choice is not None
    assert "mean of the runs" in "\n".join(evidence_lines(mean_choice, study_evidence(study, SPACE), 1.0, 1.0))


def test_a_finalist_whose_repeat_is_running_counts_as_confirmed():
    """While the finalists' repeats run, the recommendation does not jump to whichever finalist's
    repeat finished first: a config with a confirmation trial RUNNING competes as confirmed."""
    study = _study()
    good = _add(study, ROOMY, 29.0)
    other = _confirmed(study, (0.94, "fp8"), [31.0, 31.1])
    assert choose_for_export(study, SPACE, 1.0).trial.number == other  # confirmed first
    running = study.ask()  # good's repeat, under way (as the loop enqueues it: role confirm, repeat_of)
    running.set_user_attr("role", str(Role.CONFIRM))
    running.set_user_attr("repeat_of", good)
    choice = choose_for_export(study, SPACE, 1.0)
    assert choice is not None and choice.trial.number == good
    assert choice.rule.startswith("lowest p99_e2e_s upper bound among confirmed configs")
    # Once it is no longer running (here: failed), good is a single measurement again.
    study.tell(running, state=optuna.trial.TrialState.FAIL)
    assert choose_for_export(study, SPACE, 1.0).trial.number == other


def test_export_gmu_edge_passes_an_edge_config_over_for_one_within_its_interval():
    """``export.gmu_edge``: a config at or above it lacks the margin, as one short of headroom
    does; a config below it whose mean is within the edge config's interval is exported
    instead, and the finalists keep one below it for the race. Off (None) by default."""
    study = _study()
    edge = _confirmed(study, (0.96, "fp8"), [30.0, 30.9, 29.4])
    near = _confirmed(study, ROOMY, [30.2, 30.8, 30.0])  # 0.95: at the edge as well
    below = _confirmed(study, (0.94, "fp8"), [30.5, 31.0, 30.3])  # mean 30.6, inside the edge's interval
    assert choose_for_export(study, SPACE, 1.0).trial.number == edge  # the default: no edge
    guarded = SPACE.model_validate(with_setting(SPACE.model_dump(), "export.gmu_edge", 0.95))
    choice = choose_for_export(study, guarded, 1.0)
    assert choice is not None and choice.trial.number == below
    assert any("gpu_memory_utilization 0.96, at or above export.gmu_edge 0.95" in n for n in choice.notes)
    configs = summarize(records(study.trials), guarded).configs
    # the rule's picks one after another: the margin rule's pick first, then the edge config it passed over
    assert [c.first.number for c in finalists(configs, 2, 1.0, 0.0, gmu_edge=0.95)] == [below, edge]
    assert [c.first.number for c in finalists(configs, 2, 1.0, 0.0)] == [edge, near]


def test_export_gmu_edge_keeps_an_edge_config_no_config_below_it_comes_near():
    study = _study()
    edge = _confirmed(study, (0.96, "fp8"), [30.0, 30.2, 29.9])
    _confirmed(study, (0.94, "fp8"), [36.0, 36.5, 35.8])
    guarded = SPACE.model_validate(with_setting(SPACE.model_dump(), "export.gmu_edge", 0.95))
    choice = choose_for_export(study, guarded, 1.0)
    assert choice is not None and choice.trial.number == edge
    assert any("no config with the margin is within" in n for n in choice.notes)

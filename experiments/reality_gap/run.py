"""One case of the reality-gap benchmark: a scenario, a truth seed, a strategy. SIMULATED.

    .venv/bin/python -m experiments.reality_gap.run --scenario NAME|PATH --truth-seed N --strategy S \
        [--study-seed M] [--truth-family F] --json

NAME is a space in search_spaces/ (its file stem) with a grid in experiments/scenarios/grids.py,
``vllm-cpu`` (or ``vllm-cpu-quiet``, its server starts made on a quiet machine, or ``vllm-cpu-pilot``, or a
runs file ``*.jsonl`` in experiments/vllm_cpu's format: real measurements, below), or PATH a search-space file (its grid derived from the space: each param's ``grid_points``
values); S is random, tpe, grid, tpe-confirm, sim-best, auto-tune-sh, autotune or an
ablation of autotune (strategies.py). The truth is drawn by its family (families.py:
``structural`` by default, ``constants`` for issue 12's) from seed N, noise on; only the
study's backend sees it (study.py). The study runs autotune's own trial loop with the space's
trial budget (``study.trials``, or ``--trials``) on 4 simulated workers, and is scored
against the truth's brute force (truth.py, score.py). Prints one JSON object (``--json``)
or a short summary. ``--calibrate`` adds `autotune calibrate`'s held-out p99 error of the
study's own trials (nominal -> calibrated) and the truth's own noise-free error on them
(the floor the measurement noise sets). Every figure is SIMULATED, none was measured on a GPU,
except in the ``vllm-cpu`` scenarios: there the truth is experiments/vllm_cpu's table of CPU
measurements of a toy model on vLLM's CPU build (never GPU figures), each trial answered by one
recorded run of its config drawn with seed N (experiments/vllm_cpu/replay.py), the true best the
best mean in the table; autotune's model there is the simulator's CPU host, sim-best the nominal
simulator's best of the table's configs, auto-tune-sh refused (``--min-runs`` admits configs with
fewer starts).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from typing import Any

from autotune.errors import UserError
from autotune.space import SearchSpace, load_space
from autotune.study.search import confirm_trials
from autotune.study.trials import Role, enqueue_attrs
from experiments.reality_gap import auto_tune_sh, refine, seeds
from experiments.reality_gap import score as S
from experiments.reality_gap.families import DEFAULT_FAMILY, FAMILIES
from experiments.reality_gap.strategies import CEILINGS, STRATEGIES, budget, sim_best_space, variant
from experiments.reality_gap.study import WORKERS, BenchStudy, build
from experiments.reality_gap.truth import Truth
from experiments.scenarios import grids
from experiments.scenarios import ground_truth as gt_mod
from experiments.scenarios.ground_truth import is_path, main_objective, space_path
from experiments.vllm_cpu import replay

SIMULATED_NOTE = "SIMULATED (autotune.sim, a truth of the family below); not a GPU measurement"


def check_scenario(name: str) -> None:
    if is_path(name):
        if not space_path(name).is_file():
            raise UserError(f"--scenario {name!r}: no such search-space file; pass a file path or a "
                            "search_spaces/ file stem")
        check_objectives(name, load_space(space_path(name)))
        return
    if not space_path(name).exists() or name not in grids.GRIDS:
        known = sorted(n for n in grids.GRIDS if space_path(n).exists())
        raise UserError(f"--scenario {name!r}: not a search_spaces/ file stem with a brute-force grid; "
                        f"use one of {', '.join(known)}, or a search-space file's path")


def check_objectives(name: str, space: SearchSpace) -> None:
    """A case is scored by the true OOM rate (the limit) and one metric to rank by, so a space
    without both cannot be a scenario; say so before a brute force starts."""
    try:
        main_objective(space)
    except ValueError:
        listed = ", ".join(o.metric for o in space.objectives)
        raise UserError(f"--scenario {name!r}: objectives [{listed}]: a scenario needs oom_per_1k and one metric "
                        "to rank by; add `- {metric: oom_per_1k, direction: minimize}` and, for example, "
                        "`- {metric: p99_e2e_s, direction: minimize}`") from None


def gpus_per_worker(bench: BenchStudy) -> int:
    from autotune.deploy import resolve_deployment

    e = bench.space.engine
    return resolve_deployment(e.model, e.gpu, bench.space.fixed_flags(), e.env).gpus


def run_case(scenario: str, truth_seed: int, strategy: str, *, trials: int | None = None, seed: int | None = None,
             calibrate: bool = False, jobs: int = 2, log=lambda *_: None,
             family: str = DEFAULT_FAMILY, min_runs: int | None = None) -> dict[str, Any]:
    """Run one study against the truth and score it (the JSON object of the contract). ``min_runs``: replay
    scenarios only, the starts a table config needs (replay.table_for)."""
    for flag, value in (("--truth-seed", truth_seed), ("--study-seed", seed)):
        problem = None if value is None else seeds.seed_problem(flag, value)
        if problem is not None:
            raise UserError(problem)
    if jobs < 1:
        raise UserError(f"--jobs {jobs}: must be at least 1")
    if min_runs is not None and min_runs < 1:
        raise UserError(f"--min-runs {min_runs}: must be at least 1 (1 admits configs measured once)")
    if replay.is_replay(scenario):
        if family != DEFAULT_FAMILY:
            raise UserError(f"--truth-family {family} on {scenario}: a measured table is its own truth; "
                            "truth families are for the simulated scenarios")
        return run_replay_case(scenario, truth_seed, strategy, trials=trials, seed=seed, calibrate=calibrate,
                               min_runs=min_runs)
    if min_runs is not None:
        raise UserError("--min-runs: only for the vllm-cpu scenarios (a measured table)")
    check_scenario(scenario)
    if strategy not in STRATEGIES:
        raise UserError(f"--strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    if family not in FAMILIES:
        raise UserError(f"--truth-family {family!r}: use one of {', '.join(FAMILIES)}")
    t0 = time.time()
    truth = Truth.load(scenario, truth_seed, jobs=jobs, log=log, family=family)
    case_budget = trials if trials is not None else truth.space.study.trials
    study_seed = truth_seed if seed is None else seed
    t1 = time.time()
    bench = run_strategy(truth, strategy, study_seed, case_budget, jobs, log)
    study_s = time.time() - t1
    out = score_case(bench, truth, strategy, study_seed, case_budget)
    best = refine.space_best(truth, jobs, log)  # read (or computed) once for both
    out.update(refine.scores(truth, out["exported_flags"], best=best))
    out.update(refine.hour_scores(truth, out["export_timeline"], out["budget_gpu_hours"], best=best))
    if calibrate:
        out["calibration"] = calibration_errors(bench, truth)
    out["runtime_s"] = {"total": round(time.time() - t0, 1), "study": round(study_s, 1),
                        "brute_force": round(truth.brute_force_s, 1)}
    return out


def run_replay_case(scenario: str, truth_seed: int, strategy: str, *, trials: int | None = None,
                    seed: int | None = None, calibrate: bool = False,
                    min_runs: int | None = None) -> dict[str, Any]:
    """One case against the measured table (experiments/vllm_cpu/replay.py): CPU measurements, replayed."""
    problem = replay.strategy_problem(strategy)
    if problem is not None:
        raise UserError(f"--strategy {strategy} on {scenario}: {problem}; runnable there: "
                        f"{', '.join(replay.RUNNABLE)}")
    if calibrate:
        raise UserError(f"--calibrate on {scenario}: its noise floor needs a simulated truth's own profile, which a "
                        "measured table has not; python -m experiments.vllm_cpu.fidelity calibrates the simulator on "
                        "the table instead")
    t0 = time.time()
    try:
        truth = replay.ReplayTruth.load(scenario, truth_seed, min_runs=min_runs)
    except (OSError, ValueError) as e:
        raise UserError(f"--scenario: {e}") from None
    case_budget = trials if trials is not None else truth.space.study.trials
    study_seed = truth_seed if seed is None else seed
    extra: dict[str, Any] = {}
    t1 = time.time()
    try:
        if strategy == "sim-best":
            # Zero search: the nominal simulator's best of the table's configs, measured once.
            best, pred = replay.sim_best(truth.table)
            extra = {"sim_best_config": best.name, "sim_best_predicted_p99_s": pred.get("p99_e2e_s")}
            bench = build(sim_best_space(truth.space, best.params), truth.backend(), study_seed,
                          budget(strategy, case_budget)).run()
        else:
            space = variant(truth.space, "random" if strategy == "grid" else strategy)
            if strategy in CEILINGS:  # every table config once in the grid's seeded order, then confirmation
                case_budget = len(truth.table) + ceiling_confirm_runs(len(truth.table), space)
            model = replay.STRATEGY_MODES[strategy] == "model"
            if model:  # autotune's study and its model see the space the simulator models (replay.model_space)
                space = replay.model_space(space)
            sampler = replay.sampler_wrapper(truth.table, strategy, study_seed)
            bench = build(space, truth.backend(), study_seed, case_budget, wrap_sampler=sampler).run()
            if model:
                table_sampler = bench.study.sampler
                sweep = replay.sweep_of(table_sampler)
                extra = {"proposals_moved_to_table": getattr(table_sampler, "snapped", None),
                         "sweep_decisions": sorted(set((sweep.decisions or {}).values())) if sweep else None}
    except replay.NotInTable as e:
        raise UserError(str(e)) from None
    study_s = time.time() - t1
    out = score_case(bench, truth, strategy, study_seed, case_budget)  # type: ignore[arg-type]
    out.update(table_as_space(out))
    out.update(truth.describe())
    out.update(extra)
    out.update(replay_progress(bench, truth))
    out["replay_answers"] = len(bench.pool.backend.log)
    out["replay_runs_served_again"] = bench.pool.backend.reused()
    out["runtime_s"] = {"total": round(time.time() - t0, 1), "study": round(study_s, 1), "brute_force": 0.0}
    return out


def table_as_space(out: dict[str, Any]) -> dict[str, Any]:
    """The contract's refined-best keys for a measured table: its configs are every config the truth
    can value, so the best over the space is the table's best, and nothing is refined."""
    return {"true_best_space": out["true_best"], "true_best_space_flags": out["true_best_flags"],
            "regret_space": out["regret"], "within_2pct_space": out["within_2pct"],
            **{f"{k}_space": out[k] for k in refine.HOURS}}


def replay_progress(bench: BenchStudy, truth: replay.ReplayTruth) -> dict[str, Any]:
    """Configs measured (distinct table configs launched), how many had been measured when the export was first
    within 2 % (``_stable``: from when it stayed within 2 % to the end), and whether the export is tied with
    the best (``ReplayTruth.tied``: a one-sided Welch test at 5 %; None while either has one run)."""
    recs = bench.records()
    timed = S.timeline(recs, bench.pool.log)
    seen: set[tuple] = set()
    done: list[Any] = []
    to_2pct = stable = None
    for x in timed:
        done.append(x.record)
        seen.add(truth.table.key(x.record.flags))
        c = S.export_choice(done, bench.space)
        ok = c is not None and truth.within(truth.value(c.flags))
        if to_2pct is None and ok:
            to_2pct = len(seen)
        stable = (stable if stable is not None else len(seen)) if ok else None
    chosen = S.export_choice(recs, bench.space)
    tied = truth.tied(chosen.flags) if chosen is not None else None
    return {"configs_measured": len(seen), "configs_to_2pct": to_2pct, "configs_to_2pct_stable": stable,
            "tied_95": tied}


def ceiling_confirm_runs(configs: int, space: SearchSpace) -> int:
    """The confirmation runs of the ceiling: the most, up to the space's ``confirm.trials``, that the trial
    loop gives a budget of ``configs`` + them (so the search part is exactly every config once)."""
    c = space.study.confirm
    return next(n for n in range(c.trials, -1, -1) if confirm_trials(configs + n, c) == n)


def grid_all(truth: Truth, space: SearchSpace, study_seed: int) -> BenchStudy:
    """The ceiling (strategies.py): every grid config once in a seeded order, then the space's
    confirmation runs (:func:`ceiling_confirm_runs`), raced and exported by the rule."""
    configs = [{p: r[p] for p in truth.grid.params} for r in truth.grid.rows]
    random.Random(study_seed).shuffle(configs)
    bench = build(space, truth.backend(), study_seed, len(configs) + ceiling_confirm_runs(len(configs), space))
    for c in configs:
        bench.study.enqueue_trial(c, user_attrs=enqueue_attrs(Role.SEARCH))
    return bench.run()


def run_strategy(truth: Truth, strategy: str, study_seed: int, case_budget: int, jobs: int = 2,
                 log=lambda *_: None) -> BenchStudy:
    """One study of ``strategy`` against ``truth``: the space it sees, run to its end."""
    if strategy == "sim-best":
        nominal = gt_mod.brute_force(truth.scenario, jobs=jobs, log=log)  # the model's own brute force
        if nominal.target is None:
            raise UserError(f"{truth.name}: the nominal simulator finds no config within the OOM limit")
        space = sim_best_space(truth.space, truth.params(nominal.target))
        return build(space, truth.backend(), study_seed, budget(strategy, case_budget)).run()
    space = variant(truth.space, strategy)
    if strategy in CEILINGS:
        return grid_all(truth, space, study_seed)
    if strategy == "auto-tune-sh":
        study, pool = auto_tune_sh.run(space, truth.backend(), study_seed, WORKERS)
        return BenchStudy(space, study, pool, None)
    return build(space, truth.backend(), study_seed, budget(strategy, case_budget)).run()


def budget_gpu_hours(truth: Truth, case_budget: int, gpus: int) -> float:
    """What a case's budget is worth in GPU-hours: its trials at the truth's best config's
    GPU time each (the normaliser of the GPU-hour figures and the regret curve's span)."""
    per_trial = float(truth.best.get("gpu_time_s") or 0.0)
    return case_budget * gpus * per_trial / 3600.0


def score_case(bench: BenchStudy, truth: Truth, strategy: str, study_seed: int, budget: int) -> dict[str, Any]:
    recs = bench.records()
    timed = S.timeline(recs, bench.pool.log)
    gpus = truth.gpus(bench) if isinstance(truth, replay.ReplayTruth) else gpus_per_worker(bench)
    chosen = S.export_choice(recs, bench.space)
    row = truth.value(chosen.flags) if chosen is not None else None
    best = truth.best
    picks = [(h, None if f is None else truth.params(f)) for h, f in S.export_timeline(timed, bench.space, gpus)]
    progress = S.progress(picks, lambda f: truth.within(truth.value(f)), lambda f: S.true_regret(truth, f))
    fin = S.finite_or_none
    span = budget_gpu_hours(truth, budget, gpus)

    def frac(h: float | None) -> float | None:
        return None if h is None or not span else h / span

    return {
        "note": truth.note if isinstance(truth, replay.ReplayTruth) else SIMULATED_NOTE,
        "scenario": truth.name,
        "truth_seed": truth.seed,
        "truth_family": truth.family,
        "truth_kind": seeds.kind(truth.seed),
        "truth_mechanisms": list(truth.draw.mechanisms),
        "strategy": strategy,
        "study_seed": study_seed,
        "trials": budget,
        "main_objective": truth.main,
        "maximize": truth.maximize,
        "exported_flags": truth.params(chosen.flags) if chosen is not None else None,
        "exported_trial": chosen.first.number if chosen is not None else None,
        "exported_runs": chosen.n if chosen is not None else 0,
        "true_p99_s": fin(float(row["p99_e2e_s"])) if row else None,
        "true_main": fin(float(row[truth.main])) if row else None,
        "true_oom_per_1k": fin(float(row["oom_per_1k"])) if row else None,
        "true_best": float(best[truth.main]),
        "true_best_flags": truth.params(best),
        "regret": fin(truth.regret(row)) if row else None,
        "within_2pct": truth.within(row) if row else False,
        "gpus_per_worker": gpus,
        "workers": WORKERS,
        "gpu_hours": S.gpu_hours_by(math.inf, timed, gpus),
        "gpu_hours_to_2pct": progress.first,
        "gpu_hours_to_2pct_stable": progress.stable,
        "budget_gpu_hours": span,
        "gpu_hours_to_2pct_frac": frac(progress.first),
        "gpu_hours_to_2pct_stable_frac": frac(progress.stable),
        "regret_auc": S.regret_auc(progress.curve, span),
        "export_timeline": [[h, f] for h, f in picks],
        "timeline_rule": S.TIMELINE_RULE,
        "wall_hours": bench.pool.now / 3600.0,
        "launched": len(timed),
        "rejected": sum(r.state.value == "rejected" for r in recs),
        "early_stopped": sum(r.launched and r.early_stopped for r in recs),
        "confirmation_runs": sum(r.launched and r.role.value == "confirm" for r in recs),
        "wrongly_rejected": len(wrong := S.wrongly_rejected(recs, truth.starts)),
        "wrongly_rejected_trials": wrong,
        "wasted_launches": len(wasted := S.failed_launches(recs, warm_start=False)),
        "wasted_launch_trials": wasted,
        "warm_start_failed_launches": len(S.failed_launches(recs, warm_start=True)),
    }


def calibration_errors(bench: BenchStudy, truth: Truth) -> dict[str, Any]:
    """`autotune calibrate`'s held-out error of p99 (and the others) on this study's trials,
    and the truth's own noise-free profile on the same held-out trials (the noise floor)."""
    from autotune.calibrate import calibrate
    from autotune.calibrate.calibration import held_out_errors

    recs = bench.records()
    try:
        cal = calibrate(recs, bench.space)
    except UserError as e:
        return {"error": str(e)}
    held = [r for r in recs if r.number in set(cal.held_out_trials)]
    oracle = {e.metric: e.after for e in held_out_errors(held, bench.space, cal.base, truth.profile.without_noise())}
    return {e.metric: {"trials": e.trials, "before": e.before, "after": e.after, "oracle": oracle.get(e.metric)}
            for e in cal.errors}


def summary(out: dict[str, Any]) -> str:
    h = out["gpu_hours_to_2pct"]
    cpu = out["truth_family"] == replay.FAMILY
    kind = "CPU measurements, replayed; not GPU" if cpu else "SIMULATED"
    hours = "engine CPU-core-h" if cpu else "GPU-h"
    return (f"{out['scenario']} truth {out['truth_seed']} ({out['truth_family']}) {out['strategy']} "
            f"study seed {out['study_seed']} ({kind}): exported trial "
            f"{out['exported_trial']}, true {out['main_objective']} {out['true_main']} vs best {out['true_best']:.4g} "
            f"(regret {out['regret']}), true OOM/1k {out['true_oom_per_1k']}, within 2 %: {out['within_2pct']}; "
            f"{hours} {out['gpu_hours']:.2f}, to 2 %: {'never' if h is None else f'{h:.2f}'}; wrongly rejected "
            f"{out['wrongly_rejected']}, wasted launches {out['wasted_launches']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True, help="a search_spaces/ file stem with a grid, or a space file's path")
    ap.add_argument("--truth-seed", type=int, required=True, help="the truth's seed (seeds.py: dev and eval seeds)")
    ap.add_argument("--truth-family", default=DEFAULT_FAMILY, choices=FAMILIES, help="how truths depart from the model")
    ap.add_argument("--strategy", required=True, choices=STRATEGIES)
    ap.add_argument("--trials", type=int, help="trial budget (default: the space's study.trials)")
    ap.add_argument("--study-seed", "--seed", dest="seed", type=int, help="study seed (default: the truth seed)")
    ap.add_argument("--calibrate", action="store_true", help="add the calibration error on this study's trials")
    ap.add_argument("--jobs", type=int, default=2, help="processes for a brute force that is not cached")
    ap.add_argument("--min-runs", type=int, help="vllm-cpu scenarios: starts a table config needs (default "
                    f"{replay.MIN_RUNS}; 1 admits configs measured once)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        if args.trials is not None and args.trials < 1:
            raise UserError(f"--trials {args.trials}: must be at least 1")
        out = run_case(args.scenario, args.truth_seed, args.strategy, trials=args.trials, seed=args.seed,
                       calibrate=args.calibrate, jobs=args.jobs, log=lambda m: print(m, file=sys.stderr),
                       family=args.truth_family, min_runs=args.min_runs)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out) if args.json else summary(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

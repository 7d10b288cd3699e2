"""One case of the reality-gap benchmark: a scenario, a truth seed, a strategy. SIMULATED.

    .venv/bin/python -m experiments.reality_gap.run --scenario NAME --truth-seed N --strategy S --json

NAME is a space in search_spaces/ (its file stem) with a grid in experiments/scenarios/grids.py;
S is random, tpe, grid, autotune or an ablation of autotune (strategies.py). The truth is
the simulator with its uncertain constants perturbed by seed N, noise on; only the study's
backend sees it (study.py). The study runs autotune's own trial loop with the space's
trial budget (``study.trials``, or ``--trials``) on 4 simulated workers, and is scored
against the truth's brute force (truth.py, score.py). Prints one JSON object (``--json``)
or a short summary. ``--calibrate`` adds `autotune calibrate`'s held-out p99 error of the
study's own trials (nominal -> calibrated) and the truth's own noise-free error on them
(the floor the measurement noise sets). Every figure is SIMULATED, none was measured on a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from autotune.errors import UserError
from experiments.reality_gap import score as S
from experiments.reality_gap.strategies import STRATEGIES, variant
from experiments.reality_gap.study import WORKERS, BenchStudy, build
from experiments.reality_gap.truth import Truth
from experiments.scenarios import grids
from experiments.scenarios.ground_truth import space_path


def check_scenario(name: str) -> None:
    if not space_path(name).exists() or name not in grids.GRIDS:
        known = sorted(n for n in grids.GRIDS if space_path(n).exists())
        raise UserError(f"--scenario {name!r}: not a search_spaces/ file stem with a brute-force grid; "
                        f"use one of {', '.join(known)}")


def gpus_per_worker(bench: BenchStudy) -> int:
    from autotune.deploy import resolve_deployment

    e = bench.space.engine
    return resolve_deployment(e.model, e.gpu, bench.space.fixed_flags(), e.env).gpus


def run_case(scenario: str, truth_seed: int, strategy: str, *, trials: int | None = None, seed: int | None = None,
             calibrate: bool = False, jobs: int = 2, log=lambda *_: None) -> dict[str, Any]:
    """Run one study against the truth and score it (the JSON object of the contract)."""
    check_scenario(scenario)
    t0 = time.time()
    truth = Truth.load(scenario, truth_seed, jobs=jobs, log=log)
    space = variant(truth.space, strategy)
    budget = trials if trials is not None else truth.space.study.trials
    study_seed = truth_seed if seed is None else seed
    t1 = time.time()
    bench = build(space, truth.profile, study_seed, budget).run()
    study_s = time.time() - t1
    out = score_case(bench, truth, strategy, study_seed, budget)
    if calibrate:
        out["calibration"] = calibration_errors(bench, truth)
    out["runtime_s"] = {"total": round(time.time() - t0, 1), "study": round(study_s, 1),
                        "brute_force": round(truth.brute_force_s, 1)}
    return out


def score_case(bench: BenchStudy, truth: Truth, strategy: str, study_seed: int, budget: int) -> dict[str, Any]:
    recs = bench.records()
    timed = S.timeline(recs, bench.pool.log)
    gpus = gpus_per_worker(bench)
    chosen = S.export_choice(recs, bench.space)
    row = truth.value(chosen.flags) if chosen is not None else None
    best = truth.best
    progress = S.hours_to_within(timed, bench.space, gpus, lambda f: truth.within(truth.value(f)))
    fin = S.finite_or_none
    return {
        "note": "SIMULATED (autotune.sim with a perturbed profile); not a GPU measurement",
        "scenario": truth.scenario,
        "truth_seed": truth.seed,
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
    return (f"{out['scenario']} truth {out['truth_seed']} {out['strategy']} (SIMULATED): exported trial "
            f"{out['exported_trial']}, true {out['main_objective']} {out['true_main']} vs best {out['true_best']:.4g} "
            f"(regret {out['regret']}), true OOM/1k {out['true_oom_per_1k']}, within 2 %: {out['within_2pct']}; "
            f"GPU-h {out['gpu_hours']:.2f}, to 2 %: {'never' if h is None else f'{h:.2f}'}; wrongly rejected "
            f"{out['wrongly_rejected']}, wasted launches {out['wasted_launches']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True, help="a search_spaces/ file stem with a grid")
    ap.add_argument("--truth-seed", type=int, required=True, help="the truth: SimProfile.perturbed(N)")
    ap.add_argument("--strategy", required=True, choices=STRATEGIES)
    ap.add_argument("--trials", type=int, help="trial budget (default: the space's study.trials)")
    ap.add_argument("--seed", type=int, help="study seed (default: the truth seed)")
    ap.add_argument("--calibrate", action="store_true", help="add the calibration error on this study's trials")
    ap.add_argument("--jobs", type=int, default=2, help="processes for a brute force that is not cached")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        if args.trials is not None and args.trials < 1:
            raise UserError(f"--trials {args.trials}: must be at least 1")
        out = run_case(args.scenario, args.truth_seed, args.strategy, trials=args.trials, seed=args.seed,
                       calibrate=args.calibrate, jobs=args.jobs, log=lambda m: print(m, file=sys.stderr))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out) if args.json else summary(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

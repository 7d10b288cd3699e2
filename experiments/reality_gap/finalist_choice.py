"""Which configs should reach the race? Finalists by single runs (the export rule) or by a GP posterior.

The ceiling (``grid-all``) measures every grid config once and races the three the export rule
ranks first. On trace-replay it misses the 2 % band in 4 of 7 evaluation cases, and a race four times
as long moves one: the finalists are the three luckiest of some 400 single runs. A GP over the
config space pools neighbouring runs and shrinks a lucky one toward them, so its posterior mean
might pick finalists nearer the true best. This script measures that on the ceiling's search part
(every grid config once, the same study grid-all runs) before anything in autotune is changed:

* ``single``: the export rule's finalists (``export_rule.finalists``), as the race gets them today;
* ``gp``: the best posterior means of a GP on the log metric with a constant mean;
* ``gp-model``: the same with the nominal simulator's prediction as the prior mean (the sweep's
  residual GP: ``residual.ResidualGP`` on log(measured / nominal));
* ``union``: the rule's two best and the best of ``gp-model`` not among them (added after the
  first ten development cases had been read, so it is judged on development truths 4-9).

Both GPs draw from the pool the rule draws from (usable configs of the best OOM tier), and fit the
run-to-run noise by marginal likelihood (no config is measured twice before the race, so the study
has no repeats to estimate it from). Printed per case: the true regret (%) of each finalist, best
first, and whether one of them is within 2 %. ALL FIGURES ARE SIMULATED. Development truth seeds
only (seeds.py): choosing the finalist rule on evaluation truths would be developing on them.

``python -m experiments.reality_gap.finalist_choice --scenario trace-replay --truth-seeds 0-3``
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune.study.analysis.evidence import ConfigEvidence, summarize
from autotune.study.analysis.export_rule import DEFAULT_MAX_OOM_PER_1K, Ranking, finalists_in_space, tier
from autotune.study.search.residual import ResidualGP, encode
from autotune.study.trials import Role
from experiments.reality_gap import seeds
from experiments.reality_gap.bench import seeds as seed_list
from experiments.reality_gap.run import run_strategy
from experiments.reality_gap.truth import Truth
from experiments.scenarios import ground_truth as gt_mod

RUN_SDS = (0.02, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24)  # log spreads of one run the fit chooses among
RAW_STRETCH = 4.0  # a raw log metric varies up to ~4x more than the residual grid (SCALES) allows


def log_likelihood(gp: ResidualGP) -> float:
    """The GP's log marginal likelihood (constants dropped), from its fitted factors."""
    return -0.5 * float((gp.r - gp.mean) @ gp.alpha) - float(np.sum(np.log(np.diag(gp.chol))))


def fitted_posterior(x: np.ndarray, y: np.ndarray, stretch: float = 1.0) -> np.ndarray:
    """The posterior mean of ``y`` at ``x`` under the GP and run spread of highest likelihood.
    The GP of ``y / stretch`` is the GP of ``y`` with its scales and spread ``stretch`` times
    larger, so the residual GP's kernel grid serves a raw metric too."""
    fits = (ResidualGP.fit(x, y / stretch, [1.0] * len(y), sd / stretch) for sd in RUN_SDS)
    return stretch * max(fits, key=log_likelihood).predict(x)[0]


def pool(configs: Sequence[ConfigEvidence], rank: Ranking) -> list[ConfigEvidence]:
    """What the export rule draws finalists from: usable configs of the best OOM tier, measured
    (above zero: the GP is on the log, and a config that served no goodput is never a finalist)."""
    usable = [c for c in configs if c.usable and c.interval(rank.metric).mean > 0]
    best = min(tier(c, DEFAULT_MAX_OOM_PER_1K) for c in usable)
    return [c for c in usable if tier(c, DEFAULT_MAX_OOM_PER_1K) == best]


def nominal_values(truth: Truth, params: Sequence[dict[str, Any]]) -> np.ndarray:
    """The nominal simulator's noise-free main objective of each config: its brute-force row, or
    simulated by the same rule where its grid lacks the config (the grids of a scenario's nominal
    and structural brute forces need not be one). A config the model predicts to serve nothing
    (NaN, or no goodput) gets the worst value it predicts for any, so the log stays finite."""
    nominal = gt_mod.brute_force(truth.scenario, log=lambda *_: None)
    profile = truth.space.engine.profile.without_noise()
    rows = [nominal.value(p) or gt_mod.true_value(truth.space, p, profile) for p in params]
    values = np.array([float(r[truth.main]) for r in rows])
    ok = np.isfinite(values) & (values > 0)
    if not ok.any():
        return np.ones(len(values))  # no prior to speak of: a constant mean
    worst = values[ok].min() if truth.maximize else values[ok].max()
    return np.where(ok, values, worst)


def union(rule: Sequence[ConfigEvidence], model: Sequence[ConfigEvidence], k: int) -> list[ConfigEvidence]:
    """``k`` finalists: the rule's ``k - 1`` best, then the model-prior GP's best not among them
    (the same number of finalists, so the same race budget, with one place not decided by single runs)."""
    out = list(rule[: k - 1])
    out += [c for c in model if all(c is not o for o in out)][: k - len(out)]
    return out


def case(scenario: str, truth_seed: int, study_seed: int) -> dict[str, Any]:
    truth = Truth.load(scenario, truth_seed)
    bench = run_strategy(truth, "grid-all", study_seed, truth.space.study.trials)
    space, rank = bench.space, Ranking.for_space(bench.space)
    search = [r for r in bench.records() if r.role != Role.CONFIRM]
    configs = summarize(search, space).configs
    k = space.study.confirm.finalists
    chosen = {"single": finalists_in_space(configs, space, k)}
    cands = pool(configs, rank)
    params = [truth.params(c.flags) for c in cands]
    x = np.array([encode(space, p) for p in params])
    sign = -1.0 if rank.maximize else 1.0  # the GP's lower is better either way
    y = np.array([sign * math.log(c.interval(rank.metric).mean) for c in cands])
    prior = sign * np.log(nominal_values(truth, params))
    for name, post in (("gp", fitted_posterior(x, y, RAW_STRETCH)), ("gp-model", prior + fitted_posterior(x, y - prior))):
        chosen[name] = [cands[i] for i in np.argsort(post, kind="stable")[:k]]
    chosen["union"] = union(chosen["single"], chosen["gp-model"], k)
    out: dict[str, Any] = {"note": "SIMULATED", "scenario": scenario, "truth_seed": truth_seed,
                           "study_seed": study_seed, "configs": len(cands)}
    for name, fs in chosen.items():
        rows = [truth.value(f.flags) for f in fs]
        out[name] = [round(100 * truth.regret(r), 1) for r in rows]
        out[f"{name}_has_2pct"] = any(truth.within(r) for r in rows)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--truth-seeds", type=seed_list, required=True, help="development seeds: '0-3' or '0,2'")
    ap.add_argument("--study-seed", type=int, default=0)
    args = ap.parse_args(argv)
    return seeds.print_dev_rows(args.truth_seeds, lambda: (case(args.scenario, s, args.study_seed)
                                                           for s in args.truth_seeds))


if __name__ == "__main__":
    sys.exit(main())

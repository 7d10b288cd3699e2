"""Can a race of a few runs tell configs 2 % apart? The truth's own noise, measured near its best.

The goal "within 2 % of the true best" asks the export to choose between configs whose true
values differ by a few per cent, from a handful of runs each: the confirmation race gives each
of its finalists about ``1 + repeats`` runs (3 with the default ``confirm`` section). Whether
that can decide 2 % depends on the run-to-run spread, which the structural truths draw per
truth (outlier starts, KV jitter near a cliff, per-node speed offsets). This script measures it
where the export chooses: ``--configs`` configs of the truth's grid within the OOM limit and
10 % of its best (noise-free), evenly spaced in rank from the best, each run ``--runs`` times
as a study's trials run (``noise.noisy_runs``: one of the study's workers, its outlier and
KV-jitter draws; each config its own server-start seeds, so no two configs share a run's luck,
as no two trials do). Then, by resampling those runs, for every pair of configs: how often
``n`` runs of each put the truly better one first (n = 1, 3, 9), by the pair's true gap, each
config's runs summarised by their mean (as the export rule ranks) and by their median (which
one outlier start among three cannot move). Resampling ``n`` of ``--runs`` values tends, as
``n`` nears ``--runs``, to the order of those runs' own means, so the n = 9 figure needs
``--runs`` well above 9 (40 in the README).
Per truth also: the median coefficient of variation of one run, the runs per config a normal
approximation needs to order two configs 2 % apart correctly 95 % of the time
(2 x (1.645 x CV / 0.02)^2), and how many grid configs lie within 2 % of the best (a wide band
is easy to land in at any noise; a narrow one is a decision between configs 2 % apart).

It reads no study and changes nothing in autotune: it says how far selection by measurement can
go at a truth's noise, whatever the search. Development truth seeds only (seeds.py). ALL FIGURES
ARE SIMULATED.

``python -m experiments.reality_gap.resolution --scenario qwen72b-mixed --truth-seeds 0-3 > F`` (JSON lines), then
``python -m experiments.reality_gap.resolution --table F ...`` (one markdown line per scenario)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiments.reality_gap import seeds
from experiments.reality_gap.bench import seeds as seed_list
from experiments.reality_gap.noise import noisy_runs
from experiments.reality_gap.truth import WITHIN, Truth
from experiments.scenarios import ground_truth as gt

SEED0 = 40001  # server-start seeds no study, brute force or other probe uses; config i takes SEED0 + 1000 i
RUNS_PER_MEAN = (1, 3, 9)
GAPS = ((0.0, 0.01), (0.01, 0.02), (0.02, 0.04), (0.04, 0.08), (0.08, math.inf))  # true gap bins
# How a config's runs are summarised before two configs are compared: the mean (the export rule's
# ranking) and the median, which one outlier start among three cannot move.
SUMMARIES: dict[str, Callable[[Sequence[float]], float]] = {"mean": statistics.mean, "median": statistics.median}
SUMMARIES_KEYS = {"mean": "ordered_right", "median": "ordered_right_median"}
DRAWS = 400  # resampled races per pair and n
Z95 = 1.645  # one-sided: the better config first 95 % of the time
NEAR = 0.10  # configs up to 10 % worse than the best: where finalists come from


def gap_label(lo: float, hi: float) -> str:
    return f">= {100 * lo:g} %" if math.isinf(hi) else f"{100 * lo:g}-{100 * hi:g} %"


def near_best(truth: Truth, k: int) -> list[dict[str, Any]]:
    """``k`` grid configs within the OOM limit and ``NEAR`` of the best, evenly spaced in rank from the best
    (the best among them): the pairs then span the gaps a race meets, not only the few tenths of a per cent
    between a grid's top configs."""
    rows = [r for r in truth.grid.rows if gt.feasible(r, truth.main)]
    rows.sort(key=lambda r: -r[truth.main] if truth.maximize else r[truth.main])
    rows = [r for r in rows if truth.regret(r, rows[0]) <= NEAR]
    picks = sorted({round(i * (len(rows) - 1) / max(k - 1, 1)) for i in range(k)})
    return [truth.params(rows[i]) for i in picks]


def ordered_right(better: Sequence[float], worse: Sequence[float], n: int, maximize: bool,
                  rng: random.Random, summary: Callable[[Sequence[float]], float] = statistics.mean) -> float:
    """The share of resampled races in which ``summary`` (the mean, as the export rule ranks, or the
    median) of ``n`` runs of each puts the truly better config first."""
    right = 0
    for _ in range(DRAWS):
        a, b = summary(rng.choices(better, k=n)), summary(rng.choices(worse, k=n))
        right += (a > b) if maximize else (a < b)
    return right / DRAWS


def runs_needed(cv: float) -> int:
    """Runs per config a normal approximation needs to order two configs ``WITHIN`` (2 %) apart 95 % of the time."""
    return math.ceil(2 * (Z95 * cv / WITHIN) ** 2)


def case(scenario: str, truth_seed: int, configs: int, runs: int) -> dict[str, Any]:
    truth = Truth.load(scenario, truth_seed)
    measured = []  # (noise-free value, the runs' values)
    for i, params in enumerate(near_best(truth, configs)):
        vals = [v for out in noisy_runs(truth, params, runs, SEED0 + 1000 * i)
                if out["started"] and not math.isnan(v := float(out[truth.main]))]
        if len(vals) >= 2:
            measured.append((float(truth.value(params)[truth.main]), vals))
    measured.sort(key=lambda m: -m[0] if truth.maximize else m[0])
    rng = random.Random(truth_seed)
    shares = {name: {gap_label(*g): {n: [] for n in RUNS_PER_MEAN} for g in GAPS} for name in SUMMARIES}
    for (fa, va), (fb, vb) in itertools.combinations(measured, 2):
        d = truth.regret({truth.main: fb}, {truth.main: fa})
        label = next(gap_label(lo, hi) for lo, hi in GAPS if lo <= d < hi)
        for name, summary in SUMMARIES.items():
            for n in RUNS_PER_MEAN:
                shares[name][label][n].append(ordered_right(va, vb, n, truth.maximize, rng, summary))
    feasible = [r for r in truth.grid.rows if gt.feasible(r, truth.main)]
    cv = statistics.median(statistics.stdev(v) / abs(statistics.mean(v)) for _, v in measured)
    return {"note": "SIMULATED", "scenario": scenario, "truth_seed": truth_seed, "configs": len(measured),
            "runs": runs, "cv": round(cv, 4), "runs_needed_2pct": runs_needed(cv),
            "spread_of_values_pct": round(100 * truth.regret({truth.main: measured[-1][0]}, {truth.main: measured[0][0]}), 1),
            "grid_configs_within_2pct": sum(truth.within(r) for r in feasible), "grid_configs_feasible": len(feasible),
            **{key: {label: {str(n): (round(statistics.mean(v), 3) if v else None, len(v)) for n, v in by_n.items()}
                     for label, by_n in shares[name].items()} for name, key in SUMMARIES_KEYS.items()}}


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One markdown line per scenario: the truths' run spread, the runs a 2 % decision needs, and how
    often n runs of each order a pair of configs 1-2 % and 2-4 % apart right (pairs pooled over truths)."""
    def pooled(rs: Sequence[dict[str, Any]], label: str, n: int, key: str = "ordered_right") -> str:
        cells = [r[key][label][str(n)] for r in rs]
        pairs = sum(c[1] for c in cells)
        if not pairs:
            return "-"
        return f"{sum(c[0] * c[1] for c in cells if c[0] is not None) / pairs:.2f}"

    out = ["| scenario (truths) | CV of one run, median (range over truths) | runs per config to order 2 % right 95 % "
           "of the time | grid configs within 2 % of the best, median (range) | ordered right by the mean, 1-2 % apart, "
           "n = 1 / 3 / 9 runs | the same, 2-4 % apart | by the median, 2-4 % apart, n = 3 / 9 |",
           "|---|---|---|---|---|---|---|"]
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        rs = [r for r in rows if r["scenario"] == scenario]
        cvs = sorted(r["cv"] for r in rs)
        need = sorted(r["runs_needed_2pct"] for r in rs)
        out.append(f"| {scenario} ({', '.join(str(r['truth_seed']) for r in rs)}) | "
                   f"{100 * statistics.median(cvs):.1f} % ({100 * cvs[0]:.1f}-{100 * cvs[-1]:.1f} %) | "
                   f"{statistics.median(need):g} ({need[0]}-{need[-1]}) | {_band(rs)} | "
                   + " | ".join(" / ".join(pooled(rs, label, n) for n in RUNS_PER_MEAN)
                                for label in (gap_label(*GAPS[1]), gap_label(*GAPS[2])))
                   + " | " + " / ".join(pooled(rs, gap_label(*GAPS[2]), n, "ordered_right_median") for n in (3, 9))
                   + " |")
    return out


def _band(rs: Sequence[dict[str, Any]]) -> str:
    """How many grid configs lie within 2 % of the best: a wide band is easy to land in, whatever the noise."""
    n = sorted(r["grid_configs_within_2pct"] for r in rs)
    return f"{statistics.median(n):g} ({n[0]}-{n[-1]}) of {statistics.median(r['grid_configs_feasible'] for r in rs):g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", nargs="+", metavar="FILE", help="print the markdown table of these rows (JSON lines) "
                    "instead of measuring")
    ap.add_argument("--scenario")
    ap.add_argument("--truth-seeds", type=seed_list, help="development seeds: '0-3' or '0,2'")
    ap.add_argument("--configs", type=int, default=12, help="the truth's best configs to run (default 12)")
    ap.add_argument("--runs", type=int, default=20, help="noisy runs of each (default 20)")
    args = ap.parse_args(argv)
    if args.table:
        print("\n".join(table([json.loads(x) for f in args.table for x in Path(f).read_text().splitlines() if x])))
        return 0
    if args.scenario is None or args.truth_seeds is None:
        ap.error("--scenario and --truth-seeds are required unless --table is given")
    if args.configs < 2 or args.runs < 2:
        print("error: --configs and --runs must each be at least 2 (a pair of configs, a spread of runs)",
              file=sys.stderr)
        return 2
    return seeds.print_dev_rows(args.truth_seeds,
                                lambda: (case(args.scenario, s, args.configs, args.runs) for s in args.truth_seeds))


if __name__ == "__main__":
    sys.exit(main())

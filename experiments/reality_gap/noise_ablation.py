"""Which part of a structural truth's noise costs the search its 2 %? The same cases with one part switched off.

    .venv/bin/python -m experiments.reality_gap.noise_ablation --scenario qwen72b-mixed --truth-seeds 0-3 \
        --study-seeds 0-2 --without nodes --out experiments/reality_gap/results/dev/noise_without_nodes.jsonl

A structural truth's runs carry a persistent speed offset per node and a drift (``nodes``), heavy-tailed
outlier runs (``outliers``) and a KV cache sized a little differently at each start (``kv``), on top of
the simulator's own run-to-run noise (families.py). This runs a strategy's study against the truth with
the named parts off and scores its export exactly as run.py does, against the *unchanged* truth (its
noise-free brute force and refined best do not depend on these parts), so a row compares with the
contract's row of the same case. A diagnostic, not a benchmark: no user's GPUs can switch their noise
off, and the rows say which noise a search would have to model to gain the most. ALL FIGURES ARE
SIMULATED. Development truth seeds only (seeds.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from autotune.errors import UserError
from experiments.reality_gap import refine, seeds
from experiments.reality_gap.bench import seeds as seed_list
from experiments.reality_gap.run import run_strategy, score_case
from experiments.reality_gap.truth import Truth

PARTS = ("nodes", "outliers", "kv")


def quieter(truth: Truth, without: tuple[str, ...]) -> Truth:
    """``truth`` whose runs lack the ``without`` parts of its noise (its brute force is shared)."""
    draw, quirks = truth.draw, truth.draw.quirks
    if "nodes" in without:
        draw = dataclasses.replace(draw, node_sigma=0.0, drift_per_hour=0.0)
    if "outliers" in without:
        quirks = dataclasses.replace(quirks, outlier_chance=0.0)
    if "kv" in without:
        quirks = dataclasses.replace(quirks, kv_jitter=0.0)
    return dataclasses.replace(truth, draw=dataclasses.replace(draw, quirks=quirks))


def case(scenario: str, truth_seed: int, study_seed: int, strategy: str, without: tuple[str, ...]) -> dict:
    truth = Truth.load(scenario, truth_seed)
    budget = truth.space.study.trials
    bench = run_strategy(quieter(truth, without), strategy, study_seed, budget)
    out = score_case(bench, truth, strategy, study_seed, budget)
    out.update(refine.scores(truth, out["exported_flags"]))
    out["noise_without"] = list(without)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--truth-seeds", type=seed_list, required=True, help="0-3 or 0,2 (development seeds only)")
    ap.add_argument("--study-seeds", type=seed_list, default=[0])
    ap.add_argument("--strategy", default="autotune")
    ap.add_argument("--without", nargs="+", choices=PARTS, required=True)
    ap.add_argument("--out", type=Path, help="append one JSON row per case here (default: print them)")
    args = ap.parse_args(argv)
    for t in args.truth_seeds:
        if (problem := seeds.dev_only_problem("--truth-seeds", t)) is not None:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    try:
        for t in args.truth_seeds:
            for s in args.study_seeds:
                line = json.dumps(case(args.scenario, t, s, args.strategy, tuple(args.without)), default=str)
                if args.out is None:
                    print(line, flush=True)
                else:
                    with args.out.open("a") as f:
                        f.write(line + "\n")
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

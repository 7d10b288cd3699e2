"""Where the truth's OOMs sit in gpu_memory_utilization, and what a cap on it would cost.

Every export over the true OOM limit on the development rows (the flagship's and the variant
spaces') was at gpu_memory_utilization >= 0.95, where a vLLM engine keeps the least memory for
what its KV pool does not hold (activations, CUDA graphs, fragmentation that grows with
uptime). Nothing the study measures separates those configs from the safe ones at the same
gmu (oom_exports.py). Before any guard is built on gmu, this reads each truth's grid and gives,
per truth: the share of started grid configs at gmu >= ``--edge`` over the OOM limit, and how
far the best config with gmu below ``--edge`` is from the truth's best (the least a hard cap
would cost, with a perfect search).

Development truth seeds only (seeds.py); reads cached truths (a missing one is brute-forced).
ALL FIGURES ARE SIMULATED.

``python -m experiments.reality_gap.gmu_edge --scenarios qwen72b-mixed trace-replay --truth-seeds 0-9``
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autotune.errors import UserError
from experiments.reality_gap import seeds
from experiments.reality_gap.bench import seeds as seed_list
from experiments.reality_gap.run import check_scenario
from experiments.reality_gap.truth import Truth
from experiments.scenarios.ground_truth import best_within_limit, feasible

GMU = "gpu_memory_utilization"


def edge_row(scenario: str, truth_seed: int, edge: float) -> dict[str, Any]:
    """One truth: its OOM-limit failures at and above ``edge``, and the regret of the best below it."""
    check_scenario(scenario)
    truth = Truth.load(scenario, truth_seed, jobs=1)
    if GMU not in truth.space.params:
        raise UserError(f"--scenarios {scenario}: {GMU} is not searched there (params), so its grid has no edge to "
                        "split at; pass a space that searches it")
    started = [r for r in truth.grid.rows if r["started"]]
    at_edge = [r for r in started if r[GMU] >= edge]
    best = best_within_limit(truth.grid.rows, truth.main, truth.maximize)
    below = best_within_limit([r for r in truth.grid.rows if r[GMU] < edge], truth.main, truth.maximize)
    cap_regret = None if best is None or below is None else truth.regret(below)
    return {"note": "SIMULATED", "scenario": truth.name, "truth_seed": truth_seed, "edge": edge,
            "started_at_edge": len(at_edge),
            "over_limit_at_edge": sum(1 for r in at_edge if not feasible(r, truth.main)),
            "over_limit_below_edge": sum(1 for r in started if r[GMU] < edge and not feasible(r, truth.main)),
            "started_below_edge": len(started) - len(at_edge),
            "best_gmu": None if best is None else best[GMU],
            "cap_regret": None if cap_regret is None else round(cap_regret, 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", nargs="+", required=True, help="names or space-file paths")
    ap.add_argument("--truth-seeds", type=seed_list, required=True, help="development seeds: '0-9' or '0,2'")
    ap.add_argument("--edge", type=float, default=0.95, help="the gpu_memory_utilization counted as the edge")
    args = ap.parse_args(argv)
    return seeds.print_dev_rows(args.truth_seeds, lambda: (edge_row(sc, s, args.edge)
                                                           for sc in args.scenarios for s in args.truth_seeds))


if __name__ == "__main__":
    sys.exit(main())

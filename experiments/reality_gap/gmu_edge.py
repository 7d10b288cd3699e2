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

``python -m experiments.reality_gap.gmu_edge --scenarios qwen72b-mixed trace-replay --truth-seeds 0-9 > R.jsonl``
``python -m experiments.reality_gap.gmu_edge --table R.jsonl`` (the README's table of those rows)
``python -m experiments.reality_gap.gmu_edge --exports experiments/reality_gap/results/dev/*.jsonl``
``python -m experiments.reality_gap.gmu_edge --guard R.jsonl ...`` (the guard, ``export.gmu_edge``, against autotune)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autotune.errors import UserError
from autotune.study.analysis.export_rule import GMU
from experiments.reality_gap import seeds
from experiments.reality_gap.bench import seeds as seed_list
from experiments.reality_gap.paired import counts, over_limit, read_rows
from experiments.reality_gap.run import check_scenario
from experiments.reality_gap.truth import WITHIN, Truth
from experiments.scenarios.ground_truth import best_within_limit, feasible


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


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The README's table: ``edge_row`` rows summed per scenario."""
    out = ["| scenario | truths | over the limit at the edge | over the limit below it | truth's best at the edge "
           "| best below the edge within 2 % | worst cost of a cap below the edge |", "|---|---|---|---|---|---|---|"]
    for sc in dict.fromkeys(r["scenario"] for r in rows):
        rs = [r for r in rows if r["scenario"] == sc]
        cells = [f"{o}/{n} ({100 * o / max(n, 1):.0f} %)" for o, n in (
            (sum(r["over_limit_at_edge"] for r in rs), sum(r["started_at_edge"] for r in rs)),
            (sum(r["over_limit_below_edge"] for r in rs), sum(r["started_below_edge"] for r in rs)))]
        costs = [r["cap_regret"] for r in rs if r["cap_regret"] is not None]
        out.append(f"| {sc} | {len(rs)} | {cells[0]} | {cells[1]} | {sum(r['best_gmu'] >= r['edge'] for r in rs)} "
                   f"| {sum(c <= WITHIN for c in costs)} | {100 * max(costs, default=0.0):.1f} % |")
    return out


def export_counts(rows: list[dict[str, Any]], edge: float) -> dict[str, Any]:
    """autotune's exports in benchmark rows (development truths only), split at ``edge``:
    how many lie on each side, how many of those are over the true OOM limit, and the
    over-limit ones per scenario."""
    out: dict[str, Any] = {"at_edge": 0, "over_limit_at_edge": 0, "below_edge": 0, "over_limit_below_edge": 0,
                           "over_limit_by_scenario": {}}
    for r in rows:
        gmu = (r.get("exported_flags") or {}).get(GMU)
        if r.get("strategy") != "autotune" or gmu is None or r["truth_seed"] not in seeds.DEV_TRUTH_SEEDS:
            continue
        side = "at_edge" if gmu >= edge else "below_edge"
        out[side] += 1
        if over_limit(r):
            out[f"over_limit_{side}"] += 1
            by = out["over_limit_by_scenario"]
            by[r["scenario"]] = by.get(r["scenario"], 0) + 1
    return out


def guard_table(rows: list[dict[str, Any]], edge: float, base: str = "autotune",
                guard: str = "autotune-edge") -> list[str]:
    """The edge guard against autotune, paired on the development cases both strategies ran: per
    scenario, each one's cases within 2 % and the OOM limit, its exports over the limit and at
    the edge, how many exports the guard changed and the largest regret it added to an export
    within the limit."""
    case = {(r["scenario"], r["truth_seed"], r["study_seed"], r["strategy"]): r for r in rows
            if r.get("strategy") in (base, guard) and r["truth_seed"] in seeds.DEV_TRUTH_SEEDS}
    keys = sorted({k[:3] for k in case if k[:3] + (base,) in case and k[:3] + (guard,) in case})
    out = [f"| scenario | cases | within 2 % and the limit ({base} / {guard}) | over the OOM limit | "
           f"exports at gmu >= {edge:g} | exports changed | largest regret added to one within the limit |",
           "|---|---|---|---|---|---|---|"]
    for sc in dict.fromkeys(k[0] for k in keys):
        pairs = [(case[k + (base,)], case[k + (guard,)]) for k in keys if k[0] == sc]
        changed = [(a, b) for a, b in pairs if a["exported_flags"] != b["exported_flags"]]
        # Regret against an export over the limit means nothing: it could not be deployed.
        added = max((b["regret"] - a["regret"] for a, b in changed if not over_limit(a)), default=0.0)
        # within_2pct is the truth's own test: within 2 % of its best and within the OOM limit.
        out.append(f"| {sc} | {len(pairs)} | {counts(pairs, lambda r: bool(r['within_2pct']))} | "
                   f"{counts(pairs, over_limit)} | "
                   f"{counts(pairs, lambda r: (r['exported_flags'] or {}).get(GMU, 0.0) >= edge)} | {len(changed)} | "
                   f"{100 * added:+.1f} % |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", nargs="+", help="names or space-file paths")
    ap.add_argument("--truth-seeds", type=seed_list, help="development seeds: '0-9' or '0,2'")
    ap.add_argument("--edge", type=float, default=0.95, help="the gpu_memory_utilization counted as the edge")
    ap.add_argument("--table", nargs="+", type=Path, metavar="ROWS", help="print the README's table of these rows")
    ap.add_argument("--exports", nargs="+", type=Path, metavar="ROWS",
                    help="count autotune's exports in these benchmark rows files on each side of the edge")
    ap.add_argument("--guard", nargs="+", type=Path, metavar="ROWS",
                    help="pair autotune-edge with autotune on the development cases of these rows files")
    args = ap.parse_args(argv)
    if args.guard:
        print("\n".join(guard_table(read_rows(args.guard), args.edge)))
        return 0
    if args.table:
        print("\n".join(table(read_rows(args.table))))
        return 0
    if args.exports:
        print(json.dumps(export_counts(read_rows(args.exports), args.edge)))
        return 0
    if not args.scenarios or not args.truth_seeds:
        ap.error("give --scenarios and --truth-seeds, or --table, --exports or --guard")
    return seeds.print_dev_rows(args.truth_seeds, lambda: (edge_row(sc, s, args.edge)
                                                           for sc in args.scenarios for s in args.truth_seeds))


if __name__ == "__main__":
    sys.exit(main())

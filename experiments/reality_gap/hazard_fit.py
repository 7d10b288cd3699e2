"""Can a study's own engine deaths flag a config over the OOM limit that its clean runs pass?

autotune's calibration leaves the runtime-OOM hazard at the model's constants (calibrate/stages.py,
``oom_stage``: "not identifiable from counts that sparse"), and every export over the true OOM
limit on the development rows passed its two to four runs without a death. This probe asks whether
the deaths the study *did* see elsewhere, near the memory edge, pin the hazard down well enough to
say which of the clean-run candidates are over the limit. No study changes: each development case
is run as ``run.py`` runs it (strategy autotune, or ``--strategy``'s), then:

1. the hazard is refitted to the study's full runs, died or not, by the code ``export.oom_model``
   runs (:mod:`autotune.calibrate.hazard`): each config's noise-free trajectory under the
   model gives every step's log memory margin ``r = ln(m / u)`` (``m`` the memory left for what
   the profile did not see, ``u`` a step's median unaccounted use), re-scored as
   ``Q((r + ln(1 - d / m) - ln a) / s)`` over a grid of ``(d, a, s)``: ``d`` GiB more memory the
   model does not know of, ``a`` a scale of the unaccounted use, ``s`` its spread (``d = 0, a = 1,
   s = sigma0`` is the model's own hazard);
2. a candidate (a config whose full runs are all clean: what the export may pick) is flagged
   when its fitted death chance per run times the requests one death fails (the median, per 1000
   requests, over the study's runs that died once) is over the OOM limit of 1 per 1000;
3. each candidate's truth (noise-free, 10 runs near the limit: ground_truth.py) says whether it is
   over the limit; the gpu_memory_utilization edge (>= 0.95, gmu_edge.py) is the baseline flag.

SIMULATED; development truth seeds only (seeds.py). Rows: one JSON object per case (``--out``);
``--table`` prints the summary per scenario from rows files.

    .venv/bin/python -m experiments.reality_gap.hazard_fit --scenarios qwen72b-mixed --truth-seeds 0-3 \\
        --study-seeds 0-2 --out experiments/reality_gap/results/dev/hazard_fit.jsonl
    .venv/bin/python -m experiments.reality_gap.hazard_fit --table experiments/reality_gap/results/dev/hazard_fit.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from autotune.calibrate import hazard
from autotune.errors import UserError
from autotune.study.analysis import config_key
from autotune.study.analysis.evidence import full_runs
from experiments.reality_gap import score as S
from experiments.reality_gap import seeds
from experiments.reality_gap.bench import seeds as seed_list
from experiments.reality_gap.run import run_strategy
from experiments.reality_gap.strategies import STRATEGIES
from experiments.reality_gap.truth import Truth
from experiments.scenarios import ground_truth as gt

LIMIT = 1.0  # OOMs per 1000 requests: the benchmark's limit (ground_truth.py)
EDGE = 0.95  # gmu_edge.py's edge
GMU = "gpu_memory_utilization"


def case(scenario: str, truth_seed: int, study_seed: int, strategy: str = "autotune") -> dict[str, Any]:
    """One development case: ``strategy``'s study as run.py runs it, the hazard refitted to its deaths
    (autotune.calibrate.hazard, the code export.oom_model runs), and every clean candidate's
    prediction next to its truth."""
    truth = Truth.load(scenario, truth_seed)
    bench = run_strategy(truth, strategy, study_seed, truth.space.study.trials)
    recs = bench.records()
    groups = list(full_runs(recs).values())
    fitted = hazard.study_fit(groups, bench.space)
    sigma0 = bench.space.study.strategy.base_profile.frag_sigma
    chosen = S.export_choice(recs, bench.space)
    exported = config_key(truth.params(chosen.flags)) if chosen is not None else None
    cands = []
    for g in groups:
        runs = [r for r in g if r.started]
        t = hazard.trajectory(bench.space, g[0].flags)
        if not runs or t is None or any(r.metrics.get("crashes", 0) > 0 for r in runs):
            continue
        p_fit = fitted.death_chance(t) if fitted is not None else 0.0
        row = truth.value(g[0].flags)
        cands.append({"params": truth.params(g[0].flags), "runs": len(runs), "p_fit": p_fit,
                      "p_model": hazard.death_chance(t, 0.0, 1.0, sigma0),
                      "oom_fit": fitted.oom_per_1k(t) if fitted is not None else 0.0, "gmu": g[0].flags.get(GMU),
                      "true_oom_per_1k": row.get("oom_per_1k"), "true_feasible": gt.feasible(row, truth.main),
                      "regret": truth.regret(row), "exported": config_key(truth.params(g[0].flags)) == exported})
    f = fitted
    return {"scenario": truth.name, "truth_seed": truth_seed, "study_seed": study_seed, "strategy": strategy,
            "shift_gib": f.shift_gib if f else None, "scale": f.scale if f else None, "spread": f.spread if f else None,
            "spread_model": sigma0, "deaths_seen": f.deaths if f else 0, "runs": f.runs if f else None,
            "oom_per_death_per_1k": f.oom_per_death_per_1k if f else None, "candidates": cands}


def _flag_fit(c: Mapping[str, Any]) -> bool:
    return c["oom_fit"] > LIMIT


def _flag_edge(c: Mapping[str, Any]) -> bool:
    return isinstance(c["gmu"], int | float) and c["gmu"] >= EDGE


def table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    out = ["| scenario | studies | candidates (clean runs only) | over the limit | flagged by the fitted hazard (over / within) "
           "| flagged by the edge (over / within) | exports over the limit | of them flagged by the fit | "
           "exports within it flagged by the fit |", "|---" * 9 + "|"]
    for name in sorted({_study_kind(r) for r in rows}):
        rs = [r for r in rows if _study_kind(r) == name]
        cs = [c for r in rs for c in r["candidates"]]
        over = [c for c in cs if (c["true_oom_per_1k"] or 0) > LIMIT]
        within = [c for c in cs if (c["true_oom_per_1k"] or 0) <= LIMIT]
        ex_over = [c for c in over if c["exported"]]
        ex_within = [c for c in within if c["exported"]]
        out.append(f"| {name} | {len(rs)} | {len(cs)} | {len(over)} | {sum(map(_flag_fit, over))} / "
                   f"{sum(map(_flag_fit, within))} | {sum(map(_flag_edge, over))} / {sum(map(_flag_edge, within))} | "
                   f"{len(ex_over)} | {sum(map(_flag_fit, ex_over))} | {sum(map(_flag_fit, ex_within))} of {len(ex_within)} |")
    return out


def _study_kind(row: Mapping[str, Any]) -> str:
    """A table line's name: the scenario, and the strategy where it is not autotune (rows before
    ``--strategy`` are autotune's)."""
    strategy = row.get("strategy", "autotune")
    return row["scenario"] if strategy == "autotune" else f"{row['scenario']} ({strategy})"


def _run(args: tuple[str, int, int, str]) -> dict[str, Any]:
    return case(*args)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="+", default=[])
    ap.add_argument("--truth-seeds", type=seed_list, default=[0], help="development seeds: '0-9' or '0,2'")
    ap.add_argument("--study-seeds", type=seed_list, default=[0])
    ap.add_argument("--strategy", choices=STRATEGIES, default="autotune",
                    help="whose studies the hazard is refitted to (default autotune)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", nargs="+", type=Path, help="rows files to summarise (no study runs)")
    a = ap.parse_args(argv)
    try:
        if a.table:
            rows = [json.loads(line) for f in a.table for line in f.read_text().splitlines() if line.strip()]
            print("\n".join(table(rows)))
            return 0
        truths = a.truth_seeds
        for t in truths:
            if (problem := seeds.dev_only_problem("--truth-seeds", t)) is not None:
                raise UserError(problem)
        done = set()
        if a.out and a.out.exists():
            done = {(r["scenario"], r["truth_seed"], r["study_seed"], r.get("strategy", "autotune"))
                    for r in map(json.loads, a.out.read_text().splitlines()) if r}
        todo = [(sc, t, s, a.strategy) for sc in a.scenarios for t in truths for s in a.study_seeds
                if (Truth.load(sc, t).name, t, s, a.strategy) not in done]
        with ProcessPoolExecutor(max_workers=a.jobs) as pool:
            for row in pool.map(_run, todo):
                line = json.dumps(row)
                if a.out:
                    with a.out.open("a") as f:
                        f.write(line + "\n")
                fit = (f"shift {row['shift_gib']:g} GiB, scale {row['scale']:.2f}, spread {row['spread']:.2f}"
                       if row["shift_gib"] is not None else "no death to fit to")
                print(f"{row['scenario']} truth {row['truth_seed']} seed {row['study_seed']}: {fit}, "
                      f"{row['deaths_seen']} deaths", file=sys.stderr)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

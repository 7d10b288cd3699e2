"""How far a truth family is from the nominal simulator: does the model's own best still win?

    .venv/bin/python -m experiments.reality_gap.family_check --scenarios small-highconc bursty-goodput \\
        --truth-seeds 0-2 [--family structural] [--jobs 1] [--json]

For each (scenario, truth): the truth's brute force (cached under truths/, as the benchmark
caches it) and the nominal simulator's (committed under experiments/scenarios/data/), then

* ``sim_best_regret``: the true regret of the nominal simulator's best config (zero search:
  the ``sim-best`` baseline without its one measurement's noise);
* ``spearman``: rank correlation of nominal and true main objective over the configs that
  start under both;
* ``feasibility_flips``: the fraction of grid configs that start (or meet the OOM limit)
  under one and not the other.

A family that the model fits (``constants``) gives sim-best within 2 % in most cases; issue
18 asks of the ``structural`` family that it be so in at most half. Run it on development
seeds only (seeds.py). ALL VALUES ARE SIMULATED.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from experiments.reality_gap.families import DEFAULT_FAMILY, FAMILIES
from experiments.reality_gap.truth import OOM_LIMIT, Truth
from experiments.scenarios import ground_truth as gt_mod


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    for rank, i in enumerate(order):
        r[i] = float(rank)
    return r


def spearman(a: list[float], b: list[float]) -> float:
    if len(a) < 3:
        return math.nan
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va and vb else math.nan


def _ok(row: dict[str, Any]) -> bool:
    return bool(row["started"]) and float(row["oom_per_1k"]) <= OOM_LIMIT


def check(scenario: str, truth_seed: int, family: str, jobs: int, log=lambda *_: None) -> dict[str, Any]:
    truth = Truth.load(scenario, truth_seed, jobs=jobs, log=log, family=family)
    nominal = gt_mod.brute_force(scenario, jobs=jobs, log=log)
    sim_best = nominal.target
    row = truth.value(truth.params(sim_best)) if sim_best is not None else None
    main = truth.main
    pairs = [(float(n[main]), float(t[main])) for n in nominal.rows
             if (t := truth.grid.value(n)) is not None and n["started"] and t["started"]
             and not math.isnan(float(n[main])) and not math.isnan(float(t[main]))]
    flips = sum(_ok(n) != _ok(t) for n in nominal.rows if (t := truth.grid.value(n)) is not None)
    regret = truth.regret(row) if row is not None else math.nan
    return {"scenario": truth.name, "truth_seed": truth_seed, "family": family,
            "mechanisms": list(truth.draw.mechanisms),
            "sim_best_regret": None if math.isnan(regret) else regret,
            "sim_best_within_2pct": bool(row is not None and truth.within(row)),
            "spearman": spearman([p[0] for p in pairs], [p[1] for p in pairs]),
            "feasibility_flips": flips / max(len(nominal.rows), 1),
            "true_best": float(truth.best[main]), "brute_force_s": round(truth.brute_force_s, 1)}


def seeds_arg(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", nargs="+", required=True)
    ap.add_argument("--truth-seeds", type=seeds_arg, default=seeds_arg("0-2"))
    ap.add_argument("--family", choices=FAMILIES, default=DEFAULT_FAMILY)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for sc in args.scenarios:
        for s in args.truth_seeds:
            r = check(sc, s, args.family, args.jobs, log=lambda m: print(m, file=sys.stderr))
            rows.append(r)
            print(json.dumps(r) if args.json else
                  f"{r['scenario']} truth {s}: sim-best regret {r['sim_best_regret']}, within 2 %: "
                  f"{r['sim_best_within_2pct']}, spearman {r['spearman']:.3f}, flips {r['feasibility_flips']:.1%}",
                  flush=True)
    within = sum(r["sim_best_within_2pct"] for r in rows)
    print(f"sim-best within 2 % (SIMULATED, {args.family}): {within}/{len(rows)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

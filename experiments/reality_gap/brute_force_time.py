"""Recompute cached truths' brute forces from scratch: how long each takes, and that the
table is the cached one value for value. SIMULATED (autotune.sim); CPU seconds of this machine.

    .venv/bin/python -m experiments.reality_gap.brute_force_time --scenario qwen72b-mixed --truth-seeds 2 1001

The brute force replays repeat runs that a crash-free run's crash draws show to be that
run (autotune.sim.hazard.survives): this checks that the replay changed no row of any
committed truth it is run on, and times it against the ``runtime_s`` the cache recorded
(with its ``jobs``); each stage's time goes to stderr. Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from experiments.reality_gap.families import DEFAULT_FAMILY, FAMILIES
from experiments.reality_gap.truth import is_cached, scenario_space, truth_dir, truth_draw
from experiments.scenarios import ground_truth as gt


def check(scenario: str, seed: int, jobs: int, family: str = DEFAULT_FAMILY) -> dict[str, Any]:
    """One truth recomputed: its time, the cached time, and how many values differ."""
    if not is_cached(scenario, seed, family):
        raise SystemExit(f"error: {scenario} truth {seed} ({family}) is not cached: nothing to compare with")
    space = scenario_space(scenario)
    draw = truth_draw(space, scenario, seed, family)
    cached = gt.read(scenario, space, truth_dir(scenario, seed, family))
    t0 = time.time()
    new = gt.run_brute_force(scenario, space, gt.scenario_grid(scenario, space), draw.profile.without_noise(),
                             gt.Settings(), jobs, lambda line: print(line, file=sys.stderr), draw.quirks)
    differ = sum(json.dumps(a[k]) != json.dumps(b[k]) for a, b in zip(cached.rows, new.rows, strict=True) for k in a)
    return {"scenario": scenario, "truth_seed": seed, "jobs": jobs, "runtime_s": round(time.time() - t0),
            "cached_runtime_s": cached.summary.get("runtime_s"), "cached_jobs": cached.summary.get("jobs"),
            "configs": new.summary["configs"], "stage2_configs": new.summary["stage2_configs"],
            "stage3_configs": new.summary["stage3_configs"], "replayed_runs": new.summary["replayed_runs"],
            "values_differing": differ, "rows": len(new.rows)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--truth-seeds", type=int, nargs="+", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--truth-family", default=DEFAULT_FAMILY, choices=sorted(FAMILIES))
    args = ap.parse_args()
    for seed in args.truth_seeds:
        print(json.dumps(check(args.scenario, seed, args.jobs, args.truth_family)), flush=True)


if __name__ == "__main__":
    main()

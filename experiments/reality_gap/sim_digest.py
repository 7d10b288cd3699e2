"""A digest of the simulator's outputs, to show a speed-up changed nothing.

Simulates every ``--step``-th config of each scenario's brute-force grid under two
development truths of the default family (noise on, and the same with the noise off) and
under the nominal profile, and hashes every result: its metrics, counts, extras and every
request record. Run it before and after a change to the simulator's code; equal digests
mean equal outputs on those runs. SIMULATED; about 70 s of one core at the default step.

    .venv/bin/python -m experiments.reality_gap.sim_digest            # one line per scenario, then JSON
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import time

from autotune.deploy import NOMINAL
from autotune.results import TrialResult
from autotune.sim import simulate_trial
from autotune.sim.quirks import NONE
from experiments.reality_gap.seeds import DEV_TRUTH_SEEDS
from experiments.reality_gap.truth import scenario_space, truth_draw
from experiments.scenarios import grids

SCENARIOS = ("small-highconc", "bursty-goodput", "trace-replay", "qwen72b-mixed", "rag-llama70b-h100")


def digest(res: TrialResult) -> str:
    m = res.metrics()
    return repr((sorted((k, repr(v)) for k, v in m.items()), res.crashes, res.preemptions, res.kv_cache_tokens,
                 [repr(r) for r in res.records], sorted((res.extra or {}).items())))


def scenario_digest(scenario: str, step: int, truth_seeds: tuple[int, ...]) -> tuple[int, str]:
    sp = scenario_space(scenario)
    configs = grids.configs(grids.grid_for(scenario))[::step]
    h = hashlib.sha256()
    for seed in truth_seeds:
        td = truth_draw(sp, scenario, seed)
        runs = ((td.profile, td.quirks), (dataclasses.replace(td.profile, noise=False), td.quirks), (NOMINAL, NONE))
        for i, c in enumerate(configs):
            for profile, quirks in runs:
                res = simulate_trial(sp.engine.model, sp.engine.gpu, {**sp.fixed_flags(), **c}, sp.workload,
                                     seed=seed * 100 + i, env=sp.engine.env, profile=profile, quirks=quirks)
                h.update(digest(res).encode())
    return len(configs), h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=int, default=37, help="every STEP-th grid config (default 37)")
    args = ap.parse_args()
    seeds = tuple(sorted(DEV_TRUTH_SEEDS))[:2]
    out = {}
    t0 = time.process_time()
    for sc in SCENARIOS:
        out[sc] = scenario_digest(sc, args.step, seeds)
        print(sc, *out[sc], f"{time.process_time() - t0:.0f} s", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Run-to-run spread of the simulator's p99 on the qwen72b space (SIMULATED, not GPU figures).

    .venv/bin/python experiments/noise/run.py [--seeds 20] [--out experiments/noise]

The same config measured with ``--seeds`` trial seeds, as autotune would measure it twice on
GPUs with fresh server starts: each seed draws its own per-start speed and startup factors
and its own step and API jitter (``SimProfile``: run_speed_sigma, startup_sigma,
step_jitter_sigma, api_jitter_sigma). Three noise settings per config: all of it (nominal),
jitter only (the per-start factors off), and none (``SimProfile.noise`` off: a ground
truth). Writes results.json and results.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
from pathlib import Path
from typing import Any

from autotune.deploy import NOMINAL
from autotune.sim import simulate_trial
from autotune.space import load_space

REPO = Path(__file__).resolve().parents[2]
SPACE = REPO / "search_spaces" / "qwen72b.yaml"
CONFIGS = {
    "vLLM defaults (gmu 0.92)": {},
    "gmu 0.95, max_num_seqs 64": {"gpu_memory_utilization": 0.95, "max_num_seqs": 64},
    "no prefix caching, gmu 0.9 (preempting)": {"gpu_memory_utilization": 0.9, "enable_prefix_caching": False},
    "eager, block 32": {"gpu_memory_utilization": 0.93, "enforce_eager": True, "block_size": 32},
}
TINY = 1e-12  # a per-start sigma this small leaves the speed factor at 1.0
NOISE = {
    "all (nominal)": NOMINAL,
    "jitter only": dataclasses.replace(NOMINAL, run_speed_sigma=TINY, startup_sigma=TINY),
    "off": NOMINAL.without_noise(),
}


def spread(values: list[float]) -> dict[str, float]:
    """Mean, coefficient of variation, (max - min) / mean, and the median and 90th percentile
    of |a - b| / mean over all pairs of runs (what comparing two identical runs shows)."""
    mean = statistics.mean(values)
    pairs = sorted(abs(a - b) / mean for a, b in itertools.combinations(values, 2))
    return {"mean": mean, "cv": statistics.pstdev(values) / mean, "range": (max(values) - min(values)) / mean,
            "pair_median": pairs[len(pairs) // 2], "pair_p90": pairs[int(0.9 * (len(pairs) - 1))]}


def run(seeds: int) -> list[dict[str, Any]]:
    sp = load_space(SPACE)
    rows = []
    for cname, over in CONFIGS.items():
        for nname, profile in NOISE.items():
            res = [simulate_trial(sp.engine.model, sp.engine.gpu, {**sp.fixed_flags(), **over}, sp.workload, seed=s,
                                  env=sp.engine.env, profile=profile) for s in range(seeds)]
            row = {"config": cname, "noise": nname, "p99_e2e_s": spread([r.metrics()["p99_e2e_s"] for r in res]),
                   "output_tok_per_s": spread([r.metrics()["output_tok_per_s"] for r in res])}
            rows.append(row)
            p = row["p99_e2e_s"]
            print(f"{cname:42s} {nname:14s} p99 {p['mean']:6.2f} s  cv {100 * p['cv']:4.1f} %  range "
                  f"{100 * p['range']:4.1f} %  pairs median {100 * p['pair_median']:4.1f} % p90 {100 * p['pair_p90']:4.1f} %")
    return rows


def write(rows: list[dict[str, Any]], out: Path, seeds: int) -> None:
    (out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [f"SIMULATED (autotune.sim): {seeds} trial seeds per row, qwen72b space (1000 requests, concurrency 16). "
             "Spread of p99 e2e latency: CV = sd / mean; range = (max - min) / mean; pairs = |a - b| / mean over all "
             "pairs of runs (median, 90th percentile); throughput CV for comparison.", "",
             "| config | noise | p99 mean s | p99 CV | p99 range | p99 pairs median | p99 pairs p90 | tok/s CV |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, t = r["p99_e2e_s"], r["output_tok_per_s"]
        lines.append(f"| {r['config']} | {r['noise']} | {p['mean']:.2f} | {100 * p['cv']:.1f} % | "
                     f"{100 * p['range']:.1f} % | {100 * p['pair_median']:.1f} % | {100 * p['pair_p90']:.1f} % | "
                     f"{100 * t['cv']:.1f} % |")
    (out / "results.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = ap.parse_args()
    write(run(args.seeds), args.out, args.seeds)
    print(f"wrote {args.out / 'results.md'} and results.json")


if __name__ == "__main__":
    main()

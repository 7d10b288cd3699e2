"""How noisy one measurement is, per scenario: the truth's best config run with the noise on. SIMULATED.

    .venv/bin/python -m experiments.reality_gap.noise [--truth-seed 0] [--runs 10] [SCENARIO ...]

For each scenario: the main objective of the truth's best config (its brute force's target)
over ``--runs`` fresh server starts with the run-to-run noise on, against its noise-free
value (what the benchmark scores by). The CV says how far apart two measurements of one
config are, against the 2 % the goals ask to resolve.
"""

from __future__ import annotations

import argparse
import statistics

from experiments.reality_gap.truth import Truth
from experiments.scenarios import ground_truth as gt

SEED0 = 7001  # server-start seeds no study or brute force uses


def measure(scenario: str, truth_seed: int, runs: int) -> dict[str, float | str]:
    t = Truth.load(scenario, truth_seed, jobs=1)
    config = dict(t.params(t.best))
    gt._init(t.space, t.profile)
    vals = [gt._simulate((0, config, SEED0 + k))[1][t.main] for k in range(runs)]
    mean = statistics.mean(vals)
    return {"scenario": scenario, "metric": t.main, "noise_free": float(t.best[t.main]), "mean": mean,
            "cv": statistics.stdev(vals) / mean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=["qwen72b-mixed", "rag-llama70b-h100", "trace-replay",
                                                     "bursty-goodput", "small-highconc"])
    ap.add_argument("--truth-seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    print("| scenario | metric | noise-free (truth's best) | mean of the runs, noise on | CV of one run |")
    print("|---|---|---|---|---|")
    for sc in args.scenarios:
        r = measure(sc, args.truth_seed, args.runs)
        print(f"| {sc} | {r['metric']} | {r['noise_free']:.3g} | {r['mean']:.3g} | {100 * r['cv']:.1f} % |")


if __name__ == "__main__":
    main()

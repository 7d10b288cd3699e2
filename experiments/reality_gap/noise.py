"""How noisy one measurement is, per scenario: the truth's best config run with the noise on. SIMULATED.

    .venv/bin/python -m experiments.reality_gap.noise [--truth-seed 0] [--runs 10] [SCENARIO ...]

For each scenario: the main objective of the truth's best config (its brute force's target)
over ``--runs`` fresh server starts with the run-to-run noise on, against its noise-free
value (what the benchmark scores by). The CV says how far apart two measurements of one
config are, against the 2 % the goals ask to resolve. A run is what a study's trial measures:
the truth's quirks (its outlier runs and KV jitter among them) on one of the study's workers,
whose persistent speed offset it carries (``families.TruthBackend``; start k on worker k mod
``study.WORKERS``). The lowest and highest run are given as ratios to the noise-free value.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterator
from typing import Any

from autotune.space import SearchSpace
from experiments.reality_gap.families import DEFAULT_FAMILY, FAMILIES, TruthBackend
from experiments.reality_gap.study import WORKERS
from experiments.reality_gap.truth import Truth
from experiments.scenarios import ground_truth as gt

SEED0 = 7001  # server-start seeds no study or brute force uses


def noisy_runs(truth: Truth, params: dict[str, Any], runs: int, seed0: int = SEED0,
               space: SearchSpace | None = None) -> Iterator[dict[str, Any]]:
    """``runs`` server starts of ``params`` with the truth's noise on, as a study's trials run
    them: start k on worker k mod ``study.WORKERS`` (that node's speed offset, without the
    drift), with its outlier and KV-jitter draws, trial seed ``seed0 + k``. ``space``: the
    truth's own by default (oom_exports gives a soaked one). Each run's brute-force row."""
    backend = TruthBackend(truth.draw)
    for k in range(runs):
        gt._init(space or truth.space, truth.profile, backend.quirks_on(k % WORKERS, 0.0))
        yield gt._simulate((0, params, seed0 + k))[1]


def measure(scenario: str, truth_seed: int, runs: int, family: str = DEFAULT_FAMILY) -> dict[str, float | str]:
    t = Truth.load(scenario, truth_seed, jobs=1, family=family)
    vals = [run[t.main] for run in noisy_runs(t, dict(t.params(t.best)), runs)]
    mean, free = statistics.mean(vals), float(t.best[t.main])
    return {"scenario": scenario, "metric": t.main, "noise_free": free, "mean": mean,
            "cv": statistics.stdev(vals) / mean, "low": min(vals) / free, "high": max(vals) / free}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", default=["qwen72b-mixed", "rag-llama70b-h100", "trace-replay",
                                                     "bursty-goodput", "small-highconc"])
    ap.add_argument("--truth-seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--truth-family", choices=sorted(FAMILIES), default=DEFAULT_FAMILY)
    args = ap.parse_args()
    print(f"SIMULATED; truth family {args.truth_family}, truth seed {args.truth_seed}, {args.runs} runs")
    print("| scenario | metric | noise-free (truth's best) | mean of the runs, noise on | CV of one run | "
          "lowest, highest run / noise-free |")
    print("|---|---|---|---|---|---|")
    for sc in args.scenarios:
        r = measure(sc, args.truth_seed, args.runs, args.truth_family)
        print(f"| {sc} | {r['metric']} | {r['noise_free']:.3g} | {r['mean']:.3g} | {100 * r['cv']:.1f} % | "
              f"{r['low']:.2f}, {r['high']:.2f} |")


if __name__ == "__main__":
    main()

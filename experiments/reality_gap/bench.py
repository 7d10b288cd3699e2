"""The results grid: scenarios x truth seeds x strategies, resumable. SIMULATED.

    .venv/bin/python -m experiments.reality_gap.bench [--jobs 2] [--max-load 3] [--truth-family structural] \
        [--scenarios A B] [--truth-seeds 1000-1009] [--study-seeds 0-2] [--strategies random tpe grid autotune ...]

For each (truth seed, scenario) the truth's brute force and its refined best over the space
come first (cached, truth.py and refine.py: the committed ones are read, others are computed,
one process each), then its cases, each the
same call as ``run.py`` (``--calibrate`` for the strategies in ``--calibrate-strategies``).
``--jobs`` worker processes share both kinds of task: a ready truth's cases go first, and a
worker with no case to run brute-forces the next truth. Every finished case is appended to
results/runs.jsonl at once, and a case already there is not run again, so a killed grid
resumes where it stopped. The machine is shared: while the 1-minute load average is above
``--max-load``, only one task runs at a time. ``report.py`` turns runs.jsonl into tables
and plots.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from autotune.errors import UserError
from experiments.reality_gap import refine
from experiments.reality_gap.families import DEFAULT_FAMILY, FAMILIES
from experiments.reality_gap.run import check_scenario, run_case
from experiments.reality_gap.seeds import EVAL_TRUTH_SEEDS, STUDY_SEEDS
from experiments.reality_gap.strategies import BASELINES, STRATEGIES
from experiments.reality_gap.truth import Truth, is_cached, scenario_space
from experiments.scenarios.ground_truth import scenario_name
from experiments.vllm_cpu import replay

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = RESULTS / "runs.jsonl"
SCENARIOS = ("qwen72b-mixed", "rag-llama70b-h100", "bursty-goodput", "small-highconc", "trace-replay")
KEY = ("truth_family", "scenario", "truth_seed", "strategy", "study_seed", "trials")
OLD_FAMILY = "constants"  # rows written before truth families existed


def seeds(text: str) -> list[int]:
    """'0-9' or '0,3,5'."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",")]


def done_keys(path: Path) -> set[tuple]:
    if not path.exists():
        return set()
    out = set()
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out.add(tuple(r.get(k, OLD_FAMILY) if k == "truth_family" else r[k] for k in KEY))
    return out


Case = tuple[str, int, str, bool, int, str]  # scenario, truth seed, strategy, calibrate, study seed, family


def _case(args: Case) -> dict[str, Any]:
    scenario, truth_seed, strategy, calibrate, study_seed, family = args
    return run_case(scenario, truth_seed, strategy, calibrate=calibrate, seed=study_seed, family=family)


def ready(scenario: str, seed: int, family: str) -> bool:
    """Whether a truth's brute force and its refinement (refine.py) are both cached: its cases
    may start together without each computing (and writing) the same refinement."""
    return is_cached(scenario, seed, family) and refine.is_cached(scenario, seed, family)


def _truth(args: tuple[str, int, str]) -> tuple[str, int, str]:
    """Brute-force one truth and refine its best over the space (one process: the other workers
    run cases or other truths)."""
    scenario, seed, family = args
    refine.space_best(Truth.load(scenario, seed, jobs=1, log=_log, family=family), jobs=1, log=_log)
    return args


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument("--truth-seeds", type=seeds, default=list(EVAL_TRUTH_SEEDS))
    ap.add_argument("--study-seeds", type=seeds, default=list(STUDY_SEEDS))
    ap.add_argument("--truth-family", default=DEFAULT_FAMILY, choices=FAMILIES)
    ap.add_argument("--strategies", nargs="+", default=[*BASELINES, "autotune"], choices=STRATEGIES)
    ap.add_argument("--calibrate-strategies", nargs="*", default=["autotune"], choices=STRATEGIES)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--max-load", type=float, default=3.0, help="above this 1-min load average run one task at a time")
    ap.add_argument("--out", type=Path, default=RUNS)
    ap.add_argument("--truths-only", action="store_true", help="only brute-force (and cache) the truths")
    ap.add_argument("--cached-only", action="store_true",
                    help="skip the (scenario, truth) pairs whose brute force is not cached yet (run again later)")
    args = ap.parse_args()
    try:
        for sc in args.scenarios:
            if not replay.is_replay(sc):
                check_scenario(sc)  # before any worker starts: a bad file is one line, not a worker's traceback
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    truths = [(sc, s) for s in args.truth_seeds for sc in args.scenarios
              if not (args.cached_only and not is_cached(sc, s, args.truth_family))]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        Pipeline(pool, args, done_keys(args.out)).run(truths)


class Pipeline:
    """Keeps ``--jobs`` workers busy: a truth's cases are queued as soon as its brute force is
    cached, ahead of the next truth, and a worker with no case to run brute-forces the next
    truth meanwhile (a long autotune case does not leave the other workers idle)."""

    def __init__(self, pool: ProcessPoolExecutor, args: argparse.Namespace, done: set[tuple]) -> None:
        self.pool, self.args, self.done = pool, args, done
        self.cases: deque[Case] = deque()
        self.running: dict[Future, str] = {}
        self.t0 = time.time()

    def run(self, truths: list[tuple[str, int]]) -> None:
        pending = deque(truths)
        while pending or self.cases or self.running:
            while len(self.running) < _jobs(self.args.jobs, self.args.max_load) and (self.cases or pending):
                if self.cases:
                    self.running[self.pool.submit(_case, self.cases.popleft())] = "case"
                    continue
                sc, seed = pending.popleft()
                family = self.args.truth_family
                if ready(sc, seed, family):
                    _log(f"{sc}: truth {seed} ({family}) cached")
                    self.queue_cases(sc, seed)
                else:
                    self.running[self.pool.submit(_truth, (sc, seed, family))] = "truth"
            finished, _ = wait(self.running, timeout=30, return_when=FIRST_COMPLETED)
            for f in finished:
                kind = self.running.pop(f)
                if kind == "truth":
                    sc, seed, _ = f.result()
                    self.queue_cases(sc, seed)
                else:
                    self.record(f.result())

    def queue_cases(self, scenario: str, truth_seed: int) -> None:
        if self.args.truths_only:
            return
        trials = scenario_space(scenario).study.trials
        family = self.args.truth_family
        name = scenario_name(scenario)  # as a row records it: a space given by path is its stem and hash
        self.cases.extend((scenario, truth_seed, s, s in self.args.calibrate_strategies, m, family)
                          for m in self.args.study_seeds for s in self.args.strategies
                          if (family, name, truth_seed, s, m, trials) not in self.done)

    def record(self, r: dict[str, Any]) -> None:
        with self.args.out.open("a") as fh:
            fh.write(json.dumps(r) + "\n")
        _log(f"{r['scenario']} truth {r['truth_seed']} {r['strategy']} seed {r['study_seed']}: within 2 % {r['within_2pct']}, "
             f"regret {r['regret']}, GPU-h to 2 % {r['gpu_hours_to_2pct']} ({r['runtime_s']['total']} s; "
             f"{time.time() - self.t0:.0f} s in all)")


def _jobs(jobs: int, max_load: float) -> int:
    return jobs if os.getloadavg()[0] <= max_load else 1


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

"""Which measured-safe configs lose requests to OOMs in the truth, and what could have told?

The export rule keeps configs whose measured OOM rate is within the limit (1 per 1000), and
passes over those with less than 1 GiB of memory headroom when another is as fast. A vLLM V1
engine that runs out of memory dies and fails every request in flight (~16 on qwen72b-mixed),
so a config that dies in one benchmark of ten loses 1.6 per 1000: over the limit, and three or
four clean runs in a study do not show it (0.9^3 = 73 %). This script runs autotune's study on
a case and lists, for the configs the rule could export (usable, within the OOM limit as
measured), what the study knew of each (runs, measured OOMs, measured headroom, whether a config
needing no more memory died) beside the truth's OOM rate and the nominal model's (where its grid
has the config), so a guard can be chosen on what separates the two kinds.

Development truth seeds only (seeds.py). ALL FIGURES ARE SIMULATED.

``python -m experiments.reality_gap.oom_exports --scenario qwen72b-mixed --truth-seeds 0-3 --study-seeds 0-1``
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from autotune.space import SearchSpace
from autotune.study.analysis.evidence import summarize
from autotune.study.analysis.export_rule import DEFAULT_MAX_OOM_PER_1K, MEASURED, Ranking, tier
from experiments.reality_gap import score as S
from experiments.reality_gap import seeds
from experiments.reality_gap.bench import seeds as seed_list
from experiments.reality_gap.noise import noisy_runs
from experiments.reality_gap.run import run_strategy
from experiments.reality_gap.truth import Truth
from experiments.scenarios import ground_truth as gt_mod

TOP = 8  # configs listed per case, by the rule's ranking
SOAK_SEED0 = 9001  # the soak probe's server-start seeds: the brute force's own, but run with the noise on (other trajectories)
# Flags whose larger value never lowers a step's memory need: a larger gpu_memory_utilization
# leaves less headroom, a larger token budget or batch gives a larger step (activations, logits).
RISK_UP = ("gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs")


def at_most_as_risky(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether config ``a`` needs no more memory per step than ``b``: the same in every other flag,
    and no larger in any of :data:`RISK_UP`."""
    if any(a.get(k) != b.get(k) for k in set(a) | set(b) if k not in RISK_UP):
        return False
    return all(a.get(k) is None or b.get(k) is None or a[k] <= b[k] for k in RISK_UP)


def soaked(space: SearchSpace, passes: int) -> SearchSpace:
    """``space`` with its benchmark's requests sent ``passes`` times in a row (the trace's rows
    repeated): one server start then serves ``passes`` benchmarks. A closed-loop trace only: an
    open loop's or a timed trace's clock would have to repeat too, and a synthetic benchmark of
    ``passes`` times the requests would draw other requests, not repeat its own. A repeated row
    repeats its prefix-block ids, so a prompt unique in the trace is shared across the passes (the
    flagship's trace shares only its system prompt, which every pass shares anyway)."""
    wl = space.workload
    if not wl.closed_loop or wl.trace is None:
        raise ValueError("the soak probe repeats a closed-loop trace; this benchmark is "
                         + ("synthetic" if wl.trace is None else "timed"))
    soak = wl.model_copy(update={"num_requests": wl.num_requests * passes})
    soak._trace_rows = list(wl.trace_rows) * passes
    return space.model_copy(update={"workload": soak})


def runs_with_oom(truth: Truth, params: dict[str, Any], passes: int, runs: int) -> float:
    """The share of ``runs`` noisy server starts of ``params`` that lose any request to an OOM
    when the benchmark runs ``passes`` times back to back on one engine (its requests repeated,
    so the engine's uptime, and with it the truth's fragmentation, grows ``passes`` times as far
    as in one benchmark), run as a study's trials are (``noise.noisy_runs``)."""
    hit = sum(out["started"] and (out["oom_per_1k"] > 0 or out["crashes"] > 0)
              for out in noisy_runs(truth, params, runs, SOAK_SEED0, soaked(truth.space, passes)))
    return hit / runs


def case(scenario: str, truth_seed: int, study_seed: int, soak: int = 0, soak_runs: int = 20) -> dict[str, Any]:
    truth = Truth.load(scenario, truth_seed)
    bench = run_strategy(truth, "autotune", study_seed, truth.space.study.trials)
    space, rank = bench.space, Ranking.for_space(bench.space)
    recs = bench.records()
    every = summarize(recs, space).configs
    died = [c for c in every if c.oom.events > 0]
    configs = [c for c in every if c.usable and tier(c, DEFAULT_MAX_OOM_PER_1K) <= MEASURED]
    configs.sort(key=rank.cost)
    chosen = S.export_choice(recs, space)
    nominal = gt_mod.brute_force(truth.scenario, log=lambda *_: None)
    rows = []
    for c in configs[:TOP]:
        params = truth.params(c.flags)
        t, n = truth.value(c.flags), nominal.value(params)
        rows.append({
            "exported": chosen is not None and c.first.number == chosen.first.number,
            "runs": c.n, "measured_oom": round(c.oom.rate_per_1k, 2), "headroom_gib": round(c.headroom.gib, 2),
            "cost": round(rank.cost(c), 2),
            "a_safer_config_died": any(at_most_as_risky(d.flags, c.flags) for d in died if d is not c),
            "nominal_oom": round(float(n["oom_per_1k"]), 2) if n else None,
            "nominal_step_p": float(n["max_step_oom_p"]) if n else None,
            "true_oom": round(float(t["oom_per_1k"]), 2), "true_step_p": float(t["max_step_oom_p"]),
            "true_headroom_gib": round(float(t["headroom_gib"]), 2),
            "regret_pct": None if math.isnan(r := truth.regret(t)) else round(100 * r, 1),
            "flags": {k: params[k] for k in ("gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs")
                      if k in params},
            "params": params,
        })
        if soak:
            rows[-1].update(plain_runs_with_oom=runs_with_oom(truth, params, 1, soak_runs),
                            soak_runs_with_oom=runs_with_oom(truth, params, soak, soak_runs))
    return {"note": "SIMULATED", "scenario": scenario, "truth_seed": truth_seed, "study_seed": study_seed,
            "mechanisms": list(truth.draw.mechanisms), "configs": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--truth-seeds", type=seed_list, required=True, help="development seeds: '0-3' or '0,2'")
    ap.add_argument("--study-seeds", type=seed_list, default=[0])
    ap.add_argument("--soak", type=int, default=0, metavar="PASSES",
                    help="also give, per config, the share of noisy runs with an OOM in one benchmark and in "
                         "PASSES benchmarks back to back on one engine (a soak); 0: off")
    ap.add_argument("--soak-runs", type=int, default=20, help="runs per config for each share (default 20)")
    args = ap.parse_args(argv)
    return seeds.print_dev_rows(args.truth_seeds, lambda: (case(args.scenario, s, m, args.soak, args.soak_runs)
                                                           for s in args.truth_seeds for m in args.study_seeds))


if __name__ == "__main__":
    sys.exit(main())

"""Per scenario: vLLM's defaults vs the best config of the ground truth, on both objectives.

    .venv/bin/python -m experiments.scenarios.tables [--seeds 20] [--jobs 2]   # writes results.md / .json

"vLLM's defaults" is the study's baseline trial (autotune.study.search.seeding.baseline_params: every
searched flag at the value vLLM resolves on the scenario's GPU, with the space's fixed flags
and engine.env). "Best" is the ground truth's target: the grid config with the best main
objective among those with <= 1 OOM per 1000 (data/NAME/, from ground_truth.py). Both are
then re-run over ``--seeds`` trial seeds with the truth's profile (noise off), so their OOM
rates rest on more requests than a grid row's 1-3 runs; the table gives the mean, and in how
many runs the engine died at least once. ALL SIMULATED (autotune.sim).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import sys
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autotune.space import load_space  # noqa: E402
from autotune.study.search.seeding import baseline_params  # noqa: E402
from experiments.scenarios import ground_truth as G  # noqa: E402

HERE = Path(__file__).resolve().parent
SCENARIOS = ["qwen72b-mixed", "rag-llama70b-h100", "bursty-goodput", "small-highconc", "trace-replay"]


def _job(job: tuple[str, str, dict[str, Any], int]) -> tuple[str, str, dict[str, Any]]:
    scenario, which, params, seed = job
    sp = load_space(G.space_path(scenario))
    G._init(sp, sp.engine.profile.without_noise())
    return scenario, which, G._simulate((0, params, seed))[1]


def _summary(runs: list[dict[str, Any]], main: str) -> dict[str, Any]:
    ok = [r for r in runs if r["started"]]

    def mean(k: str) -> float:
        xs = [r[k] for r in ok if not math.isnan(r[k])]
        return statistics.mean(xs) if xs else math.nan

    return {"runs": len(runs), "started": bool(ok), "oom_per_1k": statistics.mean(r["oom_per_1k"] for r in runs),
            "runs_with_a_crash": sum(r["crashes"] > 0 for r in ok), main: mean(main), "p99_e2e_s": mean("p99_e2e_s"),
            "p99_ttft_s": mean("p99_ttft_s"), "preemptions": mean("preemptions"),
            "kv_cache_tokens": ok[0]["kv_cache_tokens"] if ok else 0,
            "headroom_gib": ok[0]["headroom_gib"] if ok else math.nan}


def run(seeds: int, jobs: int) -> list[dict[str, Any]]:
    info = {}
    jobs_list = []
    for name in SCENARIOS:
        sp = load_space(G.space_path(name))
        gt = G.brute_force(name)
        assert gt.target is not None, f"{name}: no config within the OOM limit"
        base = baseline_params(sp)
        best = {p: gt.target[p] for p in gt.params}
        info[name] = {"gt": gt, "defaults": base, "best": best}
        for which, params in (("defaults", base), ("best", best)):
            jobs_list += [(name, which, params, G.Settings().seed(s)) for s in range(seeds)]
    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with mp.get_context("fork").Pool(jobs) as pool:
        for name, which, out in pool.imap_unordered(_job, jobs_list, chunksize=2):
            got.setdefault((name, which), []).append(out)
    rows = []
    for name in SCENARIOS:
        gt = info[name]["gt"]
        row = {"scenario": name, "main": gt.main, "maximize": gt.maximize, "grid_configs": gt.summary["configs"],
               "startable": gt.summary["startable"], "front_points": len(gt.front),
               "front": [{"oom_per_1k": r["oom_per_1k"], gt.main: r[gt.main], **{p: r[p] for p in gt.params}}
                         for r in gt.front],
               "brute_force_s": gt.summary["runtime_s"], "within_1pct": gt.summary.get("within_1pct_of_target"),
               "within_5pct": gt.summary.get("within_5pct_of_target")}
        for which in ("defaults", "best"):
            row[which] = {"flags": info[name][which], **_summary(got[(name, which)], gt.main)}
        rows.append(row)
    return rows


def _f(x: float, nd: int = 2) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _flags(d: dict[str, Any]) -> str:
    short = {"gpu_memory_utilization": "gmu", "max_num_seqs": "seqs", "max_num_batched_tokens": "budget",
             "enable_prefix_caching": "prefix", "enforce_eager": "eager", "kv_cache_dtype": "kv",
             "block_size": "block"}
    return ", ".join(f"{short.get(k, k)} {v}" for k, v in d.items())


def markdown(rows: list[dict[str, Any]], seeds: int) -> str:
    out = [f"SIMULATED (autotune.sim), never GPU measurements. Defaults = the study's baseline (vLLM's "
           f"resolved defaults); best = the ground truth's target (best main objective at <= 1 OOM/1k). Both re-run "
           f"over {seeds} trial seeds with the truth's profile (noise off): OOM/1k is the mean, 'crashed' the runs "
           "in which the engine died at least once.", "",
           "| scenario | config | flags | OOM/1k (crashed runs) | main objective | p99 e2e s | p99 TTFT s | "
           "preemptions | KV tokens | headroom GiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for which in ("defaults", "best"):
            s = r[which]
            main = f"{r['main']} {_f(s[r['main']], 3)}"
            out.append(f"| {r['scenario']} | {which} | {_flags(s['flags'])} | {_f(s['oom_per_1k'], 1)} "
                       f"({s['runs_with_a_crash']}/{s['runs']}) | {main} | {_f(s['p99_e2e_s'])} | {_f(s['p99_ttft_s'])} | "
                       f"{_f(s['preemptions'], 0)} | {s['kv_cache_tokens']} | {_f(s['headroom_gib'])} |")
    out += ["", "| scenario | main objective | defaults | best | best vs defaults | grid configs (startable) | "
            "within 1 % / 5 % of best | Pareto front points | brute force s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d, b = r["defaults"][r["main"]], r["best"][r["main"]]
        gain = (b / d - 1) * 100 if d and not math.isnan(d) else math.nan
        out.append(f"| {r['scenario']} | {r['main']} ({'max' if r['maximize'] else 'min'}) | {_f(d, 3)} | {_f(b, 3)} | "
                   f"{gain:+.1f} % | {r['grid_configs']} ({r['startable']}) | {r['within_1pct']} / {r['within_5pct']} | "
                   f"{r['front_points']} | {r['brute_force_s']} |")
    out += ["", "Pareto fronts (grid values: OOM/1k, main objective, flags):", ""]
    for r in rows:
        out.append(f"* **{r['scenario']}** ({r['front_points']} points): " + "; ".join(
            f"{p['oom_per_1k']:.1f} OOM/1k, {_f(p[r['main']], 3)} ({_flags({k: v for k, v in p.items() if k not in ('oom_per_1k', r['main'])})})"
            for p in r["front"]))
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    rows = run(args.seeds, args.jobs)
    (HERE / "results.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    md = markdown(rows, args.seeds)
    (HERE / "results.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()

"""The search benchmark: baselines and autotune's strategy (with ablations) vs the ground truth.

    .venv/bin/python experiments/search/run.py            # full: 10 seeds x 50 trials, every strategy
    .venv/bin/python experiments/search/run.py --quick    # smoke test: 2 seeds x 12 trials, 3 strategies

Needs data/ from ground_truth.py (committed). Every study goes through autotune's trial loop
(ask/tell, pruning, constraints, early stop, warm start) on the sim backend with 4 simulated
workers (harness.py). Writes results/ (runs.jsonl, results.md, hv_vs_trials.png, fronts.png).
ALL NUMBERS ARE SIMULATED: simulated GPU time and wall clock, not measurements.
GP needs PyTorch; without it the gp row is skipped and says so.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from experiments.search import common as C  # noqa: E402

RESULTS = C.HERE / "results"
ALL_ON = dict(prune_startup_failures=True, feasibility_constraints=True, early_stop=True, warm_start=True)
ALL_OFF = {k: False for k in ALL_ON}

# name -> (sampler, strategy switches, space variant)
STRATEGIES: dict[str, tuple[str, dict[str, bool], str]] = {
    "random": ("random", ALL_OFF, "space"),
    "grid (vLLM auto_tune lists)": ("grid", ALL_OFF, "grid"),
    "tpe (Optuna defaults)": ("tpe", ALL_OFF, "space"),
    "nsga2": ("nsga2", ALL_OFF, "space"),
    "gp": ("gp", ALL_OFF, "space"),
    "autotune (default)": ("autotune", ALL_ON, "space"),
    "autotune - pruning (a)": ("autotune", {**ALL_ON, "prune_startup_failures": False}, "space"),
    "autotune - constraints (b)": ("autotune", {**ALL_ON, "feasibility_constraints": False}, "space"),
    "autotune - early stop (c)": ("autotune", {**ALL_ON, "early_stop": False}, "space"),
    "autotune - warm start (d)": ("autotune", {**ALL_ON, "warm_start": False}, "space"),
    "tpe + all four parts": ("tpe", ALL_ON, "space"),
}
QUICK = ["random", "tpe (Optuna defaults)", "autotune (default)"]
CHECKPOINTS = (5, 10, 15, 20, 25, 30, 35, 40, 45, 50)


def grid_space(sp):
    """vLLM benchmarks/auto_tune's lists: NUM_SEQS_LIST "128 256", NUM_BATCHED_TOKENS_LIST
    "512 1024 2048 4096", its gpu_memory_utilization probe 0.98 -> 0.90 in 0.01 steps, and
    --enable-prefix-caching always on; everything else at vLLM's defaults. Cartesian product
    (72 configs), visited by Optuna's GridSampler in seeded random order."""
    from autotune.space.schema import ParamSpec

    params = {
        "gpu_memory_utilization": ParamSpec(type="categorical", choices=[round(0.98 - 0.01 * i, 2) for i in range(9)]),
        "max_num_seqs": ParamSpec(type="categorical", choices=[128, 256]),
        "max_num_batched_tokens": ParamSpec(type="categorical", choices=[512, 1024, 2048, 4096]),
    }
    engine = sp.engine.model_copy(update={"flags": {**sp.engine.flags, "enable_prefix_caching": True}})
    return sp.model_copy(update={"params": params, "engine": engine, "references": []})


def make_space(name: str):
    from autotune.space.schema import StrategySection

    sampler, switches, variant = STRATEGIES[name]
    sp = C.space()
    if variant == "grid":
        sp = grid_space(sp)
    study = sp.study.model_copy(update={"sampler": sampler, "strategy": StrategySection(**switches)})
    return sp.model_copy(update={"study": study})


_TRUTH = None


def _job(args: tuple[str, int, int, int]) -> dict[str, Any]:
    global _TRUTH
    from autotune.study.trials import records
    from experiments.search import evaluate as E
    from experiments.search import harness as H

    name, seed, trials, workers = args
    if _TRUTH is None:
        _TRUTH = E.TruthTable()
    t0 = time.time()
    sp = make_space(name)
    study, pool = H.run_study(sp, trials=trials, seed=seed, workers=workers)
    t_study = time.time() - t0
    cps = [c for c in CHECKPOINTS if c <= trials] + ([trials] if trials not in CHECKPOINTS else [])
    s = E.score(study, pool.log, _TRUTH, cps)
    # the found front at the end (true values), for the fronts plot
    recs = {r.number: r for r in records(study.get_trials(deepcopy=False))}
    front = []
    for d in pool.log:
        r = recs[d.trial]
        if r.values and r.metrics.get("requests_ok", 0) > 0 and not r.early_stopped:
            front.append((r.values[0], r.values[1], r.number))
    nd = [n for o, p, n in front if not any(o2 <= o and p2 <= p and (o2 < o or p2 < p) for o2, p2, _ in front)]
    fv = [_TRUTH.value(recs[n].flags) for n in nd]
    return {"strategy": name, "seed": seed, **asdict(s), "front_true": [(v["oom"], v["p99"]) for v in fv if v["started"]],
            "study_s": t_study, "score_s": time.time() - t0 - t_study}


def _gp_available() -> str:
    try:
        import torch  # noqa: F401
    except ImportError:
        return "PyTorch is not installed (pip install torch, or PYTHONPATH to a torch install)"
    return ""


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def fmt(x: float, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "not found"
    return f"{x:.{nd}f}"


def summarize(rows: list[dict[str, Any]], trials: int, names: list[str], notes: dict[str, str]) -> str:
    from experiments.search import evaluate as E

    truth = E.TruthTable()
    cps = [c for c in (10, 20, 30, 50) if c <= trials]
    out = []
    out.append("| strategy | " + " | ".join(f"HV@{c}" for c in cps) +
               " | trials to target 5% | trials to target 1% | wall h to target (4 workers) | GPU h to target "
               "| GPU h, all trials | wasted launches (search / warm start) | rejected (wrongly) | early stops |")
    out.append("|---" * (len(cps) + 9) + "|")
    for name in names:
        rs = [r for r in rows if r["strategy"] == name]
        if not rs:
            out.append(f"| {name} | " + " | ".join(["—"] * (len(cps) + 8)) + f" | {notes.get(name, '')} |")
            continue
        hv = [fmt(100 * median([r["hv"][str(c)] if str(c) in r["hv"] else r["hv"][c] for r in rs]), 0) + "%" for c in cps]

        def tt(label: str, rs=rs) -> str:
            v = [r["to_target"][label] for r in rs]
            found = sum(1 for x in v if not math.isinf(x))
            return f"{fmt(median(v), 1)} ({found}/{len(rs)})"

        wall = fmt(median([r["wall_to_target_h"]["5%"] for r in rs]), 2)
        gpu = fmt(median([r["gpu_to_target_h"]["5%"] for r in rs]), 2)
        tot = fmt(median([r["gpu_total_h"] for r in rs]), 1)
        ws = fmt(statistics.mean([r["wasted_search"] for r in rs]), 1)
        ww = fmt(statistics.mean([r["wasted_warm"] for r in rs]), 1)
        rej = f"{fmt(statistics.mean([r['rejected'] for r in rs]), 1)} ({sum(r['wrongly_rejected'] for r in rs)})"
        es = fmt(statistics.mean([r["early_stopped"] for r in rs]), 1)
        out.append(f"| {name} ({len(rs)}) | " + " | ".join(hv) + f" | {tt('5%')} | {tt('1%')} | {wall} | {gpu} | {tot} | {ws} / {ww} | {rej} | {es} |")
    head = (f"Target (ground truth, simulated): p99 {truth.target_p99:.2f} s at {truth.target['oom_per_1k']:.1f} OOM/1k; "
            f"medians over seeds (their number in parentheses); {trials} launched trials per study; 4 simulated workers.")
    return head + "\n\n" + "\n".join(out) + "\n"


def plots(rows: list[dict[str, Any]], names: list[str], trials: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for name in names:
        rs = [r for r in rows if r["strategy"] == name]
        if not rs:
            continue
        cps = sorted(int(c) for c in rs[0]["hv"])
        ys = [100 * median([r["hv"][str(c)] if str(c) in r["hv"] else r["hv"][c] for r in rs]) for c in cps]
        style = "-" if name.startswith("autotune (") else (":" if name.startswith("autotune -") else "--")
        lw = 2.5 if name.startswith("autotune (") else 1.2
        ax.plot(cps, ys, style, marker="o", ms=3, label=f"{name} ({len(rs)} seeds)", lw=lw)
        ns = list(range(1, trials + 1))
        frac = [100 * sum(1 for r in rs if r["to_target"]["1%"] <= n) / len(rs) for n in ns]
        ax2.step(ns, frac, style, where="post", label=name, lw=lw)
    ax.axhline(95, color="grey", lw=0.8)
    ax.set_xlabel("launched trials")
    ax.set_ylabel("hypervolume / true hypervolume (%), median over seeds")
    ax.set_title("SIMULATED: hypervolume of the found front (true values)", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_ylim(90, 100.5)
    ax2.set_xlabel("launched trials")
    ax2.set_ylabel("% of seeds that found a config within 1 % of the target")
    ax2.set_title("SIMULATED: stricter target (p99 <= 1.01 x best, <= 1 OOM/1k)", fontsize=10)
    ax2.set_ylim(0, 102)
    fig.savefig(RESULTS / "hv_vs_trials.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5))
    import csv

    with C.FRONT.open() as f:
        tf = [(float(r["oom_per_1k"]), float(r["p99_e2e_s"])) for r in csv.DictReader(f)]
    ax.plot([max(o, 0.05) for o, _ in tf], [p for _, p in tf], "k*-", ms=12, label="true front (ground truth)", zorder=5)
    for name in names:
        rs = [r for r in rows if r["strategy"] == name and r["seed"] == min(x["seed"] for x in rows)]
        if not rs or not rs[0]["front_true"]:
            continue
        pts = sorted(rs[0]["front_true"])
        ax.plot([max(o, 0.05) for o, _ in pts], [p for _, p in pts], "o-", ms=4, alpha=0.7, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("oom_per_1k (true value; 0 drawn at 0.05)")
    ax.set_ylabel("p99 e2e s (true value)")
    ax.set_title(f"SIMULATED: found fronts after {trials} trials (first seed), true values")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "fronts.png", dpi=110)
    plt.close(fig)


def load_rows(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.open()] if path.exists() else []
    for r in rows:
        r["hv"] = {int(k): v for k, v in r["hv"].items()}
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 seeds, 12 trials, 3 strategies")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--gp-seeds", type=int, default=None,
                    help="seeds for gp (default --seeds); its ask costs ~10 s of CPU at 50 trials here")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--workers", type=int, default=4, help="simulated GPU workers per study")
    ap.add_argument("--procs", type=int, default=2, help="CPU processes running studies")
    ap.add_argument("--strategies", nargs="*", default=None, help="names (default: all)")
    ap.add_argument("--out", type=Path, default=None, help="default experiments/search/results")
    ap.add_argument("--fresh", action="store_true", help="discard runs.jsonl (else finished studies are reused: use after code changes)")
    ap.add_argument("--report-only", action="store_true", help="table and plots from runs.jsonl")
    args = ap.parse_args()
    global RESULTS
    RESULTS = args.out or RESULTS
    if args.quick:
        args.seeds, args.trials = 2, 12
        RESULTS = args.out or RESULTS / "quick"
    names = args.strategies or (QUICK if args.quick else list(STRATEGIES))
    notes = {}
    if "gp" in names and (why := _gp_available()):
        notes["gp"] = f"skipped: {why}"
        names_run = [n for n in names if n != "gp"]
    else:
        names_run = names
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs = RESULTS / "runs.jsonl"
    if (args.fresh or args.quick) and runs.exists():  # rows from older code would be reused otherwise
        runs.unlink()
    done = {(r["strategy"], r["seed"], r.get("trials")) for r in load_rows(runs)}
    gp_seeds = args.seeds if args.gp_seeds is None else args.gp_seeds
    jobs = [(n, s, args.trials, args.workers) for n in names_run for s in range(gp_seeds if n == "gp" else args.seeds)
            if (n, s, args.trials) not in done]
    jobs.sort(key=lambda j: (j[0] == "gp", j[1]))  # the slow one last
    t0 = time.time()
    if jobs and not args.report_only:
        with mp.get_context("fork").Pool(args.procs) as pool, runs.open("a") as f:
            for i, r in enumerate(pool.imap_unordered(_job, jobs)):
                r["trials"] = args.trials
                f.write(json.dumps(r) + "\n")
                f.flush()
                print(f"[{i + 1}/{len(jobs)}] {r['strategy']} seed {r['seed']}: HV@{args.trials} "
                      f"{100 * r['hv'][max(r['hv'])]:.0f}% to-target 5% {r['to_target']['5%']} 1% {r['to_target']['1%']} "
                      f"({r['study_s']:.1f}s + {r['score_s']:.1f}s) [{time.time() - t0:.0f}s]", flush=True)
    rows = [r for r in load_rows(runs) if r.get("trials") == args.trials and r["strategy"] in names]
    cmd = ".venv/bin/python experiments/search/run.py" + (" --quick" if args.quick else "")
    md = f"<!-- generated by `{cmd}` -->\n" + summarize(rows, args.trials, names, notes)
    (RESULTS / "results.md").write_text(md)
    plots(rows, names, args.trials)
    print(md)


if __name__ == "__main__":
    main()

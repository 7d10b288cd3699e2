"""The search on real data (issue 19): strategies against the measured table, replayed.

    .venv/bin/python -m experiments.vllm_cpu.search [--seeds 0-9] [--trials 14] [--min-runs 3] \
        [--strategies autotune tpe tpe-confirm grid random sim-best] [--out results/search.jsonl]

Every figure is a CPU measurement of a toy model (8-layer Qwen2, random weights) on vLLM's CPU build,
replayed from experiments/vllm_cpu/results/runs.jsonl (replay.py): never a GPU figure, never simulated
(autotune's model of the deployment, the simulator's CPU host, only chooses which table configs autotune
and sim-best measure). The table is read once, at the start, into a snapshot (the measuring process keeps
appending to runs.jsonl), and every case runs on that snapshot through the reality-gap harness
(experiments.reality_gap.run.run_replay_case): one JSON line per case in ``--out`` (the contract's keys,
plus ``table_snapshot``: rows, configs, time), then a table per strategy:

* **within 2 % or tied**: the export's mean p99 within 2 % of the table's best mean (and every start of it
  served, within the OOM limit), or tied with it: a one-sided Welch t-test of the export's recorded runs
  against the best's does not find it worse at 5 % (``ReplayTruth.tied``; a mean inside the best's own 95 %
  interval is no test: at a CV of 30-40 % that interval of 3 runs reaches 60-90 % above the best)
  (none while the best has one run: then within 2 % alone counts);
* **median regret** of the export's mean against the best mean;
* **configs measured** (distinct table configs launched, median) and **configs to 2 %** (distinct configs
  measured until the export was first within 2 %, and ``stable``: from when it stayed within 2 % to the end;
  medians over the cases that got there); **distinct exports** over the cases (a deterministic strategy on a
  table of one run per config exports the same config whatever the seed).

Seed N is both the truth seed (which recorded run of a config answers each trial) and the study seed.
``grid`` also runs once per seed with the whole table as its budget (``grid-full``): how many configs the
grid needs to be within 2 %. The verdict line reads issue 19's goal: autotune within 2 % (or tied) in >= 9
of 10 seeds, with at most 1/3 of the configs the grid needs (configs to 2 %, stable, medians; the line also
says it counting every config autotune's study measured), never worse than tpe-confirm beyond the
noise (paired by seed: the same Welch test finds autotune's export worse than tpe-confirm's; with one run of
either, its mean above the other's).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autotune.errors import UserError
from experiments.vllm_cpu import replay

OUT = replay.HERE / "results" / "search.jsonl"
STRATEGIES = ("autotune", "tpe", "tpe-confirm", "grid", "random", "sim-best")
TRIALS = 14
MIN_RUNS = replay.MIN_RUNS  # the table is complete: every config has its starts
NOTE = ("CPU measurements of a toy model (8-layer Qwen2, random weights) on vLLM's CPU build, replayed from a "
        "snapshot of experiments/vllm_cpu/results/runs.jsonl; not GPU figures, not simulated")


def seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def snapshot(src: Path, dst_dir: Path, starts: Collection[int] | None = None) -> Path:
    """A copy of the runs file as it is now (the measuring process keeps appending to it); with ``starts``,
    only the runs of those server starts (a scenario's rounds, ``replay.SCENARIO_STARTS``)."""
    dst = dst_dir / "runs_snapshot.jsonl"
    if starts is None:
        shutil.copyfile(src, dst)
    else:
        kept = [r for r in replay.read_rows(src) if isinstance(r, dict) and r.get("start") in starts]
        dst.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return dst


def run(cases: list[tuple[str, str, int, int]], table: Path, min_runs: int, out: Path, info: dict[str, Any],
        log=print) -> list[dict[str, Any]]:
    from experiments.reality_gap.run import run_replay_case

    rows = []
    t0 = time.time()
    with out.open("w") as f:
        for i, (name, strategy, seed, trials) in enumerate(cases):
            try:
                d = run_replay_case(str(table), seed, strategy, trials=trials, seed=seed, min_runs=min_runs)
            except UserError as e:
                d = {"strategy": strategy, "truth_seed": seed, "error": str(e)}
            d = {**d, "case": name, "table_snapshot": info, "note": NOTE}
            f.write(json.dumps(d) + "\n")
            f.flush()
            rows.append(d)
            log(f"[{i + 1}/{len(cases)}] {name} seed {seed}: regret {_pct(d.get('regret'))}, "
                f"configs {d.get('configs_measured')}, within 2 % {d.get('within_2pct')} "
                f"({time.time() - t0:.0f} s)")
    return rows


def _pct(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f} %"


def good(d: dict[str, Any]) -> bool:
    return bool(d.get("within_2pct")) or bool(d.get("tied_95"))


def _med(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(d["case"] for d in rows):
        ds = [d for d in rows if d["case"] == name and "error" not in d]
        reached = [d["configs_to_2pct"] for d in ds if d.get("configs_to_2pct") is not None]
        stable = [d["configs_to_2pct_stable"] for d in ds if d.get("configs_to_2pct_stable") is not None]
        out[name] = {
            "cases": len(ds), "errors": sum(d["case"] == name and "error" in d for d in rows),
            "within_2pct": sum(bool(d["within_2pct"]) for d in ds), "within_or_tied": sum(good(d) for d in ds),
            "median_regret": _med([d["regret"] for d in ds if d.get("regret") is not None]),
            "worst_regret": max((d["regret"] for d in ds if d.get("regret") is not None), default=None),
            "configs_measured": _med([d["configs_measured"] for d in ds]),
            "configs_to_2pct": _med(reached), "reached_2pct": len(reached),
            "configs_to_2pct_stable": _med(stable), "stable_2pct": len(stable),
            "distinct_exports": len({json.dumps(d["exported_flags"], sort_keys=True) for d in ds}),
            "trials": _med([d["trials"] for d in ds]),
        }
    return out


def paired_worse(rows: list[dict[str, Any]], truth: replay.ReplayTruth) -> list[int]:
    """Seeds where autotune's export is worse than tpe-confirm's beyond the noise (``ReplayTruth.worse``: a
    one-sided Welch test of the two configs' recorded runs at 5 %; with one run of either, its mean above the
    other's)."""
    by = {(d["case"], d["truth_seed"]): d for d in rows if "error" not in d}
    worse = []
    for (case, seed), a in sorted(by.items()):
        t = by.get(("tpe-confirm", seed))
        if case != "autotune" or t is None or a.get("true_main") is None or t.get("true_main") is None:
            continue
        w = truth.worse(a["exported_flags"], t["exported_flags"])
        if w or (w is None and float(a["true_main"]) > float(t["true_main"])):
            worse.append(seed)
    return worse


def report(summary: dict[str, dict[str, Any]], rows: list[dict[str, Any]], truth: replay.ReplayTruth,
           info: dict[str, Any]) -> str:
    lines = [f"{NOTE}.", f"table: {info['rows']} runs of {info['table_configs']} configs (snapshot {info['utc']}, "
             f"--min-runs {info['min_runs']}: configs with {info['starts']} starts); best "
             f"{info['best_config']} {info['best_p99_s']:.3f} s (95 % interval {info['best_interval']})", "",
             "| strategy | cases | within 2 % or tied | within 2 % | median regret | worst regret | configs measured "
             "(median) | configs to 2 % (median, reached) | configs to 2 %, stable (median, reached) | distinct "
             "exports |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        c2 = "never" if s["configs_to_2pct"] is None else f"{s['configs_to_2pct']:g}"
        c2s = "never" if s["configs_to_2pct_stable"] is None else f"{s['configs_to_2pct_stable']:g}"
        lines.append(f"| {name} | {s['cases']} | {s['within_or_tied']}/{s['cases']} | {s['within_2pct']}/{s['cases']} "
                     f"| {_pct(s['median_regret'])} | {_pct(s['worst_regret'])} | {s['configs_measured']:g} | "
                     f"{c2} ({s['reached_2pct']}/{s['cases']}) | {c2s} ({s['stable_2pct']}/{s['cases']}) | "
                     f"{s['distinct_exports']} |")
    a, g = summary.get("autotune"), summary.get("grid-full")
    if a and g:
        worse = paired_worse(rows, truth) if "tpe-confirm" in summary else None
        ok_rate = a["within_or_tied"] >= math.ceil(0.9 * a["cases"])
        need = g["configs_to_2pct_stable"]
        used = a["configs_to_2pct_stable"]
        ok_cost = need is not None and used is not None and used <= need / 3
        whole = need is not None and a["configs_measured"] <= need / 3
        lines += ["", f"goal (issue 19): autotune within 2 % or tied in {a['within_or_tied']}/{a['cases']} "
                      f"(>= 9/10: {'met' if ok_rate else 'not met'}); configs to 2 % (stable, median) {used} vs 1/3 "
                      f"of the grid's {need} ({'met' if ok_cost else 'not met'}; counting every config its study "
                      f"measured, {a['configs_measured']:g}: {'met' if whole else 'not met'}); worse than "
                      f"tpe-confirm beyond the interval in seeds {worse} ({'met' if worse == [] else 'not met'})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-9", help="truth = study seeds, e.g. 0-9")
    ap.add_argument("--trials", type=int, default=TRIALS, help="trial budget per case")
    ap.add_argument("--min-runs", type=int, default=MIN_RUNS, help="starts a table config needs")
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES))
    ap.add_argument("--table", type=Path, default=None, help="a runs file (default: the --scenario's)")
    ap.add_argument("--scenario", default="vllm-cpu", choices=sorted(replay.SCENARIOS),
                    help="the table's rows: vllm-cpu (every start), vllm-cpu-quiet (the quiet machine's starts)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-grid-full", action="store_true", help="skip the grid with the whole table as budget")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        snap = snapshot(args.table or replay.SCENARIOS[args.scenario], Path(tmp),
                        replay.SCENARIO_STARTS.get(args.scenario))
        try:
            table = replay.Table.load(snap, min_runs=args.min_runs)
            truth = replay.ReplayTruth(str(snap), 0, table)
            best = truth.best
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        starts = sorted({len({r["start"] for r in c.runs}) for c in table.configs.values()})
        info = {"rows": len(replay.read_rows(snap)), "table_configs": len(table), "table_runs": table.runs,
                "min_runs": args.min_runs, "starts": "/".join(map(str, starts)),
                "utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M"), "best_config": best["config"],
                "best_p99_s": best["p99_e2e_s"], "best_interval": [None if math.isnan(x) else round(x, 3) for x in best["interval_95"]]}
        cases = [(s, s, n, args.trials) for n in seeds(args.seeds) for s in args.strategies]
        if "grid" in args.strategies and not args.no_grid_full:
            cases += [("grid-full", "grid", n, len(table)) for n in seeds(args.seeds)]
        print(f"{len(cases)} cases on {info['table_runs']} runs of {len(table)} configs ({NOTE})", file=sys.stderr)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        rows = run(cases, snap, args.min_runs, args.out, info, log=lambda m: print(m, file=sys.stderr))
        print(report(summarize(rows), rows, truth, info))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Each export's OOM rate over runs as a deployment sees them, beside the noise-free value. SIMULATED.

    .venv/bin/python -m experiments.reality_gap.oom_runs ROWS.jsonl [...] --out OUT.jsonl [--runs 30] [--shard 0/2]
    .venv/bin/python -m experiments.reality_gap.oom_runs ROWS.jsonl [...] --out OUT.jsonl --summary

The contract's ``true_oom_per_1k`` is the truth's noise-free value (experiments/scenarios/
ground_truth.py): the mean over server starts whose only difference is the engine-death draws
(one where no step comes near a crash, ten near the limit), along one trajectory. p99 is nearly linear in the run-to-run noise, so its noise-free
value is close to the mean of many runs; an engine death is not: it happens where a step's
transient memory crosses the headroom, and with no jitter every start schedules the same
batches at the same moments, so the noise-free trajectory's peaks are one draw of where they
fall. A config can die in none of the starts along it and in a third of 30 noisy runs
(development truth 9 of qwen72b-mixed). The runs are a sample too: the export of development
truth 0, study seed 1 died in 1, 6, 7 and 5 of four blocks of 40 noisy starts (seeds from 9001,
11001, 20001 and 30001), so a valuation comes with its interval.

This values each distinct export of the rows (per scenario, truth and config), and each truth's
best of its grid and of the space (``true_best_flags``, ``true_best_space_flags``), by ``--runs``
server starts of the truth with its noise on, as a study's trial runs them (start k on worker k
mod ``study.WORKERS``, with that node's speed offset, outlier starts and KV jitter; seeds no
study or brute force uses), and writes its mean OOM rate with a 95 % bootstrap interval and
its deaths. It changes no row: ``--summary`` counts the exports over the limit (1 per 1000)
by each reading, per scenario and strategy, and the truths' bests alike. Resumable: configs
already in ``--out`` (or ``--seen``, another shard's file) are skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from experiments.reality_gap.evaluation import bootstrap, mean
from experiments.reality_gap.noise import noisy_runs
from experiments.reality_gap.truth import WITHIN, Truth
from experiments.scenarios import ground_truth as gt_mod

RUN_SEED0 = 11_001  # server-start seeds no study, brute force or other probe uses
LIMIT = gt_mod.OOM_LIMIT


BESTS = ("true_best_flags", "true_best_space_flags")  # the truth's best of the grid and of the space


def key(row: dict[str, Any], flags: str = "exported_flags") -> tuple[str, int, str, str]:
    """What one valuation is of: the truth and a config of the row (its flags as JSON, sorted)."""
    return row["scenario"], row["truth_seed"], row["truth_family"], json.dumps(row[flags], sort_keys=True)


def read_valuations(paths: list[Path]) -> dict[tuple, dict[str, Any]]:
    return {tuple(d["key"]): d for p in paths if p.exists()
            for d in (json.loads(x) for x in p.read_text().splitlines() if x.strip())}


def valued_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """The rows that have a simulated truth and an export (a replayed CPU table's have neither)."""
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("exported_flags") and "truth_family" in r and not r.get("table")]


def runs_oom(truth: Truth, params: dict[str, Any], runs: int, seed0: int = RUN_SEED0) -> dict[str, Any]:
    """``runs`` noisy server starts of ``params`` under ``truth`` (seeds ``seed0``, ``seed0 + 1``,
    ...): the mean OOM rate of those that started, its 95 % bootstrap interval, and how many
    starts saw an engine death."""
    rates, deaths = [], 0
    for out in noisy_runs(truth, params, runs, seed0):
        if out["started"]:
            rates.append(float(out["oom_per_1k"]))
            deaths += out["crashes"] > 0
    low, high = bootstrap(rates, mean, seed=f"oom_runs/{truth.scenario}/{truth.seed}/{sorted(params.items())}")
    return {"runs": runs, "started": len(rates), "deaths": deaths, "oom_per_1k": mean(rates),
            "oom_per_1k_95": [low, high]}


def value_configs(rows: list[dict[str, Any]], out: Path, runs: int, shard: tuple[int, int],
                  seen: list[Path] = ()) -> int:
    """Append a valuation to ``out`` for every export of ``rows``, and every truth's best (of the
    grid and of the space), in this shard and not valued in ``out`` or ``seen`` yet. Truths are
    shared out by their position among all the rows' truths, before anything valued is left out,
    so a resumed shard keeps its own truths. Returns how many."""
    done = set(read_valuations([out, *seen]))
    configs: dict[tuple[str, int, str], set[str]] = defaultdict(set)
    for r in rows:
        for flags in ("exported_flags", *BESTS):
            if r.get(flags):
                k = key(r, flags)
                configs[k[:3]].add(k[3])
    n = 0
    for i, (tk, every) in enumerate(sorted(configs.items())):
        exports = {c for c in every if (*tk, c) not in done}
        if i % shard[1] != shard[0] or not exports:
            continue
        truth = Truth.load(tk[0], tk[1], jobs=1, family=tk[2], log=lambda *_: None)
        for flags_json in sorted(exports):
            params = truth.params(json.loads(flags_json))
            line = {"note": "SIMULATED", "key": [*tk, flags_json],
                    "noise_free_oom_per_1k": float(truth.value(params)["oom_per_1k"]), **runs_oom(truth, params, runs)}
            with out.open("a") as f:  # one line per valuation: an interrupted run keeps what it did
                f.write(json.dumps(line) + "\n")
            n += 1
        print(f"{tk[0]} truth {tk[1]}: {len(exports)} configs valued", file=sys.stderr, flush=True)
    return n


def summary(rows: list[dict[str, Any]], vals: dict[tuple, dict[str, Any]]) -> list[str]:
    """Per scenario and strategy: exports over the limit by the noise-free value, by the runs' mean,
    and with the runs' whole 95 % interval above it, and exports within 2 % of the refined best and
    the limit by each reading; then, per scenario, the truths' bests by the first three."""
    runs = sorted({v["runs"] for v in vals.values()})
    if len(runs) > 1:
        raise ValueError(f"the valuations mix {runs} runs per config; value them all with one --runs")
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * 7)
    for r in rows:
        v = vals.get(key(r))
        c = counts[r["scenario"], r["strategy"]]
        tally(c, v)
        c[5] += bool(r.get("within_2pct_space"))
        c[6] += v is not None and within_by_runs(r, v)
    bests: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * 5)
    for k in sorted({(key(r, f), f) for r in rows for f in BESTS if r.get(f)}):
        tally(bests[k[0][0], "the grid's best" if k[1] == BESTS[0] else "the refined best"], vals.get(k[0]))
    head = " | over the OOM limit, noise-free (the contract's) | over it, mean of the noisy runs | " \
           "... its 95 % interval above the limit |"
    within = " within 2 % of the refined best and the limit, noise-free | ... by the runs' mean |"
    lines = ["| scenario | strategy | exports (valued)" + head + within, "|---|---|---|---|---|---|---|---|"]
    lines += ["| {} | {} | {} ({}) | {} | {} | {} | {} | {} |".format(*k, *c) for k, c in sorted(counts.items())]
    lines += ["", "| scenario | the truths' | truths (valued)" + head, "|---|---|---|---|---|---|"]
    lines += ["| {} | {} | {} ({}) | {} | {} | {} |".format(*k, *c) for k, c in sorted(bests.items())]
    return lines


def within_by_runs(row: dict[str, Any], v: dict[str, Any]) -> bool:
    """Within 2 % of the refined best, with the export's OOM limit read from the noisy runs' mean.
    Half a reading: the refined best is still the noise-free one's (over the limit by the runs on
    some truths), since choosing it again by the runs would take the runs of every config near it."""
    regret = row.get("regret_space")
    return regret is not None and regret <= WITHIN and v["started"] > 0 and v["oom_per_1k"] <= LIMIT


def tally(c: list[int], v: dict[str, Any] | None) -> None:
    """Count one config into ``c``: [configs, valued, over noise-free, over by the runs' mean,
    over by the whole interval]."""
    c[0] += 1
    if v is not None:
        c[1] += 1
        c[2] += v["noise_free_oom_per_1k"] > LIMIT
        c[3] += v["oom_per_1k"] > LIMIT
        c[4] += v["oom_per_1k_95"][0] > LIMIT


def shard_arg(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: give K/N, e.g. 0/2") from None
    if not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: K must be 0 to N-1")
    return k, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="+", type=Path, help="bench rows (JSON lines)")
    ap.add_argument("--out", type=Path, required=True, help="valuations (JSON lines; appended, resumable)")
    ap.add_argument("--runs", type=int, default=30, help="noisy server starts per export (default 30)")
    ap.add_argument("--shard", type=shard_arg, default=(0, 1), help="K/N: value the K-th of N shares of the truths")
    ap.add_argument("--seen", type=Path, nargs="*", default=[],
                    help="other valuation files (another shard's): configs valued there are not valued again, "
                         "and --summary reads them too")
    ap.add_argument("--summary", action="store_true", help="print the counts instead of valuing")
    a = ap.parse_args(argv)
    missing = [p for p in a.rows if not p.is_file()]
    if missing:
        print(f"error: no rows file {missing[0]}; give bench rows (JSON lines)", file=sys.stderr)
        return 2
    rows = valued_rows(a.rows)
    if a.summary:
        vals = read_valuations([a.out, *a.seen])
        try:
            lines = summary(rows, vals)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        runs = next(iter(vals.values()))["runs"] if vals else a.runs
        print(f"SIMULATED; OOM rates per 1000 requests, limit {LIMIT:g}; {runs} noisy starts per config")
        print("\n".join(lines))
        return 0
    print(f"{value_configs(rows, a.out, a.runs, a.shard, a.seen)} configs valued into {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Scoring a finished study against the ground truth. All values are SIMULATED.

* true value of a config = mean of the simulator over common.TRUTH_SEEDS (the ground-truth table
  for grid configs; computed and cached for off-grid ones).
* found front after n trials = the Pareto set, by the study's own measurements, of the first n
  launched trials in dispatch order (feasible, not early-stopped: what `autotune export` could
  pick from); its hypervolume is computed on the members' TRUE values.
* target found = the first launched trial whose TRUE value has oom_per_1k <= 1 and p99 within 5 %
  of the target's (and, stricter, 1 %). Only trials whose measurement is within a loose gate
  (p99 <= 1.15x target, oom <= 20/1k) are looked up; ground_truth.py reports the seed-to-seed
  spread that makes the gate safe.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.study.trials import Role, State, TrialRecord, records
from experiments.search import common as C

GATE_P99 = 1.15
GATE_OOM = 20.0


def hv_transform(oom: float, p99: float, target_p99: float) -> tuple[float, float]:
    """(oom, p99) -> normalised minimisation coordinates; the reference point is (1, 1)."""
    x = math.log10(1.0 + max(0.0, min(oom, 1000.0))) / math.log10(1001.0)
    y = p99 / (C.P99_REF_FACTOR * target_p99) if not math.isnan(p99) else math.inf
    return x, y


def hypervolume_2d(points: Sequence[tuple[float, float]], ref: tuple[float, float] = (1.0, 1.0)) -> float:
    """Area dominated by ``points`` (minimisation) and bounded by ``ref``; exact, O(n log n)."""
    pts = sorted((x, y) for x, y in points if x < ref[0] and y < ref[1])
    # Staircase: sweep x ascending; between consecutive x the dominated height is ref_y - min y so far.
    area, run_y = 0.0, ref[1]
    xs = [*pts, (ref[0], ref[1])]
    for (x, y), (x2, _) in zip(xs, xs[1:], strict=False):
        run_y = min(run_y, y)
        area += (x2 - x) * (ref[1] - run_y)
    return area


class TruthTable:
    def __init__(self) -> None:
        self.rows: dict[tuple, dict[str, Any]] = {}
        with gzip.open(C.TABLE, "rt") as f:
            for r in csv.DictReader(f):
                params = {
                    "gpu_memory_utilization": float(r["gpu_memory_utilization"]),
                    "max_num_seqs": int(r["max_num_seqs"]),
                    "block_size": int(r["block_size"]),
                    "enforce_eager": r["enforce_eager"] == "True",
                    "enable_prefix_caching": r["enable_prefix_caching"] == "True",
                    "max_num_batched_tokens": int(r["max_num_batched_tokens"]),
                    "kv_cache_dtype": r["kv_cache_dtype"],
                }
                self.rows[C.key_of(params)] = {
                    "oom": float(r["oom_per_1k"]), "p99": float(r["p99_e2e_s"]) if r["p99_e2e_s"] else math.nan,
                    "started": r["started"] == "True", "n_seeds": int(r["n_seeds"]),
                }
        t = json.loads(C.TARGET.read_text())
        self.target = t["target"]
        self.target_p99 = float(self.target["p99_e2e_s"])
        front = []
        with C.FRONT.open() as f:
            for r in csv.DictReader(f):
                front.append(hv_transform(float(r["oom_per_1k"]), float(r["p99_e2e_s"]), self.target_p99))
        self.true_hv = hypervolume_2d(front)
        self.space = C.space()
        self._cache: dict[tuple, dict[str, Any]] = {}
        self.offgrid_evals = 0

    def value(self, flags: dict[str, Any]) -> dict[str, Any]:
        params = {n: flags.get(n) for n in C.PARAMS}
        if any(v is None for v in params.values()):
            params = {**C.resolved_flags(self.space, {}), **{k: v for k, v in params.items() if v is not None}}
            params = {n: params[n] for n in C.PARAMS}
        k = C.key_of(params)
        row = self.rows.get(k)
        if row is not None and (row["n_seeds"] >= len(C.TRUTH_SEEDS) or not row["started"]):
            return row
        if k not in self._cache:
            t = C.evaluate(self.space, params)
            self.offgrid_evals += 1
            self._cache[k] = {"oom": t.oom_per_1k, "p99": t.p99_e2e_s, "started": t.started, "n_seeds": t.n_seeds}
        return self._cache[k]

    def hits(self, v: dict[str, Any], tol: float) -> bool:
        return v["started"] and v["oom"] <= 1.0 and v["p99"] <= (1.0 + tol) * self.target_p99


@dataclass
class Score:
    hv: dict[int, float]  # n trials -> found-front HV / true HV
    to_target: dict[str, float]  # "5%"/"1%" -> launched trials until found (inf if not)
    wall_to_target_h: dict[str, float]
    gpu_to_target_h: dict[str, float]
    gpu_total_h: float
    wall_total_h: float
    launched: int
    wasted_search: int  # launched search samples that could not start
    wasted_warm: int  # launched warm-start configs (baseline/references) that could not start
    rejected: int
    wrongly_rejected: int
    early_stopped: int
    best_true_p99: float  # best true p99 at <= 1 OOM/1k among the found front at the end


def score(study: optuna.Study, dispatch: Sequence[Any], truth: TruthTable, checkpoints: Sequence[int]) -> Score:
    from autotune.sim import simulate_trial

    by_num = {r.number: r for r in records(study.get_trials(deepcopy=False))}
    launched = [by_num[d.trial] for d in dispatch]
    sp = truth.space

    def measured(r: TrialRecord) -> list[float] | None:
        return r.values if r.launched and r.values else None

    def usable(r: TrialRecord) -> bool:
        return measured(r) is not None and r.metrics.get("requests_ok", 0) > 0 and not r.early_stopped

    def gpu_h(rs: Sequence[TrialRecord]) -> float:
        return sum(r.metrics.get("gpu_time_s", 0.0) for r in rs) / 3600

    hv: dict[int, float] = {}
    for n in checkpoints:
        pts = [(measured(r)[0], measured(r)[1], r) for r in launched[:n] if usable(r)]
        front = [r for o, p, r in pts if not any((o2 <= o and p2 <= p) and (o2 < o or p2 < p) for o2, p2, _ in pts)]
        tv = [truth.value(r.flags) for r in front]
        hv[n] = hypervolume_2d([hv_transform(v["oom"], v["p99"], truth.target_p99) for v in tv if v["started"]]) / truth.true_hv
    to_target: dict[str, float] = {}
    wall: dict[str, float] = {}
    gpu: dict[str, float] = {}
    for label, tol in (("5%", 0.05), ("1%", 0.01)):
        to_target[label] = math.inf
        wall[label] = math.inf
        gpu[label] = math.inf
        for i, r in enumerate(launched):
            if not usable(r):
                continue
            o, p = measured(r)
            if o > GATE_OOM or p > GATE_P99 * truth.target_p99:
                continue
            if truth.hits(truth.value(r.flags), tol):
                to_target[label] = i + 1
                wall[label] = dispatch[i].end_s / 3600
                gpu[label] = gpu_h(launched[: i + 1])
                break
    rejected = [r for r in by_num.values() if r.state == State.REJECTED]
    wrong = 0
    for r in rejected:
        if "predicted startup failure" not in r.failure_reason:
            continue  # a declarative-constraint rejection, not the memory model
        res = simulate_trial(sp.engine.model, sp.engine.gpu, C.resolved_flags(sp, r.flags), sp.workload, seed=0)
        wrong += res.status.value == "ok"
    dead = [r for r in launched if r.metrics.get("duration_s", 0.0) == 0]
    warm = sum(1 for r in dead if r.role in (Role.BASELINE, Role.REFERENCE))
    final = [r for r in launched if usable(r)]
    best = math.inf
    pts = [(measured(r)[0], measured(r)[1], r) for r in final]
    front = [r for o, p, r in pts if not any((o2 <= o and p2 <= p) and (o2 < o or p2 < p) for o2, p2, _ in pts)]
    for r in front:
        v = truth.value(r.flags)
        if v["started"] and v["oom"] <= 1:
            best = min(best, v["p99"])
    return Score(
        hv=hv, to_target=to_target, wall_to_target_h=wall, gpu_to_target_h=gpu,
        gpu_total_h=gpu_h(launched),
        wall_total_h=max((d.end_s for d in dispatch), default=0.0) / 3600,
        launched=len(launched), wasted_search=len(dead) - warm, wasted_warm=warm, rejected=len(rejected), wrongly_rejected=wrong,
        early_stopped=sum(1 for r in launched if r.early_stopped), best_true_p99=best,
    )

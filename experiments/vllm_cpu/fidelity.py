"""How well autotune's simulator, calibrated on a few measured configs, predicts the rest of the table.

    .venv/bin/python -m experiments.vllm_cpu.fidelity --json [--table PATH] [--calibration-configs 5] [--seed 0]

The measured side is experiments/vllm_cpu's table: CPU measurements of a toy model on vLLM's CPU build
(never GPU figures; ``replay.Table``). At most 5 of its configs (vLLM's defaults first, then a seeded
draw) are the calibration set: each recorded run becomes one trial record (``replay.replayed_result``:
the aggregates ``TrialResult.metrics()`` computed on the real engine) and ``autotune calibrate``'s fit
(``autotune.calibrate.fit_profile``: memory, startup and speed stages) is run on them. Every other config
is held out (at least 2: a small table gets fewer calibration configs): the fitted simulator predicts it (``autotune.calibrate.model.simulate``, noise off) and the
prediction is compared with the config's mean over its recorded runs. Errors are relative absolute errors
``|predicted / measured - 1|``; ``spearman_p99`` is the rank correlation of predicted and measured p99 over
the held-out configs; ``noise_cv_p99`` the median over configs of the run-to-run CV of p99 (what no model
can predict).

When a part of that pipeline cannot run, the JSON says which (``missing``) and every figure that needed it
is null: no number is made up. The simulator models the deployment with its CPU host (``gpu: cpu``:
autotune/deploy/hardware.py's ``HOSTS``, the CPU ranges and nominal values of autotune/deploy/profile.py's
``CPU_HOST``; docs/simulator.md, "CPU host"); ``fit_profile`` starts from that nominal profile.

**Speed against structure.** This shared machine's speed moves by up to 2x between server starts (other
tenants of the host, other agents' processes): a slow start stretches every step, so it stretches p99, the
benchmark's duration and the server's own startup alike, while the engine's work (preemptions, prefix-cache
hits, output lengths) is the same in every start. The same run's other timings therefore measure that speed,
and a ratio of two of them cancels it. ``views`` gives the figures for two such ratios, each predicted as the
same ratio of the model's values: ``p99_over_duration`` (where in the benchmark's span the slowest requests
finish, which the scheduler, batching, preemption and prefix reuse decide) and ``p99_over_startup`` (p99 in
units of the run's own server start, a speed probe every trial records). Each view has ``median_abs_err``,
``p90_abs_err``, ``spearman``, ``noise_cv`` (the median over configs of the run-to-run CV) and
``noise_floor``. ``p99_noise_floor`` (and each view's ``noise_floor``) is the median error a model that
knew every held-out config's true mean would still show against the recorded means: 0.6745 x the config's
CV / sqrt(its runs), the median of a normal error of that spread; a goal below it is out of reach on this
table whatever the model. ``duration_median_abs_err``: the predicted benchmark duration against the
config's mean (the speed part); ``preemptions_median_abs_diff``: the median over held-out configs of
|predicted - measured mean| preemptions (vLLM's count is the same in every start of a config).
``run_spread`` (the table alone): the pooled log spread over a config's starts of p99, the benchmark's
duration, the server's start and the two ratios, and the correlation of p99's log residual with the other
two's. ``speed_free_bias_by_kv_dtype``: per KV cache dtype, the mean over held-out configs of
log(measured / predicted) of TTFT, p99 and TPOT, each over its run's (or prediction's) server start, with
its standard error: where the model is wrong beyond the machine's speed.

``--min-runs 1`` admits configs measured once (a table whose later rounds are still running): then
``noise_cv_p99`` is null and each held-out "mean" is one run. ``--calibration-table PATH`` calibrates on
that table's configs (the pilot's 5, measured 3 or 4 times each) and predicts every other config of ``--table``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from autotune.errors import UserError
from autotune.space import SearchSpace
from autotune.study.analysis import pooled_log_sd
from autotune.study.trials import Role, State, TrialRecord
from experiments.vllm_cpu import model as model_mod
from experiments.vllm_cpu import replay

REPO = replay.HERE.parents[1]
MAX_CALIBRATION = 5
DEFAULT_KV_BYTES = 32768000  # the KV budget measure.py runs "vLLM's defaults" with (4000 tokens of bf16)
MIN_HELD_OUT = 2  # a small table (the pilot) keeps at least this many configs to predict
NOTE = ("CPU measurements of a toy model on vLLM's CPU build (experiments/vllm_cpu) against autotune's simulator "
        "calibrated on a few of them; not GPU figures")
PREDICTED = ("p99_e2e_s", "mean_ttft_s", "mean_tpot_s", "duration_s")
HALF_NORMAL_MEDIAN = 0.6745  # median of |N(0, 1)|: the median error of an unbiased estimate of spread 1


def ratio(row: Mapping[str, Any], num: str, den: str) -> float:
    """``num / den`` of one run (or one prediction), NaN when either is missing or not positive."""
    n, d = row.get(num), row.get(den)
    if n is None or d is None or not (math.isfinite(n) and math.isfinite(d)) or n <= 0 or d <= 0:
        return math.nan
    return float(n) / float(d)


def p99(row: Mapping[str, Any]) -> float:
    v = row.get("p99_e2e_s")
    return float(v) if v is not None and math.isfinite(v) and v > 0 else math.nan


# name -> the value of one run (or prediction) the view compares: p99 itself, then speed-free ratios.
VIEWS: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "p99": p99,
    "p99_over_duration": lambda r: ratio(r, "p99_e2e_s", "duration_s"),
    "p99_over_startup": lambda r: ratio(r, "p99_e2e_s", "startup_s"),
}


def values(c: replay.Config, view: str) -> list[float]:
    return [v for v in (VIEWS[view](r) for r in c.served) if math.isfinite(v)]


def _cv(vals: list[float]) -> float:
    return statistics.stdev(vals) / statistics.fmean(vals) if len(vals) >= 2 else math.nan


def noise_floor(configs: list[replay.Config], view: str = "p99") -> float | None:
    """The median |mean of n runs / true mean - 1| over ``configs``, from each one's CV and runs."""
    out: list[float] = []
    for c in configs:
        vals = values(c, view)
        if math.isfinite(cv := _cv(vals)):
            out.append(HALF_NORMAL_MEDIAN * cv / math.sqrt(len(vals)))
    return statistics.median(out) if out else None


SPREAD = ("p99_e2e_s", "duration_s", "startup_s")


def _residuals(configs: list[replay.Config], key: Callable[[Mapping[str, Any]], float]) -> dict[tuple[str, int], float]:
    """(config, start) -> log value minus its config's mean log, for configs with 2 or more served runs."""
    out: dict[tuple[str, int], float] = {}
    for c in configs:
        logs = {r["start"]: math.log(v) for r in c.served if math.isfinite(v := key(r)) and v > 0}
        if len(logs) >= 2:
            m = statistics.fmean(logs.values())
            out.update({(c.name, k): v - m for k, v in logs.items()})
    return out


def run_spread(configs: list[replay.Config]) -> dict[str, Any]:
    """How the machine's speed moves a run's timings together (module docstring)."""
    keys: dict[str, Callable[[Mapping[str, Any]], float]] = {
        **{k: (lambda r, k=k: float(r.get(k) or math.nan)) for k in SPREAD},
        "p99_over_duration": VIEWS["p99_over_duration"], "p99_over_startup": VIEWS["p99_over_startup"]}
    out: dict[str, Any] = {}
    for name, key in keys.items():
        sd, df = pooled_log_sd([[v for r in c.served if math.isfinite(v := key(r))] for c in configs])
        out[name] = {"log_sd": None if df == 0 else sd, "df": df}
    base = _residuals(configs, keys["p99_e2e_s"])
    corr: dict[str, float | None] = {}
    for name in SPREAD[1:]:
        other = _residuals(configs, keys[name])
        both = sorted(set(base) & set(other))
        corr[name] = (float(np.corrcoef([base[k] for k in both], [other[k] for k in both])[0, 1])
                      if len(both) >= 3 else None)
    out["p99_residual_correlation"] = corr
    return out


def speed_free_bias(held: list[replay.Config], preds: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per KV cache dtype: mean log(measured / predicted) of TTFT, p99 and TPOT over the server start."""
    groups: dict[str, dict[str, list[float]]] = {}
    for c in held:
        p = preds[c.name]
        for metric in ("mean_ttft_s", "p99_e2e_s", "mean_tpot_s"):
            measured = [v for r in c.served if math.isfinite(v := ratio(r, metric, "startup_s"))]
            predicted = ratio(p, metric, "startup_s")
            if measured and math.isfinite(predicted):
                g = groups.setdefault(str(c.params.get("kv_cache_dtype")), {})
                g.setdefault(metric, []).append(math.log(statistics.fmean(measured) / predicted))
    return {dtype: {m: {"configs": len(v), "mean_log_ratio": statistics.fmean(v),
                        "se": statistics.stdev(v) / math.sqrt(len(v)) if len(v) >= 2 else None}
                    for m, v in g.items()} for dtype, g in sorted(groups.items())}


def view_figures(view: str, held: list[replay.Config], preds: Mapping[str, Mapping[str, Any]],
                 every: list[replay.Config]) -> dict[str, float | None]:
    """How well the predictions match the held-out configs' means in one view."""
    errs, pairs = [], []
    for c in held:
        vals = values(c, view)
        if not vals:
            continue
        m, p = statistics.fmean(vals), VIEWS[view](preds[c.name])
        errs.append(_rel(p, m))
        pairs.append((p if math.isfinite(p) else math.inf, m))
    return {"median_abs_err": _pct(errs, 50), "p90_abs_err": _pct(errs, 90), "spearman": _spearman(pairs),
            "noise_cv": _med([_cv(values(c, view)) for c in every]), "noise_floor": noise_floor(held, view)}


def _spearman(pairs: list[tuple[float, float]]) -> float | None:
    if len(pairs) < 3:
        return None
    from scipy.stats import spearmanr

    return float(spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic)


def choose(table: replay.Table, n: int, seed: int,
           min_held_out: int = MIN_HELD_OUT) -> tuple[list[replay.Config], list[replay.Config]]:
    """(calibration configs, held-out configs): vLLM's defaults first when the table has them, then a seeded
    draw of the configs whose every start served; the rest held out."""
    n = max(1, min(n, MAX_CALIBRATION, len(table) - min_held_out))
    configs = sorted(table.configs.values(), key=lambda c: c.name)
    defaults = replay.resolve_params(table.space, {"kv_cache_memory_bytes": None})
    first = [c for c in configs if all(c.params[k] == v for k, v in defaults.items() if k != "kv_cache_memory_bytes")]
    first.sort(key=lambda c: c.params.get("kv_cache_memory_bytes") != DEFAULT_KV_BYTES)  # at the deployment's budget
    rest = [c for c in configs if c not in first[:1] and c.started]
    random.Random(f"vllm-cpu-fidelity/{seed}").shuffle(rest)
    cal = (first[:1] + rest)[:n]
    return cal, [c for c in configs if c not in cal]


def records(configs: list[replay.Config], space: SearchSpace) -> list[TrialRecord]:
    """Each recorded run of ``configs`` as a measured trial, as autotune's loop would have recorded it."""
    out: list[TrialRecord] = []
    for c in configs:
        flags = {**space.fixed_flags(), **c.params}
        for row in c.runs:
            res = replay.replayed_result(row, c.name)
            out.append(TrialRecord(len(out), State.COMPLETE, Role.SEARCH, params=dict(c.params), flags=flags,
                                   failure_class=str(res.failure_class), metrics=res.metrics(),
                                   started=res.status == "ok"))
    return out


def model_space(space: SearchSpace, tmp: Path) -> SearchSpace:
    """The space with its model directory made absolute; without the built model (a fresh clone), a directory
    holding the model's config.json alone (model.py's CONFIG: what the simulator reads)."""
    path = Path(space.engine.model)
    path = path if path.is_absolute() else REPO / path
    if not (path / "config.json").is_file():
        path = tmp / "model"
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps({**model_mod.CONFIG, "vocab_size": model_mod.VOCAB_SIZE}))
    return space.model_copy(update={"engine": space.engine.model_copy(update={"model": str(path)})})


def _where(table: replay.Table) -> str:
    return str(table.path.relative_to(REPO)) if table.path.is_relative_to(REPO) else str(table.path)


def _rel(p: float, m: float) -> float:
    return abs(p / m - 1.0) if math.isfinite(p) and p > 0 else 1.0  # no prediction: 100 % off (calibrate's rule)


def _pct(vals: list[float], q: float) -> float | None:
    if not vals:
        return None
    import numpy as np

    return float(np.percentile(vals, q))


def fidelity(table: replay.Table, n: int = MAX_CALIBRATION, seed: int = 0,
             calibration_table: replay.Table | None = None) -> dict[str, Any]:
    """``calibration_table``: calibrate on (at most ``n`` of) its configs instead, and hold out every config
    of ``table`` that is not among them."""
    if calibration_table is None:
        cal, held = choose(table, n, seed)
    else:
        cal, _ = choose(calibration_table, n, seed, min_held_out=0)
        fitted = {replay.params_key(c.params) for c in cal}
        held = sorted((c for c in table.configs.values() if replay.params_key(c.params) not in fitted),
                      key=lambda c: c.name)
    cvs = [c.cv() for c in table.configs.values() if not math.isnan(c.cv())]
    out: dict[str, Any] = {
        "note": NOTE, "table": _where(table),
        "calibration_table": _where(calibration_table) if calibration_table is not None else None,
        "table_landscape": table.landscape, "table_configs": len(table), "table_runs": table.runs,
        "calibration_configs": [c.name for c in cal], "heldout_configs": [c.name for c in held],
        "p99_median_abs_err": None, "p99_p90_abs_err": None, "ttft_median_abs_err": None,
        "tpot_median_abs_err": None, "spearman_p99": None,
        "noise_cv_p99": statistics.median(cvs) if cvs else None,
        "p99_noise_floor": noise_floor(held), "views": None,
        "duration_median_abs_err": None, "preemptions_median_abs_diff": None,
        "run_spread": run_spread(list(table.configs.values())), "speed_free_bias_by_kv_dtype": None, "missing": None,
    }
    if not held:
        out["missing"] = "no held-out config: the table has no config beyond the calibration set"
        return out
    with tempfile.TemporaryDirectory() as tmp:
        space = model_space(table.space, Path(tmp))
        try:
            from autotune.calibrate.calibration import fit_profile
            from autotune.calibrate.model import simulate

            profile, stages = fit_profile(records(cal, space), space)
            preds = {c.name: simulate(space, {**space.fixed_flags(), **c.params}, profile) for c in held}
        except UserError as e:
            out["missing"] = (f"the simulator cannot model this deployment: {e}. autotune/deploy/hardware.py has "
                              "GPUs only; a CPU host entry (cores, memory bandwidth, per-token and per-step costs) "
                              "and its memory model are what is missing, so no calibration or prediction was made")
            return out
    out["fit_stages"] = [{"name": s.name, "determined": list(s.determined)} for s in stages]
    errs: dict[str, list[float]] = {k: [] for k in PREDICTED}
    preempt_diffs = []
    pairs = []
    for c in held:
        p = preds[c.name]
        for k in PREDICTED:
            m = c.mean(k)
            if math.isfinite(m) and m > 0:
                errs[k].append(_rel(p.get(k, math.nan), m))
        if math.isfinite(c.mean("p99_e2e_s")):
            pairs.append((p.get("p99_e2e_s", math.inf), c.mean("p99_e2e_s")))
        if math.isfinite(c.mean("preemptions")) and math.isfinite(p.get("preemptions", math.nan)):
            preempt_diffs.append(abs(p["preemptions"] - c.mean("preemptions")))
    out["p99_median_abs_err"] = _pct(errs["p99_e2e_s"], 50)
    out["p99_p90_abs_err"] = _pct(errs["p99_e2e_s"], 90)
    out["ttft_median_abs_err"] = _pct(errs["mean_ttft_s"], 50)
    out["tpot_median_abs_err"] = _pct(errs["mean_tpot_s"], 50)
    out["spearman_p99"] = _spearman(pairs)
    out["views"] = {v: view_figures(v, held, preds, list(table.configs.values())) for v in VIEWS if v != "p99"}
    out["duration_median_abs_err"] = _pct(errs["duration_s"], 50)
    out["preemptions_median_abs_diff"] = _pct(preempt_diffs, 50)
    out["speed_free_bias_by_kv_dtype"] = speed_free_bias(held, preds)
    return out


def _med(vals: list[float]) -> float | None:
    vals = [v for v in vals if math.isfinite(v)]
    return statistics.median(vals) if vals else None


def argument_problem(args: argparse.Namespace) -> str | None:
    """Why the arguments cannot be run, in one line (None: they can). The issue's "at most 5" is refused
    beyond, not clamped, so a figure is never printed for a calibration set other than the one asked for."""
    if not 1 <= args.calibration_configs <= MAX_CALIBRATION:
        return f"--calibration-configs {args.calibration_configs}: from 1 to {MAX_CALIBRATION} (the issue's limit)"
    if args.min_runs < 1:
        return f"--min-runs {args.min_runs}: must be at least 1 (1 admits configs measured once)"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", type=Path, help="a runs file (default: the --scenario's)")
    ap.add_argument("--scenario", default="vllm-cpu", choices=sorted(replay.SCENARIOS),
                    help="vllm-cpu: results/runs.jsonl (else the pilot); vllm-cpu-quiet: its quiet machine's starts")
    ap.add_argument("--calibration-configs", type=int, default=MAX_CALIBRATION, help="at most 5")
    ap.add_argument("--seed", type=int, default=0, help="seeds the draw of calibration configs")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--min-runs", type=int, default=replay.MIN_RUNS,
                    help=f"starts a config of --table needs (default {replay.MIN_RUNS})")
    ap.add_argument("--calibration-table", type=Path,
                    help="calibrate on this runs file's configs (e.g. the pilot) and predict every other config of "
                         "--table")
    args = ap.parse_args(argv)
    problem = argument_problem(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        table = replay.Table.load(args.table, min_runs=args.min_runs) if args.table else replay.table_for(args.scenario, args.min_runs)
        cal_table = replay.Table.load(args.calibration_table) if args.calibration_table else None
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = fidelity(table, args.calibration_configs, args.seed, cal_table)
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

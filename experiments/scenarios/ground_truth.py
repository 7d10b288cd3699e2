"""Brute-force ground truth of one scenario: every config of its grid through the simulator.

    .venv/bin/python -m experiments.scenarios.ground_truth --scenario qwen72b-mixed [--jobs 2]
    .venv/bin/python -m experiments.scenarios.ground_truth --scenario NAME --truth-seed 3   # a perturbed truth
    .venv/bin/python -m experiments.scenarios.ground_truth --scenario NAME --profile calibrated.yaml --out DIR

A scenario is a space in search_spaces/ (NAME.yaml) with a grid in grids.py. The truth is
the simulator with a SimProfile (the space's own by default; ``--profile FILE``, or
``--truth-seed N`` for ``SimProfile.perturbed(N)``, a "truth" of the reality-gap benchmark)
with its run-to-run noise switched OFF (``SimProfile.without_noise()``: ``noise = False``;
``--noise`` keeps it, for the search benchmark's older definition). Without noise a trial's
only randomness is the runtime-OOM hazard's draws, so:

1. constraints: grid points the space's constraints reject are rows, not runs;
2. startup: ``autotune.deploy.predict_startup`` (same accounting, same profile) marks the
   configs that cannot start; they are not simulated, except an evenly spaced sample of
   them (``--verify``) that the simulator must also fail to start, and every config
   predicted to start is simulated anyway: both kinds of disagreement are counted;
3. stage 1: every startable config, one trial seed;
4. stage 2: every config whose value a seed can move, i.e. with a runtime-OOM hazard (it
   crashed, or a step's crash probability reached ``P_MIN``), gets ``--seeds`` runs in all;
5. stage 3: of those, the ones with a real hazard (a crash, or a step at ``P_BORDER``) whose
   OOM rate is still <= ``BORDER_OOM`` per 1000 get ``--borderline-seeds`` runs: there,
   whether a config meets the limit of 1 per 1000 turns on a crash in one run of several.
   A row's value is the mean over its runs (``n_seeds``). With ``--noise`` (the search
   benchmark's older definition) every run varies, and stage 2 instead gives ``--seeds``
   runs to the configs that can matter (main objective within ``--near`` of the best at
   <= 1 OOM/1k, any 0 < OOM/1k < 1000, or on the stage-1 front); there is no stage 3.

With noise off most repeat runs of stages 2 and 3 are not simulated: a seed that survives
every crash draw a crash-free run of the config logged *is* that run
(``autotune.sim.hazard.survives``), so it is replayed; the rows are the same either way
(``experiments.reality_gap.brute_force_time`` checks a cached truth value for value).

The main objective is the space's objective that is not oom_per_1k (p99_e2e_s, or
goodput_rps_per_gpu maximised, in the named scenarios; any metric of autotune's registry in
a space given by path: its rows record it beside ``RECORDED``); the target is its best value with oom_per_1k <= 1; the front
is the Pareto set of (oom_per_1k, main objective). Results are cached under
runs/ground_truth/ keyed by (the space's landscape: its fingerprint, with the trace's
sha256; grid; profile; settings); the nominal truth of a scenario is committed in data/NAME/ and also serves as
its cache. ALL VALUES ARE SIMULATED (autotune.sim), never GPU measurements.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import math
import multiprocessing as mp
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autotune.deploy import SimProfile, predict_startup  # noqa: E402
from autotune.errors import UserError  # noqa: E402
from autotune.sim import simulate_trial  # noqa: E402
from autotune.sim.hazard import survives  # noqa: E402
from autotune.sim.quirks import NONE, Quirks  # noqa: E402
from autotune.space import SearchSpace, load_space, space_fingerprint  # noqa: E402
from autotune.study.trials.params import check_constraints  # noqa: E402
from experiments.scenarios import grids  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SPACES = REPO / "search_spaces"
DATA = Path(__file__).resolve().parent / "data"
CACHE = REPO / "runs" / "ground_truth"
TABLE, FRONT, TARGET = "ground_truth.csv.gz", "true_front.csv", "target.json"
OOM_LIMIT = 1.0  # per 1000 requests: autotune export's default
P_MIN = 1e-5  # no step this likely to crash: at most a few 1e-3 of a crash per trial, left at one run
P_BORDER = 1e-4  # the smallest step crash probability seen in any run that crashed (qwen72b-mixed)
BORDER_OOM = 10.0  # per 1000: at most a crash in one run of a few, so the limit of 1 is open
VERSION = 2  # of the rules above: part of the cache key


@dataclass(frozen=True)
class Settings:
    noise: bool = False
    seeds: int = 3  # runs of a config a seed can move (stage 2)
    borderline_seeds: int = 10  # runs of a config near the OOM limit (stage 3, noise off)
    near: float = 0.05  # noise on: stage 2's band around the best main objective
    verify: int = 25  # predicted startup failures the simulator checks
    first_seed: int = 9001  # trial seeds first_seed, first_seed + 1, ...: no study uses them

    def seed(self, k: int) -> int:
        return self.first_seed + k


@dataclass
class GroundTruth:
    """One scenario's brute force under one profile."""

    scenario: str
    main: str  # the main objective's metric
    maximize: bool
    params: list[str]
    rows: list[dict[str, Any]]
    front: list[dict[str, Any]]
    target: dict[str, Any] | None
    summary: dict[str, Any] = field(default_factory=dict)
    _index: dict[tuple, dict[str, Any]] = field(default_factory=dict, repr=False)

    def key(self, params: Mapping[str, Any]) -> tuple:
        return tuple(_norm(params[p]) for p in self.params)

    def value(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The grid row of ``params`` (searched params only), or None off the grid."""
        if not self._index:
            self._index = {self.key(r): r for r in self.rows}
        return self._index.get(self.key(params))


def _norm(v: Any) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, float):
        return round(v, 6)
    return v


# What a brute-force row keeps of every run: the columns of a truth's table. The space's main
# objective is added where it is none of these (any metric of autotune's registry, say
# p95_ttft_s), so a scenario given by path may rank by it; the named scenarios' tables keep
# exactly these columns.
RECORDED = ("oom_per_1k", "p99_e2e_s", "p99_ttft_s", "mean_tpot_s", "goodput_rps_per_gpu", "slo_attainment",
            "gpu_time_s")


def recorded(space: SearchSpace) -> tuple[str, ...]:
    main, _ = main_objective(space)
    return RECORDED if main in RECORDED else (*RECORDED, main)


def main_objective(space: SearchSpace) -> tuple[str, bool]:
    """(metric, maximise?) of the objective that is not oom_per_1k."""
    others = [o for o in space.objectives if o.metric != "oom_per_1k"]
    if not others or len(others) != len(space.objectives) - 1:
        raise ValueError("a scenario needs oom_per_1k and one other objective")
    return others[0].metric, others[0].direction == "maximize"


def is_path(scenario: str) -> bool:
    """Whether ``scenario`` names a search-space file rather than a search_spaces/ stem."""
    return scenario.endswith((".yaml", ".yml")) or "/" in scenario


def space_path(scenario: str) -> Path:
    """A scenario's space file: ``search_spaces/NAME.yaml``, or ``scenario`` itself when it
    is a path (a new deployment, no code needed)."""
    return Path(scenario) if is_path(scenario) else SPACES / f"{scenario}.yaml"


def scenario_grid(scenario: str, space: SearchSpace) -> dict[str, list[Any]]:
    """The brute force's grid: the hand-placed one of a named scenario (grids.py), or, for a
    space given by path, the space's own grid (``grid_points`` values of each param); either
    thinned to ``grids.MAX_CONFIGS`` configs where larger (``grids.capped``)."""
    if is_path(scenario) and scenario not in grids.GRIDS:
        return grids.capped(grids.derived(space))
    return grids.capped(grids.grid_for(scenario))


def scenario_name(scenario: str) -> str:
    """A name for results and caches: the stem, or for a path its stem and the space's
    fingerprint (two files of one name with different landscapes are different scenarios).

    The fingerprint, not the file's bytes, because a truth seed derives from this name: a
    comment, a header command or a moved trace file must not give the same space new truths.
    A file that does not load has no truths to name; its load reports the error in one line."""
    if not is_path(scenario):
        return scenario
    path = Path(scenario)
    try:
        digest = space_fingerprint(load_space(path))[:8]
    except UserError:
        digest = "unloadable"
    return f"{path.stem}-{digest}"


def cache_key(space: SearchSpace, grid: Mapping[str, list], profile: SimProfile, settings: Settings,
              quirks: Quirks = NONE) -> str:
    """What the truth depends on: the space's landscape (``space_fingerprint``: engine, params,
    constraints, workload with its trace's sha256, objectives; not comments, references or
    trial counts), the grid, the profile, a truth's structural quirks and the settings.
    Without quirks the key is what it was before they existed, so cached truths stay valid."""
    blob: dict[str, Any] = {"space": space_fingerprint(space), "grid": grid, "profile": profile.to_dict(),
                            "settings": asdict(settings), "version": VERSION}
    if quirks.active:
        blob["quirks"] = quirks.to_dict()
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --- one config ------------------------------------------------------------------------------

_W: dict[str, Any] = {}


def _init(space: SearchSpace, profile: SimProfile, quirks: Quirks = NONE) -> None:
    _W.update(space=space, profile=profile, quirks=quirks)


def _flags(space: SearchSpace, params: Mapping[str, Any]) -> dict[str, Any]:
    return {**space.fixed_flags(), **params}


def _simulate(job: tuple[int, dict[str, Any], int]) -> tuple[int, dict[str, Any]]:
    i, params, seed = job
    sp: SearchSpace = _W["space"]
    res = simulate_trial(sp.engine.model, sp.engine.gpu, _flags(sp, params), sp.workload, seed=seed,
                         env=sp.engine.env, profile=_W["profile"], quirks=_W.get("quirks", NONE), record_draws=True)
    m = res.metrics()
    started = res.status.value == "ok"
    out = {"_seed": seed, "_draws": res.extra.get("crash_draws"),  # for _replayed; not in a row
           "started": started, "failure": "" if started else res.failure_reason.splitlines()[0][:200],
           "crashes": res.crashes, "max_step_oom_p": res.extra.get("max_step_oom_p", 0.0),
           "headroom_gib": res.extra.get("mem_gib", {}).get("headroom", math.nan),
           "kv_cache_tokens": res.kv_cache_tokens, "preemptions": res.preemptions}
    for k in recorded(sp):
        out[k] = m.get(k, math.nan)
    return i, out


# --- the brute force -------------------------------------------------------------------------

def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def pareto(rows: Sequence[dict[str, Any]], main: str, maximize: bool) -> list[dict[str, Any]]:
    """The non-dominated rows, minimising oom_per_1k and optimising ``main``; by OOM rate."""
    sign = -1.0 if maximize else 1.0
    pts = sorted((r for r in rows if r["started"] and not math.isnan(r[main])),
                 key=lambda r: (r["oom_per_1k"], sign * r[main]))
    out, best = [], math.inf
    for r in pts:
        if sign * r[main] < best:
            out.append(r)
            best = sign * r[main]
    return out


def feasible(row: Mapping[str, Any], main: str) -> bool:
    """Whether a valued config may be a truth's best: it starts, serves and meets the OOM limit."""
    return bool(row["started"]) and float(row["oom_per_1k"]) <= OOM_LIMIT and not math.isnan(float(row[main]))


def best_within_limit(rows: Sequence[dict[str, Any]], main: str, maximize: bool) -> dict[str, Any] | None:
    ok = [r for r in rows if feasible(r, main)]
    if not ok:
        return None
    return (max if maximize else min)(ok, key=lambda r: r[main])


def _wanted(runs: list[dict[str, Any]], s: Settings) -> int:
    """How many runs a noise-free config needs, given the ones it has (stages 2 and 3)."""
    if not runs[0]["started"]:
        return 1
    crashed = any(r["crashes"] > 0 for r in runs)
    p = max(r["max_step_oom_p"] for r in runs)
    if not crashed and p < P_MIN:
        return 1
    if len(runs) < s.seeds:
        return s.seeds
    if (crashed or p >= P_BORDER) and _mean([r["oom_per_1k"] for r in runs]) <= BORDER_OOM:
        return max(s.seeds, s.borderline_seeds)
    return len(runs)


def _replayed(runs: list[dict[str, Any]], seed: int, workload_seed: int) -> dict[str, Any] | None:
    """Run ``seed`` of a config without simulating it, when that is exact: a crash-free run
    of it logged its crash draws (noise off) and ``seed`` survives them all, so it follows
    the same trajectory to the same values (autotune.sim.hazard.survives). None: simulate."""
    template = next((r for r in runs if r["_draws"] is not None and r["crashes"] == 0), None)
    if template is None or not survives(template["_draws"], workload_seed, seed):
        return None
    return {**template, "_seed": seed}


def _more_runs(pool: Any, cfgs: Sequence[dict[str, Any]], runs: dict[int, list[dict[str, Any]]],
               want: Mapping[int, int], settings: Settings, workload_seed: int) -> int:
    """Bring config ``i`` to ``want[i]`` runs, replaying what need not be simulated; each
    config's runs in seed order (so a row's mean does not depend on which process finished
    first). A config with no crash-free run yet gets one simulated run a round, since the
    first that survives lets the rest be replayed. Returns the runs simulated."""
    simulated = 0
    while True:
        todo = []
        for i, n in want.items():
            for k in range(len(runs[i]), n):
                seed = settings.seed(k)
                if (r := _replayed(runs[i], seed, workload_seed)) is None:
                    todo.append((i, cfgs[i], seed))
                    break
                runs[i].append(r)
        if not todo:
            break
        for i, r in pool.imap_unordered(_simulate, todo, chunksize=4):
            runs[i].append(r)
        simulated += len(todo)
    for i in want:
        runs[i].sort(key=lambda r: r["_seed"])
    return simulated


def _row(params: dict[str, Any], runs: list[dict[str, Any]], predicted_ok: bool,
         metrics: Sequence[str] = RECORDED) -> dict[str, Any]:
    first = runs[0]
    p99 = [r["p99_e2e_s"] for r in runs if not math.isnan(r["p99_e2e_s"])]
    row = {**params, "predicted_ok": predicted_ok, "started": first["started"], "failure": first["failure"],
           "n_seeds": len(runs) if first["started"] else 0}
    for k in (*metrics, "crashes", "preemptions"):
        row[k] = _mean([float(r[k]) for r in runs])
    row["p99_min"] = min(p99) if p99 else math.nan
    row["p99_max"] = max(p99) if p99 else math.nan
    row["max_step_oom_p"] = max(r["max_step_oom_p"] for r in runs)
    row["kv_cache_tokens"] = first["kv_cache_tokens"]
    row["headroom_gib"] = first["headroom_gib"]
    return row


def _rejected_row(params: dict[str, Any], why: str, metrics: Sequence[str] = RECORDED) -> dict[str, Any]:
    """A config that was not simulated (a constraint rejects it, or it cannot start): the
    columns of :func:`_row`, in its order, with no value measured."""
    nan = math.nan
    served = {k: nan for k in metrics} | {"oom_per_1k": 1000.0, "gpu_time_s": 0.0}
    return {**params, "predicted_ok": False, "started": False, "failure": why, "n_seeds": 0, **served,
            "crashes": 0.0, "preemptions": 0.0, "p99_min": nan, "p99_max": nan, "max_step_oom_p": 0.0,
            "kv_cache_tokens": 0, "headroom_gib": nan}


def run_brute_force(scenario: str, space: SearchSpace, grid: Mapping[str, list], profile: SimProfile,
                    settings: Settings, jobs: int, log=print, quirks: Quirks = NONE) -> GroundTruth:
    """Simulate the grid (no cache): see the module docstring for the stages."""
    t0 = time.time()
    main, maximize = main_objective(space)
    metrics = recorded(space)
    cfgs = grids.configs(dict(grid))
    fixed = space.fixed_flags()
    rows: dict[int, dict[str, Any]] = {}
    predicted: dict[int, bool] = {}
    why_not: dict[int, str] = {}
    for i, c in enumerate(cfgs):
        _, violated = check_constraints(c, space, fixed)
        if violated:
            rows[i] = _rejected_row(c, f"rejected by constraint: {violated[0]}", metrics)
            continue
        pred = predict_startup(space.engine.model, space.engine.gpu, _flags(space, c), space.engine.env, profile)
        predicted[i] = pred.ok
        why_not[i] = "" if pred.ok else f"predicted not to start: {pred.failure_reason.splitlines()[0][:200]}"
    infeasible = [i for i, ok in predicted.items() if not ok]
    step = max(1, len(infeasible) // settings.verify) if settings.verify else 0
    sample = set(infeasible[::step][: settings.verify]) if step else set()
    stage1 = [i for i, ok in predicted.items() if ok or i in sample]
    runs: dict[int, list[dict[str, Any]]] = {}
    # forkserver, not fork: the caller may run threads (Ray, a test runner's timers), and a child
    # forked while one of them held a lock hangs on it (seen: a worker stuck in the pool's queue
    # lock, the parent stuck joining it).
    ctx = mp.get_context("forkserver")
    with ctx.Pool(jobs, initializer=_init, initargs=(space, profile, quirks)) as pool:
        for i, r in pool.imap_unordered(_simulate, [(i, cfgs[i], settings.seed(0)) for i in stage1], chunksize=4):
            runs[i] = [r]
        log(f"{scenario}: stage 1, {len(stage1)} configs simulated ({len(infeasible)} predicted not to start, "
            f"{len(sample)} of them verified) in {time.time() - t0:.0f} s")
        started = {i: runs[i][0] for i in runs if runs[i][0]["started"]}
        draft = [_row(cfgs[i], [r], True, metrics) | {"_i": i} for i, r in started.items()]
        best = best_within_limit(draft, main, maximize)
        front = {r["_i"] for r in pareto(draft, main, maximize)}

        def matters(i: int, r: dict[str, Any]) -> bool:
            near = best is not None and not math.isnan(r[main]) and (
                r[main] >= (1 - settings.near) * best[main] if maximize else r[main] <= (1 + settings.near) * best[main])
            return near or 0 < r["oom_per_1k"] < 1000 or i in front

        if settings.noise:
            want = {i: settings.seeds for i, r in started.items() if matters(i, r)}
        else:
            want = {i: _wanted(runs[i], settings) for i in started}
        stages: list[int] = []
        replayed = 0  # repeat runs known without simulating them (_replayed)
        while want := {i: n for i, n in want.items() if n > len(runs[i])}:
            stages.append(len(want))
            asked = sum(n - len(runs[i]) for i, n in want.items())
            simulated = _more_runs(pool, cfgs, runs, want, settings, space.workload.seed)
            replayed += asked - simulated
            log(f"{scenario}: stage {len(stages) + 1}, {len(want)} configs to {max(want.values())} runs "
                f"({simulated} simulated, {asked - simulated} replayed), total {time.time() - t0:.0f} s")
            want = {} if settings.noise else {i: _wanted(runs[i], settings) for i in want}
    mismatches = 0
    for i, ok in predicted.items():
        if i in runs:
            rows[i] = _row(cfgs[i], runs[i], ok, metrics)
            mismatches += ok != runs[i][0]["started"]
        else:
            rows[i] = _rejected_row(cfgs[i], why_not[i], metrics)
    table = [rows[i] for i in range(len(cfgs))]
    target = best_within_limit(table, main, maximize)
    summary = {
        "note": "SIMULATED by autotune.sim; not a GPU measurement",
        "scenario": scenario, "main_objective": main, "maximize": maximize, "oom_limit_per_1k": OOM_LIMIT,
        "configs": len(cfgs), "rejected_by_constraints": len(cfgs) - len(predicted),
        "predicted_not_to_start": len(infeasible), "verified_not_to_start": len(sample),
        "simulated_configs": len(stage1), "startable": sum(1 for r in table if r["started"]),
        "stage2_configs": stages[0] if stages else 0, "stage3_configs": stages[1] if len(stages) > 1 else 0,
        "predict_startup_mismatches": mismatches, "noise": settings.noise, "replayed_runs": replayed,
        "seeds": [settings.seed(k) for k in range(settings.seeds if settings.noise else
                                                  max(settings.seeds, settings.borderline_seeds))],
        "runtime_s": round(time.time() - t0),
        "jobs": jobs,
    }
    if target is not None:
        tol = [r for r in table if r["started"] and r["oom_per_1k"] <= OOM_LIMIT and not math.isnan(r[main])]
        for pct in (1, 5):
            f = pct / 100
            summary[f"within_{pct}pct_of_target"] = sum(
                1 for r in tol if (r[main] >= (1 - f) * target[main] if maximize else r[main] <= (1 + f) * target[main]))
    return GroundTruth(scenario, main, maximize, list(grid), table, pareto(table, main, maximize), target, summary)


def true_value(space: SearchSpace, params: Mapping[str, Any], profile: SimProfile,
               settings: Settings = Settings(), quirks: Quirks = NONE) -> dict[str, Any]:
    """The truth of one config, on or off the grid, by the grid's rule (noise on: every
    startable config gets ``settings.seeds`` runs). ``profile`` is used as given (switch
    noise off first)."""
    _init(space, profile, quirks)
    metrics = recorded(space)
    c = dict(params)
    _, violated = check_constraints(c, space, space.fixed_flags())
    if violated:
        return _rejected_row(c, f"rejected by constraint: {violated[0]}", metrics)
    pred = predict_startup(space.engine.model, space.engine.gpu, _flags(space, c), space.engine.env, profile)
    runs = [_simulate((0, c, settings.seed(0)))[1]]
    while (n := (settings.seeds if settings.noise and runs[0]["started"] else _wanted(runs, settings))) > len(runs):
        for k in range(len(runs), n):
            runs.append(_replayed(runs, settings.seed(k), space.workload.seed) or _simulate((0, c, settings.seed(k)))[1])
    return _row(c, runs, pred.ok, metrics)


# --- files ------------------------------------------------------------------------------------

def write(gt: GroundTruth, out: Path, extra: Mapping[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cols = list(gt.rows[0])
    with gzip.open(out / TABLE, "wt", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(gt.rows)
    with (out / FRONT).open("w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(gt.front)
    (out / TARGET).write_text(json.dumps({**gt.summary, **extra, "target": gt.target}, indent=1, default=str) + "\n")


def _typed(space: SearchSpace, name: str, text: str) -> Any:
    p = space.params[name]
    if p.type == "bool":
        return text == "True"
    if p.type == "int":
        return int(text)
    if p.type == "float":
        return float(text)
    return next(c for c in p.choices or [] if str(c) == text)


def _num(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        try:
            return float(text) if text else math.nan
        except ValueError:
            return text


def read(scenario: str, space: SearchSpace, src: Path) -> GroundTruth:
    main, maximize = main_objective(space)
    summary = json.loads((src / TARGET).read_text())
    with gzip.open(src / TABLE, "rt") as f:
        raw = list(csv.DictReader(f))
    params = list(space.params)
    rows = [{k: (_typed(space, k, v) if k in params else (v if k == "failure" else _num(v))) for k, v in r.items()}
            for r in raw]
    gt = GroundTruth(scenario, main, maximize, params, rows, [], None, summary)
    gt.front = pareto(rows, main, maximize)
    gt.target = best_within_limit(rows, main, maximize)
    return gt


def brute_force(scenario: str, profile: SimProfile | None = None, *, jobs: int = 2, settings: Settings = Settings(),
                out: Path | None = None, log=print, quirks: Quirks = NONE) -> GroundTruth:
    """The ground truth of ``scenario`` (a search_spaces/ stem or a space file's path) under
    ``profile`` (default: the space's own) and a truth's ``quirks``, cached.

    The reality-gap benchmark calls this once per truth (experiments/reality_gap/families.py
    draws the profile and quirks). Noise is switched off unless ``settings.noise``.
    """
    path = space_path(scenario)
    space = load_space(path)
    grid = scenario_grid(scenario, space)
    grids.check(grid, space)
    base = space.engine.profile if profile is None else profile
    prof = base if settings.noise else base.without_noise()
    key = cache_key(space, grid, prof, settings, quirks)
    nominal = profile is None and settings == Settings() and not quirks.active and not is_path(scenario)
    name = scenario_name(scenario)
    places = [p for p in (out, DATA / scenario if nominal else None, CACHE / f"{name}-{key}") if p is not None]
    for place in places:
        t = place / TARGET
        if t.exists() and json.loads(t.read_text()).get("cache_key") == key:
            log(f"{scenario}: ground truth from {place} (cache key {key})")
            gt = read(scenario, space, place)
            for other in places:
                if other != place and not (other / TARGET).exists():
                    shutil.copytree(place, other, dirs_exist_ok=True)
            return gt
    gt = run_brute_force(name, space, grid, prof, settings, jobs, log, quirks)
    full = path.resolve()
    where = str(full.relative_to(REPO)) if full.is_relative_to(REPO) else str(path)
    extra = {"cache_key": key, "profile": prof.to_dict(), "grid": grid, "space": where,
             "command": f".venv/bin/python -m experiments.scenarios.ground_truth --scenario {scenario}"}
    if quirks.active:
        extra["quirks"] = quirks.to_dict()
    for place in places:
        write(gt, place, extra)
    return gt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", required=True,
                    help="a space in search_spaces/ (its file stem) with a grid in grids.py, or a space file's path")
    who = ap.add_mutually_exclusive_group()
    who.add_argument("--profile", type=Path, help="SimProfile file (YAML/JSON); default: the space's own")
    who.add_argument("--truth-seed", type=int, help="use the space's profile perturbed(N): a truth of issue 12")
    ap.add_argument("--jobs", type=int, default=2, help="processes")
    ap.add_argument("--noise", action="store_true", help="keep run-to-run noise on (the search benchmark's definition)")
    ap.add_argument("--seeds", type=int, default=3, help="runs of a config a seed can move (trial seeds 9001, ...)")
    ap.add_argument("--borderline-seeds", type=int, default=10, help="runs of a config near the OOM limit")
    ap.add_argument("--near", type=float, default=0.05, help="--noise: stage-2 band around the best main objective")
    ap.add_argument("--out", type=Path, help="also write the three files here")
    args = ap.parse_args()
    space = load_space(space_path(args.scenario))
    profile: SimProfile | None = None
    if args.profile is not None:
        profile = SimProfile.load(args.profile)
    elif args.truth_seed is not None:
        profile = space.engine.profile.perturbed(args.truth_seed)
    settings = Settings(noise=args.noise, seeds=args.seeds, borderline_seeds=args.borderline_seeds, near=args.near)
    gt = brute_force(args.scenario, profile, jobs=args.jobs, settings=settings, out=args.out)
    print(json.dumps({k: v for k, v in gt.summary.items()}, indent=1, default=str))
    print(f"target ({gt.main}, {'max' if gt.maximize else 'min'} at <= {OOM_LIMIT:g} OOM/1k):", gt.target)
    print(f"front ({len(gt.front)} points):")
    for r in gt.front:
        print(f"  oom/1k {r['oom_per_1k']:7.1f}  {gt.main} {r[gt.main]:.4g}  " +
              ", ".join(f"{p}={r[p]}" for p in gt.params))


if __name__ == "__main__":
    main()

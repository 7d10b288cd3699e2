"""The truth's best over the space, not only over the grid. SIMULATED.

Why this exists: each scenario's brute-force grid (experiments/scenarios/grids.py) was placed
where the *nominal* model's landscape changes, and a flag the nominal model found flat is held
at one value (qwen72b-mixed's block_size 16) or a few (rag-llama70b-h100's max_num_seqs 4, 16,
1024). A structural truth has what the model lacks (a smooth field over every flag, padding to
CUDA-graph sizes, ...), so a config off the grid can beat the grid's best. Read against the
grid's best alone, such a truth makes every strategy look nearer the best than it is, and one
that finds the better config off the grid is scored as merely "within 2 %".

The refinement: coordinate descent in the noise-free truth over a ladder of each searched
flag's values (every choice of a categorical or bool; for a number about ``LADDER_POINTS``
values of its range, every step when its step gives fewer, and the grid's own values). It
starts from ``STARTS`` grid configs: the best feasible one of each combination of the
categorical and bool flags, the best such "planes" first, because the truth's best can lie in
another plane than the grid's best; and from each of those with one categorical or bool flag
set to a value the grid never holds (``off_grid_twins``). From a start it screens every rung
of one flag with the others held by one noise-free run (the brute force's first), values the
``CONFIRM`` best that beat the current config by the brute force's own rule
(``ground_truth.true_value``, as ``Truth.value`` values a config off the grid: ten runs near
the OOM limit), moves to the best of them within the OOM limit, and goes on flag by flag until
a whole pass moves nothing (at most ``MAX_PASSES``). So the refined best is comparable with
the grid's and never worse. It never looks at a study: what it finds depends on the truth and
the space alone. It is a better bound on the truth's best, not a proof of optimum: a study's
export can still beat it (a negative ``regret_space``), and the screen drops a config whose
one run crossed the OOM limit although its ten might not.

The result is cached beside the brute force (``space_best.json``, keyed by the brute force's
cache key and this module's settings) and committed for the scenarios' truths like the brute
force. ``python -m experiments.reality_gap.refine --scenario S --truth-seeds 1000-1009`` computes
and prints them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from autotune.deploy import SimProfile
from autotune.sim.quirks import Quirks
from autotune.space import SearchSpace
from experiments.reality_gap.families import DEFAULT_FAMILY
from experiments.reality_gap.score import finite_or_none, progress, regret_auc, true_regret
from experiments.reality_gap.truth import OOM_LIMIT, Truth, scenario_space, truth_dir
from experiments.scenarios import ground_truth as gt_mod
from experiments.scenarios.ground_truth import feasible

FILE = "space_best.json"
VERSION = 3  # of the procedure below: part of the cache key
STARTS = 4  # descents: from the best grid configs of the best "planes" (``starts``), and their off-grid twins
MAX_PASSES = 6
LADDER_POINTS = 15  # a number's rungs (every step value when its step gives fewer), and the grid's

MOVED = 0.0005  # --summary counts a truth as moved when its best gained more than this
CONFIRM = 3  # screened rungs of a flag valued in full, the best first
ONE_RUN = gt_mod.Settings(seeds=1, borderline_seeds=1)  # the screen: the brute force's first run alone
# (configs, full?) -> their rows: one run each, or the brute force's full rule
RunMany = Callable[[list[dict[str, Any]], bool], list[dict[str, Any]]]


def ladder(space: SearchSpace, grid: Mapping[str, Sequence[Any]], name: str) -> list[Any]:
    """The values the descent tries for flag ``name``: the space's, finer than the grid's."""
    p = space.params[name]
    fine = list(p.grid_values(LADDER_POINTS))
    values = fine + [v for v in grid.get(name, []) if v not in fine]
    return values if p.type in ("bool", "categorical") else sorted(set(values))


def better(a: Mapping[str, Any], b: Mapping[str, Any], main: str, maximize: bool) -> bool:
    return float(a[main]) > float(b[main]) if maximize else float(a[main]) < float(b[main])


@dataclass(frozen=True)
class Refined:
    best: dict[str, Any]  # the best row found (the grid's best when nothing off it is better)
    grid_best: dict[str, Any]
    valued: int  # configs valued in full off the grid
    screened: int  # off-grid valuations in all, one-run screens included
    seconds: float

    @property
    def moved(self) -> bool:
        return self.best != self.grid_best


def descend(start: dict[str, Any], names: Sequence[str], rungs: Mapping[str, Sequence[Any]], values: RunMany,
            main: str, maximize: bool) -> dict[str, Any]:
    """Coordinate descent from the valued row ``start`` (module docstring). Each flag's rungs are
    screened with one run; the ``CONFIRM`` best screened rungs that beat the current config are
    valued in full (a config near the OOM limit takes ten runs), and the best of those wins."""
    here = start
    for _ in range(MAX_PASSES):
        moved = False
        for name in names:
            tries = [{**{n: here[n] for n in names}, name: v} for v in rungs[name] if v != here[name]]
            quick = [r for r in values(tries, False) if feasible(r, main) and better(r, here, main, maximize)]
            quick.sort(key=lambda r: float(r[main]), reverse=maximize)
            for row in values([{n: r[n] for n in names} for r in quick[:CONFIRM]], True):
                if feasible(row, main) and better(row, here, main, maximize):
                    here, moved = row, True
        if not moved:
            break
    return here


def starts(truth: Truth) -> list[dict[str, Any]]:
    """The grid's best feasible config of each combination of the categorical and bool flags (a
    "plane"), the ``STARTS`` best of them: diverse starts, since the truth's best may lie in
    another plane than the grid's best, with other numbers too."""
    best: dict[tuple, dict[str, Any]] = {}
    for r in truth.grid.rows:
        if not feasible(r, truth.main):
            continue
        k = truth.space.plane(r)
        if k not in best or better(r, best[k], truth.main, truth.maximize):
            best[k] = r
    return sorted(best.values(), key=lambda r: float(r[truth.main]), reverse=truth.maximize)[:STARTS]


def off_grid_twins(start: Mapping[str, Any], rungs: Mapping[str, Sequence[Any]], truth: Truth,
                   grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """``start`` with one categorical or bool flag set to a value the grid never holds (qwen72b-mixed's
    block_size 32), each: a plane the grid has no row in is entered at a good config and
    descended in, since a move into it alone from the grid's best plane can look worse than
    staying while the plane's own best is better (the flags interact). ``grid``: the brute
    force's values of each flag."""
    out = []
    for name, p in truth.space.params.items():
        if p.type in ("bool", "categorical"):
            out += [{**{n: start[n] for n in truth.space.params}, name: v} for v in rungs[name] if v not in grid[name]]
    return out


def refine(truth: Truth, run_many: RunMany | None = None) -> Refined:
    """The best config the descent finds under ``truth`` (module docstring). ``run_many(configs,
    full)`` values off-grid configs (one run, or in full); in this process when None."""
    t0 = time.time()
    names = list(truth.space.params)
    grid = truth.grid
    grid_values = gt_mod.scenario_grid(truth.scenario, truth.space)
    rungs = {n: ladder(truth.space, grid_values, n) for n in names}
    seen: dict[tuple[bool, tuple], dict[str, Any]] = {}
    runner = run_many or _serial(truth)

    def known(c: dict[str, Any], full: bool) -> dict[str, Any] | None:
        """The grid's row, or the valuation asked for (a screen stays one run, as it ranked before)."""
        return grid.value(c) or seen.get((full, grid.key(c)))

    def values(configs: list[dict[str, Any]], full: bool) -> list[dict[str, Any]]:
        todo = list({grid.key(c): c for c in configs if known(c, full) is None}.values())
        for c, r in zip(todo, runner(todo, full) if todo else [], strict=True):
            seen[(full, grid.key(c))] = r
        return [grid.value(c) or seen[(full, grid.key(c))] for c in configs]

    best = truth.best
    for s in starts(truth):
        for v in [s, *values(off_grid_twins(s, rungs, truth, grid_values), True)]:
            if not feasible(v, truth.main):
                continue
            end = descend(v, names, rungs, values, truth.main, truth.maximize)
            if better(end, best, truth.main, truth.maximize):
                best = end
    return Refined(dict(best), dict(truth.best), sum(1 for full, _ in seen if full), len(seen),
                   time.time() - t0)


def settings(full: bool) -> gt_mod.Settings:
    """The brute force's rule in full, or its first run alone (the screen)."""
    return gt_mod.Settings() if full else ONE_RUN


def _serial(truth: Truth) -> RunMany:
    profile = truth.profile.without_noise()
    return lambda configs, full: [gt_mod.true_value(truth.space, c, profile, settings(full),
                                                    quirks=truth.draw.quirks) for c in configs]


_W: dict[str, Any] = {}


def _init(space: SearchSpace, profile: SimProfile, quirks: Quirks) -> None:
    _W.update(space=space, profile=profile, quirks=quirks)


def _value(job: tuple[dict[str, Any], bool]) -> dict[str, Any]:
    params, full = job
    return gt_mod.true_value(_W["space"], params, _W["profile"], settings(full), quirks=_W["quirks"])


def _key(scenario: str, seed: int, family: str) -> str | None:
    """The brute force's cache key (which covers the space, grid, profile and quirks) with
    everything of this module that changes what the descent finds: its settings, the OOM
    limit, and the order of the flags it descends in (None before the brute force)."""
    target = truth_dir(scenario, seed, family) / gt_mod.TARGET
    if not target.exists():
        return None
    mine = {"version": VERSION, "starts": STARTS, "max_passes": MAX_PASSES, "ladder_points": LADDER_POINTS,
            "confirm": CONFIRM, "screen": asdict(ONE_RUN), "full": asdict(gt_mod.Settings()), "oom_limit": OOM_LIMIT,
            "order": list(scenario_space(scenario).params)}
    digest = hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()[:16]
    return f"{json.loads(target.read_text())['cache_key']}/refine-{digest}"


def cache_key(truth: Truth) -> str | None:
    return _key(truth.scenario, truth.seed, truth.family)


def _saved(scenario: str, seed: int, family: str) -> dict[str, Any] | None:
    """The saved refinement when it is of the current brute force and procedure, else None."""
    path = truth_dir(scenario, seed, family) / FILE
    key = _key(scenario, seed, family)
    if key is None or not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved if saved.get("cache_key") == key else None


def is_cached(scenario: str, seed: int, family: str = DEFAULT_FAMILY) -> bool:
    return _saved(scenario, seed, family) is not None


def space_best(truth: Truth, jobs: int = 1, log: Callable[[str], None] = lambda *_: None) -> dict[str, Any]:
    """The refined best row of ``truth``: from ``space_best.json`` when it matches, else computed
    (``jobs`` processes) and written there."""
    saved = _saved(truth.scenario, truth.seed, truth.family)
    if saved is not None:
        return saved["best"]
    path = truth_dir(truth.scenario, truth.seed, truth.family) / FILE
    if jobs > 1:
        ctx = mp.get_context("forkserver")  # as the brute force: the caller may run threads
        with ctx.Pool(jobs, initializer=_init, initargs=(truth.space, truth.profile.without_noise(),
                                                         truth.draw.quirks)) as pool:
            r = refine(truth, lambda cs, full: pool.map(_value, [(c, full) for c in cs], chunksize=1))
    else:
        r = refine(truth)
    out = {"note": "SIMULATED by autotune.sim; not a GPU measurement", "cache_key": cache_key(truth),
           "scenario": truth.name, "truth_seed": truth.seed, "truth_family": truth.family,
           "main_objective": truth.main, "maximize": truth.maximize,
           "grid_best": _clean(r.grid_best), "best": _clean(r.best), "moved": r.moved,
           "gain": -truth.regret(r.best, r.grid_best), "valued_off_grid": r.valued,
           "screened_off_grid": r.screened, "runtime_s": round(r.seconds, 1)}
    # Never a half-written cache, and a temporary file of this process's own: two processes may
    # refine the same truth at once (the same result), and neither may write into the other's.
    tmp = path.with_name(f"{FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    log(f"{truth.name} truth {truth.seed}: the grid's best {r.grid_best[truth.main]:.4g}, refined "
        f"{r.best[truth.main]:.4g} ({out['gain']:+.1%}), {r.screened} off-grid valuations ({r.valued} in full) "
        f"in {r.seconds:.0f} s")
    return _clean(r.best)


def scores(truth: Truth, exported: Mapping[str, Any] | None, jobs: int = 1,
           log: Callable[[str], None] = lambda *_: None, best: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The contract's keys against the refined best (``true_best`` and ``regret`` stay the grid's):
    ``true_best_space``, ``true_best_space_flags``, ``regret_space``, ``within_2pct_space``.
    ``best``: the refined best row when the caller has it (scoring many rows of one truth)."""
    if best is None:
        best = space_best(truth, jobs, log)
    row = truth.value(exported) if exported is not None else None
    return {"true_best_space": float(best[truth.main]),
            "true_best_space_flags": {k: best[k] for k in truth.space.params},
            "regret_space": finite_or_none(truth.regret(row, best)) if row is not None else None,
            "within_2pct_space": truth.within(row, best) if row is not None else False}


HOURS = ("gpu_hours_to_2pct", "gpu_hours_to_2pct_stable", "gpu_hours_to_2pct_stable_frac", "regret_auc")
HOUR_KEYS = tuple(f"{k}_space" for k in HOURS)  # the same figures against the refined best


def hour_scores(truth: Truth, picks: Sequence[Sequence[Any]], budget_hours: float, jobs: int = 1,
                log: Callable[[str], None] = lambda *_: None, best: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The GPU-hour figures against the refined best (:data:`HOUR_KEYS`), from a row's ``export_timeline``
    (``[GPU-hours, flags or None]`` where the export changed), by the rule ``run.score_case`` uses for
    the grid's best. ``best``: the refined best row when the caller has it."""
    if best is None:
        best = space_best(truth, jobs, log)
    p = progress([(float(h), f) for h, f in picks], lambda f: truth.within(truth.value(f), best),
                 lambda f: true_regret(truth, f, best))
    frac = None if p.stable is None or not budget_hours else p.stable / budget_hours
    return dict(zip(HOUR_KEYS, (p.first, p.stable, frac, regret_auc(p.curve, budget_hours)), strict=True))


def _clean(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items() if not k.startswith("_")}


def summary(scenario: str, truth_seeds: Sequence[int], family: str = DEFAULT_FAMILY) -> str:
    """One line: how far the saved refinements of ``truth_seeds`` moved the best."""
    gains = []
    for s in truth_seeds:
        if is_cached(scenario, s, family):
            saved = json.loads((truth_dir(scenario, s, family) / FILE).read_text())
            gains.append((s, saved["gain"], saved["runtime_s"]))
    if not gains:
        return f"{scenario}: no refinement saved for these truths"
    moved = [g for g in gains if g[1] > MOVED]
    return (f"{scenario}: {len(gains)} truths, the refined best better than the grid's by over "
            f"{100 * MOVED:.2g} % in {len(moved)} "
            f"(by {', '.join(f'{100 * g:.1f} %' for _, g, _ in sorted(moved, key=lambda x: -x[1]))}); "
            f"median gain {100 * statistics.median(g for _, g, _ in gains):.1f} %, "
            f"runtime {min(t for *_, t in gains):.0f}-{max(t for *_, t in gains):.0f} s a truth")


def main() -> None:
    from experiments.reality_gap.bench import seeds

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--truth-seeds", required=True, help="'0-3' or '0,2'")
    ap.add_argument("--truth-family", default=DEFAULT_FAMILY)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--summary", action="store_true", help="print the saved refinements' gains, compute nothing")
    a = ap.parse_args()
    if a.summary:
        print(summary(a.scenario, seeds(a.truth_seeds), a.truth_family))
        return
    for s in seeds(a.truth_seeds):
        truth = Truth.load(a.scenario, s, jobs=a.jobs, log=print, family=a.truth_family)
        best = space_best(truth, jobs=a.jobs, log=print)
        print(json.dumps({"scenario": truth.name, "truth_seed": s, "grid_best": float(truth.best[truth.main]),
                          "space_best": best[truth.main],
                          "space_best_flags": {k: best[k] for k in truth.space.params}}))


if __name__ == "__main__":
    main()

"""The truth's best over the space (experiments/reality_gap/refine.py) and the rows scored against it
(rescore.py). SIMULATED.

The descent is checked on a made-up landscape whose optimum is known; the whole refinement on a
tiny space given by path (its brute force takes seconds) whose grid is coarser than the space.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from autotune.space.schema import SearchSpace
from experiments.reality_gap import refine, rescore
from experiments.reality_gap.truth import TRUTHS, Truth
from tests.reality_gap import test_baselines

MAIN = "p99_e2e_s"
NAMES = ("a", "b")
RUNGS = {"a": [0, 1, 2, 3, 4], "b": [0, 1, 2, 3, 4]}


def _row(a: int, b: int, full: bool) -> dict:
    """A bowl with its bottom at (3, 1). a = 4 is better still but over the OOM limit; (2, 2)
    looks best on one run and is poor once valued in full (a lucky screen)."""
    main, oom = (a - 3) ** 2 + (b - 1) ** 2 + 10.0, 0.0
    if a == 4:
        main, oom = 1.0, 5.0
    if (a, b) == (2, 2):
        main = 0.5 if not full else 99.0
    return {"a": a, "b": b, "started": True, "oom_per_1k": oom, MAIN: main}


def _values(log: list):
    def values(configs, full):
        log.extend((c["a"], c["b"], full) for c in configs)
        return [_row(c["a"], c["b"], full) for c in configs]
    return values


def test_the_descent_reaches_the_best_config_within_the_oom_limit():
    log: list = []
    end = refine.descend(_row(0, 0, True), NAMES, RUNGS, _values(log), MAIN, maximize=False)
    assert (end["a"], end["b"]) == (3, 1) and end[MAIN] == 10.0
    assert any(full for *_, full in log) and any(not full for *_, full in log)  # screened, then valued in full


def test_a_lucky_screen_is_not_taken_on_its_one_run():
    """From (2, 0), varying b first screens (2, 2), the best-looking one-run value of all; valued in
    full it is poor, so the descent goes on to the true bottom instead of stopping there."""
    log: list = []
    end = refine.descend(_row(2, 0, True), ("b", "a"), RUNGS, _values(log), MAIN, maximize=False)
    assert (2, 2, False) in log and (2, 2, True) in log  # screened lucky, then valued in full
    assert (end["a"], end["b"]) == (3, 1) and end["oom_per_1k"] <= refine.OOM_LIMIT


def test_a_maximised_metric_climbs():
    def values(configs, full):
        return [{**c, "started": True, "oom_per_1k": 0.0, "goodput": float(c["a"] + c["b"])} for c in configs]
    start = {"a": 0, "b": 0, "started": True, "oom_per_1k": 0.0, "goodput": 0.0}
    end = refine.descend(start, NAMES, RUNGS, values, "goodput", maximize=True)
    assert (end["a"], end["b"]) == (4, 4)


def test_starts_are_the_best_feasible_config_of_each_plane_best_first():
    rows = [
        {"x": 0.9, "d": "auto", "started": True, "oom_per_1k": 0.0, MAIN: 10.0},
        {"x": 0.95, "d": "auto", "started": True, "oom_per_1k": 0.0, MAIN: 9.0},
        {"x": 0.9, "d": "fp8", "started": True, "oom_per_1k": 0.0, MAIN: 9.5},
        {"x": 0.98, "d": "fp8", "started": True, "oom_per_1k": 3.0, MAIN: 1.0},  # over the OOM limit
        {"x": 0.98, "d": "auto", "started": False, "oom_per_1k": 1000.0, MAIN: float("nan")},
    ]
    params = {"x": SimpleNamespace(type="float"), "d": SimpleNamespace(type="categorical")}
    space = SimpleNamespace(params=params)
    space.plane = lambda flags: SearchSpace.plane(space, flags)  # the space's own rule, on these params
    fake = SimpleNamespace(space=space, grid=SimpleNamespace(rows=rows), main=MAIN, maximize=False)
    assert [(r["x"], r["d"]) for r in refine.starts(fake)] == [(0.95, "auto"), (0.9, "fp8")]


# test_baselines.py's tiny space with a grid coarser than the space: max_num_seqs an int range and
# gpu_memory_utilization four steps, of which the grid (study.grid_points 2) holds the ends.
TINY = (test_baselines.TINY
        .replace("gpu_memory_utilization: {type: float, low: 0.88, high: 0.92, step: 0.04}",
                 "gpu_memory_utilization: {type: float, low: 0.86, high: 0.94, step: 0.02}")
        .replace("max_num_seqs: {type: categorical, choices: [64, 256]}",
                 "max_num_seqs: {type: int, low: 16, high: 256, log: true}")
        .replace("study: {name: tiny, trials: 8, seed: 0}", "study: {name: tiny-refine, trials: 8, seed: 0, grid_points: 2}"))


@pytest.fixture(scope="module")
def tiny_truth(tmp_path_factory) -> Truth:
    assert TINY.count("0.86") == 1 and "type: int" in TINY and "grid_points: 2" in TINY  # every replace took
    path = tmp_path_factory.mktemp("spaces") / "tiny-refine.yaml"
    path.write_text(TINY)
    return Truth.load(str(path), 0, jobs=1)


def test_the_refined_best_is_a_feasible_config_no_worse_than_the_grids(tiny_truth):
    t = tiny_truth
    assert len(t.grid.rows) == 8  # 2 x 2 x 2: the grid is coarser than the space
    r = refine.refine(t)
    assert r.screened > 0  # configs off the grid were tried
    again = t.value({k: r.best[k] for k in t.space.params})
    assert refine.feasible(again, t.main) and again[t.main] == r.best[t.main]  # valued by the brute force's rule
    assert r.best[t.main] <= t.best[t.main]
    assert r.moved == (r.best[t.main] < t.best[t.main])


def test_the_refined_best_is_cached_beside_the_brute_force_and_keyed(tiny_truth, tmp_path, monkeypatch):
    t = tiny_truth
    real = refine.truth_dir(t.scenario, t.seed, t.family)
    for f in real.iterdir():  # a copy of the brute force: the test tampers with its cache
        if f.is_file() and f.name != refine.FILE:
            (tmp_path / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(refine, "truth_dir", lambda *_: tmp_path)
    best = refine.space_best(t)
    path = tmp_path / refine.FILE
    saved = json.loads(path.read_text())
    assert saved["best"] == best and saved["cache_key"] == refine.cache_key(t) and "SIMULATED" in saved["note"]
    assert refine.is_cached(t.scenario, t.seed, t.family)
    saved["best"][t.main] = -1.0  # a cache that matches its key is read, not recomputed
    path.write_text(json.dumps(saved))
    assert refine.space_best(t)[t.main] == -1.0
    saved["cache_key"] = "stale"
    path.write_text(json.dumps(saved))
    assert not refine.is_cached(t.scenario, t.seed, t.family)
    assert refine.space_best(t)[t.main] == best[t.main]  # a stale one is recomputed


def test_rescore_adds_the_refined_keys_and_keeps_the_rest(tiny_truth, tmp_path):
    t = tiny_truth
    flags = {k: t.best[k] for k in t.space.params}
    sim = {"scenario": t.scenario, "truth_seed": 0, "truth_family": t.family, "strategy": "tpe",
           "exported_flags": flags, "regret": 0.0, "gpu_hours_to_2pct": 1.5}
    none = {**sim, "strategy": "random", "exported_flags": None}
    replayed = {"scenario": "vllm-cpu", "truth_seed": 0, "truth_family": "table", "table": "runs.jsonl",
                "exported_flags": {"x": 1}}
    f = tmp_path / "runs.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in (sim, none, replayed)))
    assert rescore.rescore_file(f, jobs=1) == (3, 2)
    a, b, c = [json.loads(x) for x in f.read_text().splitlines()]
    best = refine.space_best(t)
    assert a["true_best_space"] == best[t.main] and a["regret_space"] == pytest.approx(t.best[t.main] / best[t.main] - 1)
    assert a["within_2pct_space"] == (a["regret_space"] <= 0.02)
    assert {k: a[k] for k in sim} == sim  # nothing already there is changed
    assert b["regret_space"] is None and b["within_2pct_space"] is False
    assert c == replayed
    assert rescore.rescore_file(f, jobs=1) == (3, 0)  # idempotent


def test_rescore_scores_a_rows_export_timeline_against_the_refined_best(tiny_truth, tmp_path):
    t = tiny_truth
    best = refine.space_best(t)
    refined = {k: best[k] for k in t.space.params}
    # a grid config that serves within the OOM limit but is over 2 % off the refined best
    far = next(r for r in t.grid.rows if refine.feasible(r, t.main) and t.regret(r, best) > 0.05)
    gap = t.regret(far, best)
    far = {k: far[k] for k in t.space.params}
    # No export for 1 GPU-hour, the far config from 1 h, the refined best from 3 h, of a 10 GPU-hour budget.
    row = {"scenario": t.scenario, "truth_seed": 0, "truth_family": t.family, "strategy": "autotune",
           "exported_flags": refined, "budget_gpu_hours": 10.0,
           "export_timeline": [[0.5, None], [1.0, far], [3.0, refined]]}
    f = tmp_path / "runs.jsonl"
    f.write_text(json.dumps(row) + "\n")
    assert rescore.rescore_file(f, jobs=1) == (1, 1)
    out = json.loads(f.read_text())
    assert out["gpu_hours_to_2pct_space"] == out["gpu_hours_to_2pct_stable_space"] == 3.0
    assert out["gpu_hours_to_2pct_stable_frac_space"] == pytest.approx(0.3)
    assert out["regret_auc_space"] == pytest.approx((1.0 * 1.0 + min(gap, 1.0) * 2.0 + 0.0 * 7.0) / 10.0)
    assert out["within_2pct_space"] is True
    assert rescore.rescore_file(f, jobs=1) == (1, 0)


def test_every_committed_refinement_matches_its_truth():
    stale = [str(p) for p in TRUTHS.glob("structural/*/seed-*/" + refine.FILE)
             if not refine.is_cached(p.parent.parent.name, int(p.parent.name.removeprefix("seed-")), "structural")]
    assert not stale, f"stale refinements (rerun python -m experiments.reality_gap.refine): {stale}"
    assert (TRUTHS / "structural" / "small-highconc" / "seed-0" / refine.FILE).exists()  # the contract test's


def test_timelines_come_from_a_rerun_that_agrees_on_everything_else(tmp_path):
    """rescore --timelines-from: an older row gets its export timeline from a rerun of the same case,
    only if the rerun is the same study (every other key equal, runtime aside); else nothing is written."""
    row = {"scenario": "s", "truth_seed": 1000, "truth_family": "structural", "strategy": "autotune",
           "study_seed": 0, "regret": 0.01, "regret_auc": 0.25, "runtime_s": {"study": 100.0}}
    other = {**row, "strategy": "tpe"}  # no rerun: left alone
    timeline = {"export_timeline": [[1.0, {"x": 1}]], "gpu_hours_to_2pct_space": 1.0,
                "gpu_hours_to_2pct_stable_space": 1.0, "gpu_hours_to_2pct_stable_frac_space": 0.1,
                "regret_auc_space": 0.3}
    rerun = {**row, **timeline, "regret_auc": 0.25 + 1e-15, "runtime_s": {"study": 50.0}}
    runs, again = tmp_path / "runs.jsonl", tmp_path / "again.jsonl"
    runs.write_text(json.dumps(row) + "\n" + json.dumps(other) + "\n")
    # the rerun agrees with the second file's one case (truth 1001) and not with runs.jsonl's
    again.write_text(json.dumps({**rerun, "regret": 0.02}) + "\n" + json.dumps({**rerun, "truth_seed": 1001}) + "\n")
    before = runs.read_text()
    good = tmp_path / "good.jsonl"  # checked first, and fine: still not written, since runs.jsonl is refused
    good.write_text(json.dumps({**row, "truth_seed": 1001}) + "\n")
    with pytest.raises(SystemExit, match="differs from .* in 'regret'"):
        rescore.add_timelines([good, runs], again)
    assert runs.read_text() == before and "export_timeline" not in good.read_text()
    again.write_text(json.dumps(rerun) + "\n" + json.dumps(rerun) + "\n")
    with pytest.raises(SystemExit, match="twice"):
        rescore.add_timelines([runs], again)
    again.write_text("[1]\n")
    with pytest.raises(SystemExit, match="not rows of the bench"):
        rescore.add_timelines([runs], again)
    again.write_text(json.dumps(rerun) + "\n")
    assert rescore.add_timelines([runs], again) == [(runs, 2, 1)]
    a, b = (json.loads(x) for x in runs.read_text().splitlines())
    assert a == {**row, **timeline} and b == other  # the row's own runtime and regret AUC are kept
    assert rescore.add_timelines([runs], again) == [(runs, 2, 0)]


def test_retime_replaces_an_earlier_rules_timeline_only_from_the_same_study(tmp_path):
    """rescore --retime-from: a row timed by an earlier export-timeline rule gets the timeline, the rule's
    name and every GPU-hour figure from a rerun timed by today's rule, only where every other key (the export
    first) agrees; a row already timed by today's rule, or a rerun timed by another, changes nothing."""
    row = {"scenario": "s", "truth_seed": 1000, "truth_family": "structural", "strategy": "autotune",
           "study_seed": 0, "exported_flags": {"x": 1}, "regret": 0.01, "runtime_s": {"study": 100.0},
           "export_timeline": [[1.0, {"x": 2}], [3.0, {"x": 1}]], "gpu_hours_to_2pct": 1.0,
           "gpu_hours_to_2pct_frac": 0.1, "gpu_hours_to_2pct_stable": 3.0, "gpu_hours_to_2pct_stable_frac": 0.3,
           "regret_auc": 0.3, "gpu_hours_to_2pct_space": 1.0, "gpu_hours_to_2pct_stable_space": 3.0,
           "gpu_hours_to_2pct_stable_frac_space": 0.3, "regret_auc_space": 0.31}
    timing = {"export_timeline": [[3.0, {"x": 1}]], "timeline_rule": rescore.score.TIMELINE_RULE,
              "gpu_hours_to_2pct": 3.0, "gpu_hours_to_2pct_frac": 0.3, "gpu_hours_to_2pct_stable": 3.0,
              "gpu_hours_to_2pct_stable_frac": 0.3, "regret_auc": 0.2, "gpu_hours_to_2pct_space": 3.0,
              "gpu_hours_to_2pct_stable_space": 3.0, "gpu_hours_to_2pct_stable_frac_space": 0.3,
              "regret_auc_space": 0.21}
    rerun = {**row, **timing, "runtime_s": {"study": 50.0}}
    runs, again = tmp_path / "runs.jsonl", tmp_path / "again.jsonl"
    runs.write_text(json.dumps(row) + "\n")
    before = runs.read_text()
    again.write_text(json.dumps({**rerun, "exported_flags": {"x": 2}}) + "\n")  # another study
    with pytest.raises(SystemExit, match="differs from .* in 'exported_flags'"):
        rescore.add_timelines([runs], again, retime=True)
    assert runs.read_text() == before
    again.write_text(json.dumps({**rerun, "timeline_rule": "another"}) + "\n")  # not timed by today's rule
    assert rescore.add_timelines([runs], again, retime=True) == [(runs, 1, 0)]
    assert rescore.add_timelines([runs], again) == [(runs, 1, 0)]  # --timelines-from: the row has a timeline
    again.write_text(json.dumps(rerun) + "\n")
    assert rescore.add_timelines([runs], again, retime=True) == [(runs, 1, 1)]
    assert json.loads(runs.read_text()) == {**row, **timing}  # the row's own runtime kept
    assert rescore.add_timelines([runs], again, retime=True) == [(runs, 1, 0)]

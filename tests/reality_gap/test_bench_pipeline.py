"""The results grid's scheduler: every case runs once, after its truth, and a killed grid resumes.

The brute force and the cases are replaced by recorders (a brute force takes minutes); what
is tested is the order and the bookkeeping of ``bench.Pipeline`` on a real thread pool.
"""

from __future__ import annotations

import argparse
import json
import threading
from concurrent.futures import ThreadPoolExecutor

from experiments.reality_gap import bench

EVENTS: list[tuple] = []
LOCK = threading.Lock()


def _fake_truth(args):
    with LOCK:
        EVENTS.append(("truth", *args[:2]))
    return args


def _fake_case(args):
    scenario, seed, strategy, calibrate, study_seed, family = args
    with LOCK:
        EVENTS.append(("case", scenario, seed, strategy, study_seed))
    return {"scenario": scenario, "truth_seed": seed, "strategy": strategy, "study_seed": study_seed, "trials": 30,
            "truth_family": family, "calibrate": calibrate, "within_2pct": True, "regret": 0.0,
            "gpu_hours_to_2pct": 1.0, "runtime_s": {"total": 0.0}}


class _Space:
    class study:  # noqa: N801 - mimics SearchSpace.study
        trials = 30


def _args(tmp_path, **over) -> argparse.Namespace:
    base = dict(strategies=["random", "autotune"], calibrate_strategies=["autotune"], jobs=2, max_load=99.0,
                out=tmp_path / "runs.jsonl", truths_only=False, study_seeds=[0, 1], truth_family="structural")
    return argparse.Namespace(**{**base, **over})


def _run(monkeypatch, args, truths, cached=frozenset(), done=frozenset()):
    EVENTS.clear()
    monkeypatch.setattr(bench, "_truth", _fake_truth)
    monkeypatch.setattr(bench, "_case", _fake_case)
    monkeypatch.setattr(bench, "ready", lambda sc, s, family: (sc, s) in cached)  # brute force and refinement
    monkeypatch.setattr(bench, "scenario_space", lambda sc: _Space)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        bench.Pipeline(pool, args, set(done)).run(truths)


def test_every_case_runs_once_after_its_truth(monkeypatch, tmp_path):
    args = _args(tmp_path)
    truths = [("a", 0), ("b", 0), ("a", 1)]
    _run(monkeypatch, args, truths, cached={("b", 0)})
    assert [e for e in EVENTS if e[0] == "truth"] == [("truth", "a", 0), ("truth", "a", 1)]  # b/0 was cached
    for sc, seed in truths:
        cases = [i for i, e in enumerate(EVENTS) if e[:3] == ("case", sc, seed)]
        assert len(cases) == 4  # two strategies x two study seeds
        if (sc, seed) != ("b", 0):
            assert EVENTS.index(("truth", sc, seed)) < min(cases)
    rows = [json.loads(x) for x in args.out.read_text().splitlines()]
    assert sorted((r["scenario"], r["truth_seed"], r["strategy"], r["study_seed"]) for r in rows) == sorted(
        (sc, s, st, m) for sc, s in truths for st in ("random", "autotune") for m in (0, 1))
    assert all(r["calibrate"] == (r["strategy"] == "autotune") for r in rows)


def test_done_cases_are_not_run_again_and_truths_only_runs_no_case(monkeypatch, tmp_path):
    args = _args(tmp_path)
    _run(monkeypatch, args, [("a", 0)], cached={("a", 0)}, done={("structural", "a", 0, "random", 0, 30)})
    assert sorted(e for e in EVENTS if e[0] == "case") == [
        ("case", "a", 0, "autotune", 0), ("case", "a", 0, "autotune", 1), ("case", "a", 0, "random", 1)]

    _run(monkeypatch, _args(tmp_path, truths_only=True, out=tmp_path / "other.jsonl"), [("a", 0), ("b", 1)])
    assert EVENTS and all(e[0] == "truth" for e in EVENTS)
    assert not (tmp_path / "other.jsonl").exists()

"""The report's paired ablation table compares an ablation with autotune on the same cases only."""

from __future__ import annotations

from experiments.reality_gap import report as R


def _run(strategy: str, scenario: str, seed: int, *, within: bool, regret: float, oom: float = 0.0,
         to2: float | None = 1.0, wrongly: int = 0) -> dict:
    return {"strategy": strategy, "scenario": scenario, "truth_seed": seed, "within_2pct": within,
            "regret": regret, "true_oom_per_1k": oom, "gpu_hours_to_2pct": to2, "wrongly_rejected": wrongly,
            "wasted_launches": 0, "rejected": 1, "exported_flags": {}, "true_main": 1.0, "runtime_s": {"study": 1.0}}


def test_ablation_is_compared_on_its_own_cases_only():
    rows = [
        _run("autotune", "a", 0, within=True, regret=0.01),
        _run("autotune", "a", 1, within=True, regret=0.0),
        # autotune's third case has no ablation run: it must not count on autotune's side.
        _run("autotune", "b", 0, within=False, regret=0.3, oom=5.0, to2=None),
        _run("autotune-noscreen", "a", 0, within=False, regret=0.05, to2=None, wrongly=2),
        _run("autotune-noscreen", "a", 1, within=True, regret=0.01, oom=3.0),
    ]
    table = R.paired_ablations(rows)
    assert len(table) == 3  # header, rule, one ablation
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    assert cells[:2] == ["noscreen", "2"]
    assert cells[2] == "1 / 2"  # within 2 %: off / autotune, over the two paired cases
    assert cells[4] == "1 / 0"  # exports over the OOM limit (autotune's b/0 is not paired)
    assert cells[5] == "never / 1.00"  # GPU-h to 2 %: the median of {never, 1.0} is never
    assert cells[6] == "2 / 0"


def test_no_ablation_runs_gives_only_the_header():
    rows = [_run("autotune", "a", 0, within=True, regret=0.0), _run("grid", "a", 0, within=True, regret=0.0)]
    assert len(R.paired_ablations(rows)) == 2

"""gmu_edge.py: development seeds only, and its counts are the truth grid's own (no study runs)."""

from __future__ import annotations

from experiments.reality_gap import gmu_edge as G
from experiments.reality_gap.truth import Truth
from experiments.scenarios.ground_truth import feasible
from tests.reality_gap.test_baselines import TINY


def test_it_refuses_evaluation_seeds(capsys):
    assert G.main(["--scenarios", "small-highconc", "--truth-seeds", "1000"]) == 2
    err = capsys.readouterr().err
    assert "--truth-seeds 1000: development seeds only" in err and "Traceback" not in err


def test_a_row_splits_the_grid_at_the_edge_and_prices_the_cap(tmp_path):
    path = tmp_path / "tiny-edge.yaml"
    path.write_text(TINY)  # gmu 0.88 and 0.92
    row = G.edge_row(str(path), 0, 0.9)
    truth = Truth.load(str(path), 0, jobs=1)
    started = [r for r in truth.grid.rows if r["started"]]
    high = [r for r in started if r[G.GMU] >= 0.9]
    assert row["started_at_edge"] == len(high) and row["started_below_edge"] == len(started) - len(high)
    assert row["over_limit_at_edge"] == sum(1 for r in high if not feasible(r, truth.main))
    assert row["cap_regret"] >= 0.0 and (row["cap_regret"] == 0.0) == (row["best_gmu"] < 0.9)
    assert row["note"] == "SIMULATED"


def test_a_space_that_does_not_search_gmu_is_one_line(tmp_path, capsys):
    path = tmp_path / "tiny-nogmu.yaml"
    path.write_text(TINY.replace("  gpu_memory_utilization: {type: float, low: 0.88, high: 0.92, step: 0.04}\n", ""))
    assert G.main(["--scenarios", str(path), "--truth-seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert "gpu_memory_utilization is not searched there" in err and "Traceback" not in err


def test_the_table_sums_each_scenarios_rows():
    rows = [{"scenario": "s", "edge": 0.95, "started_at_edge": 10, "over_limit_at_edge": 4, "started_below_edge": 20,
             "over_limit_below_edge": 1, "best_gmu": b, "cap_regret": c} for b, c in ((0.96, 0.03), (0.92, 0.0))]
    lines = G.table(rows)
    assert lines[2] == "| s | 2 | 8/20 (40 %) | 2/40 (5 %) | 1 | 1 | 3.0 % |"


def test_export_counts_split_autotune_exports_at_the_edge_on_development_truths_only():
    def row(gmu, oom, strategy="autotune", truth_seed=0):
        return {"strategy": strategy, "truth_seed": truth_seed, "scenario": "s", "true_oom_per_1k": oom,
                "exported_flags": {G.GMU: gmu}}
    rows = [row(0.96, 5.0), row(0.96, 0.0), row(0.9, 0.0), row(0.9, 3.0, strategy="tpe"), row(0.96, 9.0, truth_seed=1000)]
    assert G.export_counts(rows, 0.95) == {"at_edge": 2, "over_limit_at_edge": 1, "below_edge": 1,
                                           "over_limit_below_edge": 0, "over_limit_by_scenario": {"s": 1}}


def test_the_guard_table_pairs_the_guard_with_autotune_on_development_cases_only():
    def row(strategy, study_seed, gmu, regret, oom=0.0, truth_seed=0):
        return {"strategy": strategy, "scenario": "s", "truth_seed": truth_seed, "study_seed": study_seed,
                "exported_flags": {G.GMU: gmu}, "regret": regret, "true_oom_per_1k": oom,
                "within_2pct": regret <= 0.02 and oom <= 1.0}
    rows = [row("autotune", 0, 0.96, 0.0, oom=3.0), row("autotune-edge", 0, 0.93, 0.01),  # the guard's catch
            row("autotune", 1, 0.96, 0.0), row("autotune-edge", 1, 0.92, 0.05),  # its cost: +5 %
            row("autotune", 2, 0.90, 0.01), row("autotune-edge", 2, 0.90, 0.01),
            row("autotune", 3, 0.90, 0.01),  # unpaired
            row("autotune", 0, 0.96, 0.0, oom=9.0, truth_seed=1000), row("autotune-edge", 0, 0.90, 0.0, truth_seed=1000)]
    head, rule, line = G.guard_table(rows, 0.95)
    assert line == "| s | 3 | 2 / 2 | 1 / 0 | 2 / 0 | 2 | +5.0 % |"

"""experiments/reality_gap/resolution.py: how often a few runs order two configs right, at a truth's noise."""

from __future__ import annotations

import itertools
import random

from experiments.reality_gap import resolution as R


def test_a_gap_far_beyond_the_spread_is_always_ordered_and_a_tie_is_a_coin():
    rng = random.Random(0)
    fast, slow = [10.0, 10.2, 9.9, 10.1], [13.0, 12.8, 13.1, 12.9]
    assert R.ordered_right(fast, slow, 3, maximize=False, rng=rng) == 1.0
    assert R.ordered_right(slow, fast, 3, maximize=True, rng=rng) == 1.0  # a throughput: higher is better
    same = [10.0, 11.0, 9.0, 10.5, 9.5]
    assert 0.3 < R.ordered_right(same, same, 1, maximize=False, rng=rng) < 0.7
    # one outlier start in three moves the mean past a 10 % gap, not the median
    fast, slow = [10.0] * 5 + [40.0], [11.0] * 6
    assert R.ordered_right(fast, slow, 3, False, rng, R.statistics.median) > R.ordered_right(fast, slow, 3, False, rng)


def test_more_runs_are_needed_the_wider_a_run_spreads():
    assert R.runs_needed(0.0) == 0
    assert R.runs_needed(0.05) == 34  # 2 x (1.645 x 0.05 / 0.02)^2 = 33.8
    assert R.runs_needed(0.03) < R.runs_needed(0.05) < R.runs_needed(0.08)


def test_a_development_truth_is_measured_near_its_best_and_an_evaluation_truth_refused(capsys):
    """A committed development truth, a few configs and runs: the configs are the best and others
    within 10 % of it, and every pair is counted once in one gap bin for each number of runs."""
    row = R.case("small-highconc", 0, configs=4, runs=4)
    assert row["note"] == "SIMULATED" and 2 <= row["configs"] <= 4
    assert 0 < row["cv"] < 1 and row["runs_needed_2pct"] >= 1
    assert 0 <= row["spread_of_values_pct"] <= 100 * R.NEAR + 1e-9
    pairs = row["configs"] * (row["configs"] - 1) // 2
    for key, n in itertools.product(("ordered_right", "ordered_right_median"), map(str, R.RUNS_PER_MEAN)):
        assert sum(b[n][1] for b in row[key].values()) == pairs
        assert all(b[n][0] is None or 0 <= b[n][0] <= 1 for b in row[key].values())
    table = R.table([row])
    assert table[2].startswith("| small-highconc (0) |") and table[2].count("|") == table[0].count("|")
    assert R.main(["--scenario", "small-highconc", "--truth-seeds", "1000"]) == 2
    assert "development seeds only" in capsys.readouterr().err

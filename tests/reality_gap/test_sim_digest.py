"""The simulator's output digest (experiments/reality_gap/sim_digest.py) is what a speed-up is
checked with, so it must be repeatable and must see a change in the simulation."""

from __future__ import annotations

from experiments.reality_gap import sim_digest


def test_digest_is_repeatable_and_depends_on_the_runs() -> None:
    first = sim_digest.scenario_digest("small-highconc", 150, (0,))
    assert first == sim_digest.scenario_digest("small-highconc", 150, (0,))
    assert first[0] == 2  # two grid configs at this step
    assert sim_digest.scenario_digest("small-highconc", 150, (1,)) != first  # another truth, other results

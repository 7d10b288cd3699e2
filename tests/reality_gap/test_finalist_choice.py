"""The finalist experiment (experiments/reality_gap/finalist_choice.py): development seeds only, and
its GP shrinks a lucky single run toward its neighbours (what it is there to measure). No study runs."""

from __future__ import annotations

import numpy as np

from experiments.reality_gap import finalist_choice as F


def test_it_refuses_evaluation_seeds(capsys):
    """Choosing the finalist rule on evaluation truths would be developing on them (seeds.py)."""
    assert F.main(["--scenario", "trace-replay", "--truth-seeds", "0,1000"]) == 2
    err = capsys.readouterr().err
    assert "--truth-seeds 1000: development seeds only" in err and "Traceback" not in err


def test_the_posterior_pulls_a_lucky_run_back_toward_its_neighbours():
    rng = np.random.default_rng(0)
    x = np.linspace(0.0, 1.0, 40)[:, None]
    trend = 0.3 * (x[:, 0] - 0.5) ** 2  # a smooth log-p99 landscape, best in the middle
    y = trend + rng.normal(0.0, 0.05, len(x))
    lucky = 5  # far from the best, measured 25 % better than it is
    y[lucky] = trend[lucky] - 0.25
    post = F.fitted_posterior(x, y, F.RAW_STRETCH)
    assert np.argmin(y) == lucky  # the single runs would race it first
    assert np.argmin(post) != lucky and abs(post[lucky] - trend[lucky]) < abs(y[lucky] - trend[lucky]) / 2
    assert np.argmin(post) in range(14, 26)  # the posterior's first is near the true best


def test_the_likelihood_prefers_the_true_run_spread():
    rng = np.random.default_rng(1)
    x = rng.uniform(0.0, 1.0, (60, 2))
    y = 0.1 * np.sin(3 * x[:, 0]) + rng.normal(0.0, 0.12, 60)
    fits = {sd: F.log_likelihood(F.ResidualGP.fit(x, y, [1.0] * 60, sd)) for sd in F.RUN_SDS}
    assert max(fits, key=fits.get) in (0.08, 0.12, 0.16)


def test_the_union_keeps_the_rules_best_and_adds_the_models_first_other_pick():
    a, b, c, d = (object() for _ in range(4))
    assert F.union([a, b, c], [b, d, a], 3) == [a, b, d]  # b is the rule's already: the model's next, d
    assert F.union([a], [a], 3) == [a]  # nothing else to add: no padding

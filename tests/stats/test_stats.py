"""autotune.study.analysis.stats against published values, and the intervals' coverage with known truth.

The coverage tests draw repeated "studies" from distributions whose true means are known and
count how often the 95 % interval holds the truth: it must in 90-99 % of them (a seeded
draw, so the count is fixed; the band is what an honest 95 % interval gives with this many
draws, and an interval that ignored the t-quantile or the pooling would fall outside it).
"""

from __future__ import annotations

import math
import random

import pytest

from autotune.study.analysis.stats import (
    beta_cdf,
    beta_quantile,
    center_of,
    clopper_pearson_upper,
    mean_interval,
    pooled_relative_sd,
    t_cdf,
    t_quantile,
    trials_needed,
    with_prior_sd,
)


@pytest.mark.parametrize(("df", "q"), [
    # Student t, two-sided 95 % (p = 0.975); any statistics table.
    (1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (6, 2.4469), (10, 2.2281), (30, 2.0423), (1000, 1.9623),
])
def test_t_quantile_matches_the_tables(df, q):
    assert t_quantile(0.975, df) == pytest.approx(q, abs=1e-4)
    assert t_cdf(q, df) == pytest.approx(0.975, abs=1e-5)
    assert t_quantile(0.025, df) == pytest.approx(-q, abs=1e-4)


def test_t_one_sided_and_beta_values():
    assert t_quantile(0.95, 4) == pytest.approx(2.1318, abs=1e-4)
    assert t_quantile(0.95, 2) == pytest.approx(2.9200, abs=1e-4)
    assert beta_cdf(0.5, 2, 2) == pytest.approx(0.5)
    assert beta_cdf(0.3, 1, 1) == pytest.approx(0.3)
    assert beta_cdf(0.2, 2, 3) == pytest.approx(1 - (1 - 0.2) ** 3 * (1 + 3 * 0.2), abs=1e-12)  # closed form
    assert beta_quantile(beta_cdf(0.37, 3.5, 7.0), 3.5, 7.0) == pytest.approx(0.37, abs=1e-9)


@pytest.mark.parametrize(("events", "n", "level", "upper"), [
    (0, 1000, 0.95, 0.0029912),  # the example: 0 of 1000 shows only <= ~3 per 1000
    (0, 3000, 0.95, 0.0009981),  # three runs of 1000 requests: <= 1 per 1000 is shown
    (1, 1000, 0.95, 0.0047350),
    (0, 10, 0.95, 0.2588656),  # 1 - 0.05^(1/10)
    (5, 100, 0.975, 0.1128349),  # upper end of R's binom.test(5, 100) two-sided 95 % interval
    (10, 10, 0.95, 1.0),
])
def test_clopper_pearson_matches_known_binomial_values(events, n, level, upper):
    assert clopper_pearson_upper(events, n, level) == pytest.approx(upper, rel=1e-4)


def test_clopper_pearson_lower_end_by_symmetry():
    # binom.test(5, 100): 95 % CI [0.01643, 0.11284]; the lower end is 1 - upper of the complement.
    assert 1 - clopper_pearson_upper(95, 100, 0.975) == pytest.approx(0.016432, rel=1e-3)


def test_requests_needed_solves_the_bound_for_n():
    n = trials_needed(0, 0.001)
    assert n == 2995  # ln(0.05) / ln(0.999) = 2994.2
    assert clopper_pearson_upper(0, n) <= 0.001 < clopper_pearson_upper(0, n - 1)
    n1 = trials_needed(1, 0.001)
    assert clopper_pearson_upper(1, n1) <= 0.001 < clopper_pearson_upper(1, n1 - 1)
    assert trials_needed(0, 0.0) is None


def test_one_run_has_no_interval_of_its_own_but_borrows_a_pooled_spread():
    alone = mean_interval([10.0])
    assert not alone.known and alone.low == alone.high == 10.0
    borrowed = mean_interval([10.0], rel_sd=0.03, df=6)
    assert borrowed.known
    assert borrowed.high == pytest.approx(10.0 * (1 + 2.4469 * 0.03), rel=1e-4)


def test_pooled_spread_is_the_relative_sd_of_equal_spread_groups():
    sd, df = pooled_relative_sd([[99.0, 101.0], [198.0, 202.0], [5.0]])
    assert df == 2
    assert sd == pytest.approx(math.sqrt(2 * 0.01**2), rel=1e-9)


def test_a_spread_from_few_repeats_is_shrunk_toward_the_assumed_one():
    assert with_prior_sd(math.nan, 0, 0.05) == 0.05  # no repeats: the assumption
    assert with_prior_sd(0.0, 1, 0.05) == pytest.approx(0.05 * math.sqrt(2 / 3))  # one lucky pair does not zero it
    assert with_prior_sd(0.2, 2, 0.05) == pytest.approx(math.sqrt((0.2**2 + 0.05**2) / 2))
    assert with_prior_sd(0.2, 1000, 0.05) == pytest.approx(0.2, rel=0.01)  # many: their own


def _coverage(rng: random.Random, studies: int, configs: int, runs: int, cv: float, pooled: bool) -> float:
    """Share of configs whose interval holds its true mean, over ``studies`` simulated studies.

    Each config has its own true mean (log-uniform over 10-100 s: p99 latencies of very
    different configs) and log-normal run-to-run noise of the same relative size, the model
    autotune's pooling assumes.
    """
    covered = total = 0
    s = math.sqrt(math.log(1 + cv * cv))
    for _ in range(studies):
        truths = [math.exp(rng.uniform(math.log(10), math.log(100))) for _ in range(configs)]
        # Noise factor exp(N(-s^2/2, s)) has mean 1: the truth is the config's mean.
        groups = [[t * math.exp(rng.gauss(-s * s / 2, s)) for _ in range(runs)] for t in truths]
        sd, df = pooled_relative_sd(groups) if pooled else (math.nan, 0)
        for t, g in zip(truths, groups, strict=True):
            i = mean_interval(g, sd, df)
            covered += i.low <= t <= i.high
            total += 1
    return covered / total


def test_own_interval_covers_the_true_mean_95_percent_of_the_time():
    cov = _coverage(random.Random(11), studies=600, configs=1, runs=3, cv=0.07, pooled=False)
    assert 0.90 <= cov <= 0.99, cov


def test_pooled_interval_covers_the_true_mean_95_percent_of_the_time():
    # A study's finalists: 3 configs of 3 runs, ~3 % noise (the simulator's), pooled (df 6).
    cov = _coverage(random.Random(12), studies=300, configs=3, runs=3, cv=0.03, pooled=True)
    assert 0.90 <= cov <= 0.99, cov
    # Once-measured configs next to them borrow the spread: still 95 %.
    rng = random.Random(13)
    hits = 0
    for _ in range(600):
        t = 30.0
        finalists = [[t * math.exp(rng.gauss(0, 0.03)) for _ in range(3)] for _ in range(3)]
        sd, df = pooled_relative_sd(finalists)
        single = t * math.exp(rng.gauss(0, 0.03))
        i = mean_interval([single], sd, df)
        hits += i.low <= t <= i.high
    assert 0.90 <= hits / 600 <= 0.99, hits / 600


def test_clopper_pearson_bound_holds_the_true_rate_at_least_95_percent_of_the_time():
    rng = random.Random(14)
    for p in (0.0005, 0.002, 0.01):
        held = sum(clopper_pearson_upper(sum(rng.random() < p for _ in range(1000)), 1000) >= p for _ in range(400))
        assert 0.95 <= held / 400 <= 1.0, (p, held)


def test_the_median_center_ignores_one_outlier_run_among_three():
    runs = [30.0, 30.3, 42.0]  # one server start 40 % slow
    assert center_of(runs) == pytest.approx(34.1)
    assert center_of(runs, "median") == 30.3
    assert center_of([30.0, 42.0], "median") == 36.0  # two runs: no median apart from the mean
    m, med = mean_interval(runs, 0.05, 8), mean_interval(runs, 0.05, 8, center="median")
    assert med.mean == 30.3 and med.high - med.low == pytest.approx((m.high - m.low) * 30.3 / 34.1)

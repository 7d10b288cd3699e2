"""The statistics behind "what the data supports": intervals of means, exact binomial bounds.

Pure math on floats (no Optuna, no NumPy needed). SciPy is not a dependency, so the two
distributions this needs, Student's t and the beta distribution, are computed here from the
regularized incomplete beta function (Numerical Recipes' continued fraction, by Lentz's
method) and inverted by bisection; tests/stats checks them against published values.

Two estimates, each chosen for what autotune measures (docs/export.md explains them to
users):

* **Mean of a metric over runs** (p99 latency, throughput, ...): Student's t interval.
  Runs of one config on the same fixed benchmark differ by the server start's luck (a few %
  of latency), so the spread is estimated from the runs themselves. With 2-3 runs per
  config a config's own spread is itself very uncertain (Student t at 2 degrees of freedom
  multiplies it by 4.3), so :func:`pooled_relative_sd` pools the *relative* spread over
  every config of the study measured more than once, assuming run-to-run variation is a
  similar percentage for every config (true of the simulator's per-start speed factor and
  of the few-% noise reported on GPUs). Not a bootstrap: resampling 3 values gives only 10
  distinct resamples and an interval never wider than their range, which misses the true
  mean far more often than 5 % of the time.
* **OOMs per request**: an exact (Clopper-Pearson) one-sided upper bound over every request
  served, because OOMs are rare events counted out of a known number of trials, where a
  normal approximation says "0 OOMs, so at most 0" and is wrong.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

LEVEL = 0.95  # confidence of every interval and bound autotune reports


# --- distributions ------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """Regularized incomplete beta I_x(a, b): P(X <= x) for X ~ Beta(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    # The continued fraction converges fast for x < (a + 1) / (a + b + 2); use symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _bisect(f, lo: float, hi: float, target: float, iters: int = 200) -> float:
    """x in [lo, hi] with increasing f(x) == target."""
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def beta_quantile(p: float, a: float, b: float) -> float:
    """x with I_x(a, b) = p."""
    return _bisect(lambda x: beta_cdf(x, a, b), 0.0, 1.0, p)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * beta_cdf(df / (df + t * t), df / 2.0, 0.5)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """t with P(T <= t) = p (0.5 < p < 1 is the usual case; symmetric below)."""
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    # x = df / (df + t^2) solves I_x(df/2, 1/2) = 2 (1 - p); t = sqrt(df (1 - x) / x).
    x = _bisect(lambda y: beta_cdf(y, df / 2.0, 0.5), 0.0, 1.0, 2.0 * (1.0 - p))
    return math.sqrt(df * (1.0 - x) / x) if x > 0 else math.inf


# --- counts: OOMs out of requests --------------------------------------------------------
def clopper_pearson_upper(events: int, trials: int, level: float = LEVEL) -> float:
    """Exact one-sided upper confidence bound on a rate from ``events`` out of ``trials``.

    The rate p at which seeing ``events`` or fewer has probability 1 - level. For 0 events
    this is 1 - (1 - level)^(1/trials): 0 of 1000 gives 0.002991 at 95 %.
    """
    if trials <= 0:
        return 1.0
    if events >= trials:
        return 1.0
    if events == 0:
        return 1.0 - (1.0 - level) ** (1.0 / trials)
    return beta_quantile(level, events + 1, trials - events)


def trials_needed(events: int, limit: float, level: float = LEVEL) -> int | None:
    """The fewest trials with no further event (``events`` so far) whose upper bound is
    <= ``limit``; None when no number of trials can show it (limit <= 0)."""
    if limit <= 0:
        return None
    if limit >= 1:
        return max(events, 1)
    # The bound falls as trials grow; find the first n that meets the limit.
    lo = events + 1
    hi = lo
    while clopper_pearson_upper(events, hi, level) > limit:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if clopper_pearson_upper(events, mid, level) <= limit:
            hi = mid
        else:
            lo = mid + 1
    return lo


# --- means of runs ------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` runs and its confidence interval (``low``/``high`` equal the mean
    when there is nothing to estimate the spread from)."""

    mean: float
    low: float
    high: float
    n: int
    known: bool  # False: one run and no spread to borrow: the interval is the value alone

    @property
    def half_width(self) -> float:
        return 0.5 * (self.high - self.low)


def relative_deviations(values: Sequence[float]) -> tuple[float, int]:
    """(sum of squared relative deviations from the mean, degrees of freedom) of one
    config's runs; (0, 0) when the spread cannot be told (one run, or a mean of 0)."""
    n = len(values)
    m = sum(values) / n if n else 0.0
    if n < 2 or m == 0 or not math.isfinite(m):
        return 0.0, 0
    return sum((v / m - 1.0) ** 2 for v in values), n - 1


def pooled_relative_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(pooled relative standard deviation, its degrees of freedom) over configs' runs:
    the run-to-run spread as a fraction of the mean, shared by every config."""
    ss, df = 0.0, 0
    for g in groups:
        s, d = relative_deviations(g)
        ss, df = ss + s, df + d
    return (math.sqrt(ss / df), df) if df else (math.nan, 0)


def pooled_log_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """(pooled standard deviation of the logs, its degrees of freedom) over groups of one
    config's positive measurements: one run's multiplicative spread; (NaN, 0) with no repeats."""
    ss, df = 0.0, 0
    for g in groups:
        logs = [math.log(v) for v in g if v > 0]
        if len(logs) > 1:
            m = sum(logs) / len(logs)
            ss += sum((v - m) ** 2 for v in logs)
            df += len(logs) - 1
    return (math.sqrt(ss / df), df) if df else (math.nan, 0)


SPREAD_PRIOR_DF = 2  # degrees of freedom an assumed run-to-run spread is worth against measured repeats


def with_prior_sd(sd: float, df: int, prior_sd: float, prior_df: int = SPREAD_PRIOR_DF) -> float:
    """A pooled spread ``sd`` on ``df`` degrees of freedom, shrunk toward ``prior_sd`` worth
    ``prior_df`` of them (the scaled-inverse-chi-squared posterior's point estimate). One
    pair of runs is one degree of freedom: its spread is under half the true one in 38 %
    of draws, and a margin set from it alone would stop configs as good as the front."""
    if not df or math.isnan(sd):
        return prior_sd
    return math.sqrt((prior_df * prior_sd ** 2 + df * sd ** 2) / (prior_df + df))


def center_of(values: Sequence[float], center: str = "mean") -> float:
    """The mean of ``values``, or with ``center="median"`` their median from three values up.
    The median is the robust choice when some server starts are outliers (a run 10-50 % slow,
    now and then): one such run among three moves the mean by a third of its excess and the
    median not at all. Two values have no median apart from their mean."""
    if center_used(len(values), center) == "median":
        return statistics.median(values)
    return sum(values) / len(values)


def center_used(n: int, center: str = "mean") -> str:
    """What :func:`center_of` takes for ``n`` values: "median" where asked and ``n`` >= 3, else "mean"."""
    return "median" if center == "median" and n >= 3 else "mean"


def mean_interval(values: Sequence[float], rel_sd: float = math.nan, df: int = 0,
                  level: float = LEVEL, center: str = "mean") -> Interval:
    """Two-sided ``level`` Student-t interval of the mean of ``values``, with the relative
    spread ``rel_sd`` on ``df`` degrees of freedom (pooled); without one, the values' own.
    ``center="median"`` centres it on :func:`center_of`'s median instead, with the same width
    (the field is still called ``mean``: the value configs are ranked by)."""
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, False)
    m = center_of(values, center)
    if df <= 0 or math.isnan(rel_sd):
        own_ss, df = relative_deviations(values)
        rel_sd = math.sqrt(own_ss / df) if df else math.nan
    if df <= 0:
        return Interval(m, m, m, n, False)
    half = t_quantile(0.5 + level / 2.0, df) * rel_sd * abs(m) / math.sqrt(n)
    return Interval(m, m - half, m + half, n, True)

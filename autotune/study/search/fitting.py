"""Bounded, regularised least squares in log space: how autotune fits its model's constants.

The simulator's uncertain constants (:class:`autotune.deploy.SimProfile`) are scales whose
uncertainty is a factor, each with a documented plausible range. So they are fitted as
logarithms inside that box, with a weak Gaussian prior around the starting profile: a
direction the measurements cannot see (two constants that only ever appear as a sum) stays
where the prior put it instead of drifting to a corner. Two callers, one fitter: pruning
learns the memory constants from each startup (:mod:`autotune.study.search.pruning`), and
``autotune calibrate`` fits the speed and startup-time constants (:mod:`autotune.calibrate`).

Levenberg-Marquardt with a forward-difference Jacobian and steps projected onto the box:
the problems have at most a dozen unknowns, a residual costs microseconds (the startup
memory model) to a few seconds (simulating every measured config), and numpy is all it
needs (no scipy for one small solver).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autotune.deploy import SimProfile
from autotune.deploy.profile import ranges as profile_ranges

Residuals = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Box:
    """Log-space bounds and prior of the fitted constants (natural logs)."""

    lo: np.ndarray
    hi: np.ndarray
    center: np.ndarray  # prior mean (the starting profile's values)
    sigma: np.ndarray  # prior spread

    def clip(self, x: np.ndarray) -> np.ndarray:
        return np.minimum(np.maximum(x, self.lo), self.hi)

    def prior_residuals(self, x: np.ndarray) -> np.ndarray:
        return (x - self.center) / self.sigma


def profile_box(names: Sequence[str], center: SimProfile, device: str = "gpu") -> Box:
    """The box of ``names``' documented ranges on ``device`` (``gpu``, or ``cpu``: a CPU host's,
    :func:`autotune.deploy.profile.ranges`), with a weak prior around ``center``'s values:
    one standard deviation is half the range, so the data decide every direction they can
    see and the prior only the ones they cannot."""
    ranges = profile_ranges(device)
    lo = np.log([ranges[n][0] for n in names])
    hi = np.log([ranges[n][1] for n in names])
    return Box(lo, hi, np.log([getattr(center, n) for n in names]), (hi - lo) / 2.0)


def logs(profile: SimProfile, names: Sequence[str]) -> np.ndarray:
    return np.log([getattr(profile, n) for n in names])


def with_logs(profile: SimProfile, names: Sequence[str], x: np.ndarray) -> SimProfile:
    """``profile`` with ``names`` set to ``exp(x)``."""
    values: dict[str, Any] = {n: float(math.exp(v)) for n, v in zip(names, x, strict=True)}
    return replace(profile, **values)


@dataclass(frozen=True)
class Fit:
    x: np.ndarray  # fitted log values
    data_residuals: np.ndarray  # the caller's residuals at x
    jacobian: np.ndarray  # d(data residuals)/dx at x
    cost: float  # sum of squares, data and prior
    evaluations: int  # calls of the residual function

    def covariance(self, box: Box, scale: float = 1.0) -> np.ndarray:
        """Linearised posterior covariance of x, with the data residuals' unit scaled by
        ``scale`` (the spread the residuals actually show, when it exceeds the assumed one)."""
        j = self.jacobian / scale
        return np.linalg.inv(j.T @ j + np.diag(1.0 / box.sigma**2))


def jacobian(fun: Residuals, x: np.ndarray, r0: np.ndarray, box: Box, h: float = 0.02,
             kinks: bool = False) -> np.ndarray:
    """Forward differences of step ``h`` (backward at the upper bound).

    ``kinks``: the residuals have kinks (a ``max`` of two memory terms: at a config where
    the two are close, one constant moves the residual only one way). Then both one-sided
    differences are taken and, entry by entry, the smaller: a constant counts as seen by a
    residual only if it moves it both ways, so a fit parked on a kink neither believes it
    pinned that constant nor gets stuck there.
    """
    def side(k: int, step: float) -> np.ndarray:
        xk = x.copy()
        xk[k] += step
        return (fun(xk) - r0) / step

    cols = []
    for k in range(len(x)):
        up, down = x[k] + h <= box.hi[k], x[k] - h >= box.lo[k]
        col = side(k, h if up else -h)
        if kinks and up and down:
            other = side(k, -h)
            col = np.where(np.abs(other) < np.abs(col), other, col)
        cols.append(col)
    return np.stack(cols, axis=1) if cols else np.zeros((len(r0), 0))


def fit(fun: Residuals, box: Box, *, max_iter: int = 30, rtol: float = 1e-5,
        start: tuple[np.ndarray, np.ndarray] | None = None, kinks: bool = False) -> Fit:
    """Minimise ``|fun(x)|^2 + |prior(x)|^2`` over the box from the prior mean. ``start``:
    the residuals and Jacobian there, when the caller has them already (expensive residuals).
    ``rtol``: stop once an iteration lowers the cost by less than this share. ``kinks``: see
    :func:`jacobian`."""
    x = box.center.copy()

    def total(res: np.ndarray, at: np.ndarray) -> float:
        return float(res @ res + np.sum(box.prior_residuals(at) ** 2))

    if start is None:
        r = fun(x)
        jac = jacobian(fun, x, r, box, kinks=kinks)
        evals = 1 + len(x) * (2 if kinks else 1)
    else:
        (r, jac), evals = start, 0
    cost = total(r, x)
    lam = 1e-2
    for _ in range(max_iter):
        p = np.diag(1.0 / box.sigma**2)
        a = jac.T @ jac + p
        g = jac.T @ r + p @ (x - box.center)
        improved = False
        while lam < 1e8:
            step = np.linalg.solve(a + lam * np.diag(np.diag(a)), -g)
            x_new = box.clip(x + step)
            r_new = fun(x_new)
            evals += 1
            c_new = total(r_new, x_new)
            if c_new < cost:
                improved = cost - c_new > rtol * max(cost, 1e-12)
                x, r, cost = x_new, r_new, c_new
                lam = max(lam / 3.0, 1e-7)
                break
            lam *= 4.0
        jac = jacobian(fun, x, r, box, kinks=kinks)
        evals += len(x) * (2 if kinks else 1)
        if not improved:
            break
    return Fit(x, r, jac, cost, evals)

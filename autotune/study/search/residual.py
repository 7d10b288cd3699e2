"""What the model gets wrong, learned from what was measured: a GP on the log residual.

The sweep (sweep.py) ranks every config of the space by a model's prediction, but a model
is wrong in structure, not only in scale: a batch shape it does not see, a kernel that
behaves unlike its curve. So the prediction is the GP's *prior mean* and the GP learns the
residual ``r(x) = log(measured) - log(predicted)`` over the configs measured, with

* a constant mean (one shared scale error, what recalibration would also remove);
* an RBF kernel over the params normalised to [0, 1] (log scale for counts), its length
  and variance chosen by marginal likelihood on a small grid (a handful of points cannot
  support a finer fit, and a grid is deterministic);
* per-config noise ``s^2 / runs``, with ``s`` the log spread of one run estimated from the
  study's own repeats (configs measured more than once), not assumed; with no repeats yet,
  ``DEFAULT_RUN_SD``, and with few, their spread shrunk toward it.

Where it has data it corrects the model; far from data it falls back to the model plus the
constant. Plain numpy, a few dozen points: microseconds, no extra dependency.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.space import SearchSpace
from autotune.space.schema import ParamSpec
from autotune.study.analysis import pooled_log_sd, with_prior_sd

DEFAULT_RUN_SD = 0.05  # log spread of one run before the study has repeats to measure it
LENGTHS = (0.15, 0.25, 0.4, 0.6, 1.0)  # kernel lengths tried, in normalised param units
SCALES = (0.02, 0.05, 0.1, 0.2)  # residual standard deviations tried


def encode(space: SearchSpace, params: Mapping[str, Any]) -> np.ndarray:
    """A config as a point of [0, 1]^d (absent conditional params at 0)."""
    return np.array([_unit(p, params.get(n)) for n, p in space.params.items()], dtype=float)


def _unit(p: ParamSpec, v: Any) -> float:
    if v is None:
        return 0.0
    if p.type == "bool":
        return float(bool(v))
    if p.type == "categorical":
        choices = list(p.choices or [])
        if all(isinstance(c, int | float) and not isinstance(c, bool) and c > 0 for c in choices) and len(choices) > 1:
            lo, hi = math.log(min(choices)), math.log(max(choices))  # type: ignore[arg-type]
            return (math.log(float(v)) - lo) / (hi - lo) if hi > lo else 0.0
        return choices.index(v) / max(len(choices) - 1, 1) if v in choices else 0.0
    lo, hi = float(p.low), float(p.high)  # type: ignore[arg-type]
    if p.log or (p.type == "int" and lo > 0 and hi / lo >= 8):
        lo, hi, v = math.log(lo), math.log(hi), math.log(max(float(v), 1e-12))
    return (float(v) - lo) / (hi - lo) if hi > lo else 0.0


@dataclass(frozen=True)
class ResidualGP:
    """A fitted GP of the log residual; ``predict`` gives its mean and sd at new points."""

    x: np.ndarray  # (n, d)
    r: np.ndarray  # the residuals it was fitted to
    alpha: np.ndarray  # K^-1 (r - mean)
    chol: np.ndarray  # Cholesky factor of K
    mean: float
    length: float
    scale: float
    run_sd: float
    noise: np.ndarray  # each point's noise variance: run_sd^2 over its runs

    @classmethod
    def fit(cls, x: np.ndarray, r: np.ndarray, runs: Sequence[float], run_sd: float) -> ResidualGP:
        """``x``: (n, d) points, ``r``: their mean log residuals, ``runs``: the runs behind
        each (a benchmark stopped early counts as part of one). The grid's most likely GP."""
        fits = cls.fit_grid(x, r, runs, run_sd)
        if not fits:  # cannot happen with a positive noise floor; be safe
            noise = np.array([run_sd ** 2 / max(k, 0.25) for k in runs])
            return cls(x, r, np.zeros(len(r)), np.eye(len(r)), float(np.mean(r)) if len(r) else 0.0, 1.0, 0.1, run_sd,
                       noise)
        return most_likely(fits)

    @classmethod
    def fit_grid(cls, x: np.ndarray, r: np.ndarray, runs: Sequence[float], run_sd: float) -> list[GridFit]:
        """The GP at every (length, scale) of the grid, with its log marginal likelihood."""
        noise = np.array([run_sd ** 2 / max(k, 0.25) for k in runs])
        fits: list[GridFit] = []
        d2 = _sq_dist(x, x)
        ones = np.ones(len(r))
        for length in LENGTHS:
            for scale in SCALES:
                k = scale ** 2 * np.exp(-0.5 * d2 / length ** 2) + np.diag(noise + 1e-10)
                try:
                    chol = np.linalg.cholesky(k)
                except np.linalg.LinAlgError:
                    continue
                # Constant mean by generalised least squares, then the log marginal likelihood.
                ki1 = _solve(chol, ones)
                mean = float(ki1 @ r / (ones @ ki1))
                alpha = _solve(chol, r - mean)
                ll = -0.5 * float((r - mean) @ alpha) - float(np.sum(np.log(np.diag(chol))))
                # The mean integrated out under a flat prior (the restricted likelihood): what
                # weighs one grid point against another when they are averaged (Marginal).
                restricted = ll - 0.5 * math.log(float(ones @ ki1))
                fits.append(GridFit(cls(x, r, alpha, chol, mean, length, scale, run_sd, noise), ll, restricted))
        return fits

    @classmethod
    def prior(cls, d: int, run_sd: float, length: float = 0.4, scale: float = 0.1) -> ResidualGP:
        """The GP before any point: mean 0, spread ``scale`` everywhere (what the sweep assumes
        while fewer than two configs are measured)."""
        return cls(np.zeros((0, d)), np.zeros(0), np.zeros(0), np.zeros((0, 0)), 0.0, length, scale, run_sd, np.zeros(0))

    def believing(self, x: np.ndarray) -> ResidualGP:
        """The same GP (its hyperparameters and constant mean) with the points ``x`` added as if
        measured once each at the GP's own mean there: the kriging believer. The mean elsewhere
        is unchanged; the spread near ``x`` shrinks as it would once their runs land, so a
        confidence bound asked again looks elsewhere."""
        if not len(x):
            return self
        mu, _ = self.predict(x)
        xs, r = np.vstack([self.x, x]), np.concatenate([self.r, mu])
        noise = np.concatenate([self.noise, np.full(len(x), self.run_sd ** 2)])
        k = self.scale ** 2 * np.exp(-0.5 * _sq_dist(xs, xs) / self.length ** 2) + np.diag(noise + 1e-10)
        chol = np.linalg.cholesky(k)
        return ResidualGP(xs, r, _solve(chol, r - self.mean), chol, self.mean, self.length, self.scale, self.run_sd,
                          noise)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mean, sd) of the log residual at the rows of ``x``."""
        if not len(self.x):
            return np.full(len(x), self.mean), np.full(len(x), self.scale)
        ks = self.scale ** 2 * np.exp(-0.5 * _sq_dist(x, self.x) / self.length ** 2)
        mu = self.mean + ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)
        var = np.maximum(self.scale ** 2 - np.sum(v * v, axis=0), 1e-12)
        return mu, np.sqrt(var)


@dataclass(frozen=True)
class GridFit:
    """One grid point's GP and how well it explains the residuals."""

    gp: ResidualGP
    log_likelihood: float  # with the constant mean at its GLS estimate (picks ResidualGP.fit's GP)
    restricted: float  # with the constant mean integrated out (weighs the grid points in Marginal)


def most_likely(fits: Sequence[GridFit]) -> ResidualGP:
    """The GP of the grid point with the highest log marginal likelihood (the first of ties)."""
    return max(fits, key=lambda f: f.log_likelihood).gp


@dataclass(frozen=True)
class Marginal:
    """The residual GP averaged over its hyperparameter grid, each (length, scale) weighted by
    its restricted marginal likelihood (a flat prior over the grid), instead of the single most
    likely one: Snoek, Larochelle and Adams (2012) integrate the hyperparameters out for the same
    reason. A handful of residuals that agree with each other make a small ``scale`` the most
    likely, and the most likely GP then claims to know the model's error everywhere, also on
    planes of the space nothing measured; the average keeps the larger scales in the proportion
    the data cannot rule them out, so an unmeasured plane keeps some of its prior spread.
    ``predict`` gives the mixture's mean and sd; ``believing`` applies to every member."""

    parts: tuple[ResidualGP, ...]
    weights: np.ndarray

    @classmethod
    def of(cls, fits: Sequence[GridFit]) -> Marginal:
        ll = np.array([f.restricted for f in fits])
        w = np.exp(ll - ll.max())
        return cls(tuple(f.gp for f in fits), w / w.sum())

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mus, sds = zip(*(p.predict(x) for p in self.parts), strict=True)
        mu_k, sd_k = np.array(mus), np.array(sds)
        mu = self.weights @ mu_k
        second = self.weights @ (sd_k ** 2 + mu_k ** 2)
        return mu, np.sqrt(np.maximum(second - mu ** 2, 1e-12))

    def believing(self, x: np.ndarray) -> Marginal:
        return Marginal(tuple(p.believing(x) for p in self.parts), self.weights)


def _sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(np.sum(a * a, 1)[:, None] + np.sum(b * b, 1)[None, :] - 2 * a @ b.T, 0.0)


def _solve(chol: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.linalg.solve(chol.T, np.linalg.solve(chol, y))


def run_log_sd(groups: Sequence[Sequence[float]]) -> float:
    """The log spread of one run, pooled over configs measured more than once
    (``DEFAULT_RUN_SD`` when none is), shrunk toward ``DEFAULT_RUN_SD`` while the repeats are
    few (:func:`with_prior_sd`)."""
    return with_prior_sd(*pooled_log_sd(groups), DEFAULT_RUN_SD)

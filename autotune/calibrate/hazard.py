"""The runtime-OOM hazard refitted to a study's own engine deaths: a config's predicted OOM rate.

Three clean runs cannot show a config within an OOM limit of 1 per 1000: in vLLM V1 a runtime
CUDA OOM kills the engine and fails every request in flight, so one death in ten runs is already
over it, and three runs miss that 73 % of the time (docs/export.md, "engine deaths"). The deaths
a study *does* see are elsewhere, at the configs nearer the memory edge. This module reads them
through autotune's own hazard model (:mod:`autotune.sim.hazard`: a step dies when the memory the
start-up profile did not see exceeds what is left): each config's noise-free trajectory under
the model gives every step's log memory margin, and three numbers are refitted by maximum
likelihood over the study's full runs, died or not:

* ``shift``: GiB per GPU of memory the model does not know of (lazy buffers, a larger CUDA context),
  taken from what each step has left (a prompt-logprobs step, whose certain excess already uses
  part of the margin, loses more of what remains);
* ``scale``: a factor on each step's unaccounted use (allocator fragmentation);
* ``spread``: that use's log-normal spread.

The trajectory is a noise-free run that did not die (the first seed whose run walked the whole
benchmark: a death restarts the engine and drops requests, and past the restart limit ends the
run with its steps undrawn). The fitted hazard's death chance of a run, times the requests one death fails (the median over
the study's runs with one death), is the config's predicted OOM rate. It exists only where the
simulator models the space and the study saw at least one death: with none, the data say nothing
the model did not (``math.nan``). The three numbers are not identified each (a shift and a scale
trade against each other); their prediction near the deaths is what is used. Why a refit and not
the model's own constants: on the reality-gap benchmark's development truths, of 11 clean-run
candidates over the limit the model's hazard flagged 1 by this rule, the refitted one 7
(experiments/reality_gap/README.md, "A hazard refitted to the study's deaths").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri

from autotune.deploy import SimProfile
from autotune.engine import unmodelled_flags
from autotune.errors import UserError
from autotune.results import TrialStatus
from autotune.sim.trial import simulate_trial
from autotune.space import SearchSpace
from autotune.study.trials import TrialRecord

# The fit's grid, wide enough for what a real deployment differs by and coarse enough to fit in
# ~0.1 s: a CUDA context, NCCL or cuBLAS buffers up to 2 GiB per GPU the model does not count (or 1 GiB
# it counts too many); fragmentation from an eighth to 32 times the model's; its spread halved to doubled.
SHIFTS_GIB = (-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0)
SCALES = tuple(float(a) for a in np.exp(np.linspace(math.log(1 / 8), math.log(32), 21)))
SPREADS = (0.5, 0.7, 1.0, 1.4, 2.0)  # times the model's frag_sigma
P_FLOOR = 1e-9  # a death chance is kept inside (P_FLOOR, 1 - P_FLOOR) in the likelihood
R_BIN = 0.01  # log-margin resolution of a trajectory (a step's chance moves ~1 % across a bin near the edge)
EXCESS_BIN = 0.01  # GiB: resolution of a step's own excess over the profile (logprobs) in a trajectory
NEGLIGIBLE_Z = 9.0  # a draw at this many spreads from the edge at every grid point never matters (p < 1e-19)


@dataclass(frozen=True)
class Trajectory:
    """A config's noise-free run under the model, as the hazard sees it."""

    log_margin: np.ndarray  # per crash draw: ln(memory left / a step's median unaccounted use)
    steps: np.ndarray  # per crash draw: the identical steps it covers
    margin_gib: float  # memory left per GPU for what the profile did not see (headroom less lazy buffers)
    # per crash draw: what is left of that margin once the step's own certain excess over the
    # profile (prompt or sampler logprobs) is taken; None: no step has one (the margin throughout)
    step_margin_gib: np.ndarray | None = None


@dataclass(frozen=True)
class HazardFit:
    shift_gib: float
    scale: float
    spread: float
    deaths: int  # runs with an engine death the fit read
    runs: int
    oom_per_death_per_1k: float  # requests one death fails, per 1000 (median over runs with one death)

    def death_chance(self, t: Trajectory) -> float:
        return death_chance(t, self.shift_gib, self.scale, self.spread)

    def oom_per_1k(self, t: Trajectory) -> float:
        return self.death_chance(t) * self.oom_per_death_per_1k


def death_chance(t: Trajectory, shift_gib: float, scale: float, spread: float) -> float:
    """One run's chance of an engine death under the hazard with these three numbers."""
    if not len(t.log_margin):
        return 0.0
    if not _margin_left(t, shift_gib):
        return 1.0
    r = _shifted(t, shift_gib)
    with np.errstate(invalid="ignore"):
        p = np.nan_to_num(ndtr(-(r - math.log(scale)) / spread), nan=0.0)
    if np.any(p >= 1.0):
        return 1.0
    return float(-np.expm1(np.sum(t.steps * np.log1p(-p))))


def _margin_left(t: Trajectory, shift_gib: float) -> bool:
    """Whether any memory is left for a step's unaccounted use once ``shift_gib`` more is taken. No
    margin at all (the model's every step then has p = 1) is certain death whatever the shift."""
    return t.margin_gib > max(shift_gib, 0.0)


def _shifted(t: Trajectory, shift_gib: float) -> np.ndarray:
    """Each draw's log margin once ``shift_gib`` more GiB are taken from what is left to *that* step:
    ``ln((m - d) / m)`` added, with ``m`` the step's own margin (a logprobs step has less left, so the
    same GiB cost it more); minus infinity (certain death) where nothing is left."""
    if not shift_gib:
        return t.log_margin
    m = np.broadcast_to(np.asarray(t.margin_gib if t.step_margin_gib is None else t.step_margin_gib, dtype=float),
                        t.log_margin.shape)
    left = (m > shift_gib) & (m > 0)
    ratio = 1.0 - shift_gib / np.where(left, m, 1.0)
    return np.where(left, t.log_margin + np.log(np.where(left, ratio, 1.0)), -np.inf)


def trajectory(space: SearchSpace, flags: Mapping[str, Any]) -> Trajectory | None:
    """The model's crash draws for ``flags`` (autotune's own profile, never engine.sim_profile:
    that is the physics a sim backend runs); None where the model says it does not start or
    cannot model it. Cached: the export rule asks again after every trial."""
    e, profile = space.engine, space.study.strategy.base_profile
    full = {**e.flags, **flags}
    key = (e.model, e.gpu, repr(sorted((e.env or {}).items())), space.workload.model_dump_json(), repr(profile),
           repr(sorted(full.items())))
    if key not in _TRAJECTORIES:
        if len(_TRAJECTORIES) >= MAX_CACHED:
            _TRAJECTORIES.clear()
        _TRAJECTORIES[key] = _simulate(space, full, profile)
    return _TRAJECTORIES[key]


MAX_CACHED = 4096
_TRAJECTORIES: dict[tuple[str, ...], Trajectory | None] = {}


def _simulate(space: SearchSpace, flags: Mapping[str, Any], profile: SimProfile) -> Trajectory | None:
    e = space.engine
    if unmodelled_flags(flags):  # the model cannot speak for a flag it does not model
        return None
    res = None
    # With noise off the seeds differ only in the crash draws: the first seed whose run did not
    # die walks the whole benchmark (a death would restart the engine, drop requests in flight
    # and, past the restart limit, end the run with its remaining steps undrawn).
    for seed in range(CLEAN_RUN_TRIES):
        try:
            res = simulate_trial(e.model, e.gpu, flags, space.workload, seed=seed, env=e.env,
                                 profile=profile.without_noise(), record_draws=True)
        except UserError:
            return None
        if res.status == TrialStatus.STARTUP_FAILED:
            return None
        if not res.crashes:
            break
    assert res is not None
    draws = (res.extra or {}).get("crash_draws") or []
    p = np.array([d[0] for d in draws], dtype=float)
    # Q^-1(p) times the model's spread: +inf where p underflowed to 0, -inf where it is 1.
    z = np.where(p <= 0, np.inf, np.where(p >= 1, -np.inf, -ndtri(np.clip(p, 1e-300, 1.0))))
    margin = float((res.extra or {}).get("mem_gib", {}).get("headroom", math.nan)) - profile.lazy_buffers_gib
    if math.isnan(margin):  # no memory report: nothing to shift against
        return None
    excess = np.array([float(d[2]) for d in draws])
    return _binned(z * profile.frag_sigma, np.array([float(d[1]) for d in draws]), excess, margin,
                   profile.frag_sigma)


CLEAN_RUN_TRIES = 8


def _binned(r: np.ndarray, k: np.ndarray, excess_gib: np.ndarray, margin_gib: float, sigma0: float) -> Trajectory:
    """The draws with their steps summed per ``R_BIN`` of log margin and ``EXCESS_BIN`` of a step's own
    excess, and those no point of the fit's grid gives a chance above 1e-19 a step dropped: a
    benchmark has thousands of draws, the fit scores each config at ~1,000 grid points every time
    the export rule asks."""
    raw = Trajectory(r, k, margin_gib, margin_gib - excess_gib)
    worst = (_shifted(raw, max(SHIFTS_GIB)) if _margin_left(raw, max(SHIFTS_GIB)) else np.full_like(r, -np.inf))
    keep = ~(worst - math.log(max(SCALES)) > NEGLIGIBLE_Z * max(SPREADS) * sigma0)
    r, k, excess_gib = r[keep], k[keep], excess_gib[keep]
    finite = np.isfinite(r)
    bins = np.where(finite, np.round(np.where(finite, r, 0.0) / R_BIN), 0.0)
    excess_bins = np.round(excess_gib / EXCESS_BIN)
    keys, inverse = np.unique(np.stack([bins, np.where(finite, 0.0, r), excess_bins]), axis=1, return_inverse=True)
    steps = np.bincount(inverse.ravel(), weights=k, minlength=keys.shape[1])
    centres = np.where(np.isfinite(keys[1]), keys[0] * R_BIN, keys[1])
    step_margin = margin_gib - keys[2] * EXCESS_BIN
    return Trajectory(centres, steps, margin_gib, None if not np.any(keys[2]) else step_margin)


@dataclass(frozen=True)
class Observed:
    """A config's full runs as the fit reads them."""

    trajectory: Trajectory
    runs: int
    deaths: int


def fit(observed: Sequence[Observed], oom_per_death_per_1k: float, sigma0: float) -> HazardFit | None:
    """The three numbers of highest likelihood over ``observed`` (ties to the model's own hazard,
    scored first); None when no run died (nothing to fit to)."""
    deaths = sum(o.deaths for o in observed)
    if not deaths:
        return None
    spreads = np.array(SPREADS) * sigma0
    ll = np.zeros((len(SHIFTS_GIB), len(SCALES), len(spreads)))
    model_ll = 0.0
    for o in observed:
        p = np.clip(_chance_grid(o.trajectory, spreads), P_FLOOR, 1 - P_FLOOR)
        ll += o.deaths * np.log(p) + (o.runs - o.deaths) * np.log1p(-p)
        q = min(max(death_chance(o.trajectory, 0.0, 1.0, sigma0), P_FLOOR), 1 - P_FLOOR)
        model_ll += o.deaths * math.log(q) + (o.runs - o.deaths) * math.log1p(-q)
    i, j, k = np.unravel_index(int(np.argmax(ll)), ll.shape)
    best = (0.0, 1.0, sigma0) if model_ll >= ll[i, j, k] else (SHIFTS_GIB[i], SCALES[j], float(spreads[k]))
    return HazardFit(*best, deaths, sum(o.runs for o in observed), oom_per_death_per_1k)


def _chance_grid(t: Trajectory, spreads: np.ndarray) -> np.ndarray:
    """:func:`death_chance` at every (shift, scale, spread) of the grid at once, shape
    (shifts, scales, spreads): the fit scores each config ~1,000 times a call."""
    out = np.ones((len(SHIFTS_GIB), len(SCALES), len(spreads)))
    if not len(t.log_margin):
        return np.zeros_like(out)
    log_scales = np.log(np.array(SCALES))[:, None]
    for i, d in enumerate(SHIFTS_GIB):
        if not _margin_left(t, d):
            continue  # the unknown memory takes the whole margin (or there is none): certain death
        r = _shifted(t, d)
        for k, s in enumerate(spreads):
            with np.errstate(invalid="ignore"):
                p = np.nan_to_num(ndtr(-(r[None, :] - log_scales) / s), nan=0.0)
            with np.errstate(divide="ignore"):
                log_survive = np.log1p(-p) @ t.steps
            out[i, :, k] = np.where(np.any(p >= 1.0, axis=1), 1.0, -np.expm1(log_survive))
    return out


def study_fit(groups: Sequence[Sequence[TrialRecord]], space: SearchSpace) -> HazardFit | None:
    """The hazard refitted to a study's configs (each a group of full runs of one config)."""
    observed: list[Observed] = []
    lost: list[tuple[float, float]] = []
    for g in groups:
        runs = [r for r in g if r.started and _counted(r)]
        if not runs or (t := trajectory(space, g[0].flags)) is None:
            continue
        died = [r for r in runs if r.metrics["crashes"] > 0]
        observed.append(Observed(t, len(runs), len(died)))
        # A death fails the requests in flight; a run that died again and again (a crash loop
        # that ends the run) fails the rest too, so one death's toll is read from single deaths
        # (a run that did not count its failed requests tells nothing of the toll).
        lost += [(r.metrics["crashes"], 1000.0 * r.metrics["requests_oom"] / r.metrics["requests"])
                 for r in died if not math.isnan(r.metrics.get("requests_oom", math.nan))]
    if not lost:
        return None
    single = [v for n, v in lost if n == 1]
    per_death = statistics.median(single) if single else statistics.median(v / n for n, v in lost)
    return fit(observed, per_death, space.study.strategy.base_profile.frag_sigma)


def _counted(r: TrialRecord) -> bool:
    crashes, requests = r.metrics.get("crashes", math.nan), r.metrics.get("requests", math.nan)
    return not math.isnan(crashes) and not math.isnan(requests) and requests > 0


def predicted_ooms(groups: Sequence[Sequence[TrialRecord]], space: SearchSpace) -> list[float]:
    """Each config's OOM rate per 1000 requests as the hazard refitted to the study predicts it
    (``groups``: each config's full runs); NaN where nothing is predicted (no death in the study,
    or a config the simulator does not model). :func:`autotune.study.analysis.evidence.summarize`
    calls it when export.oom_model is on."""
    fitted = study_fit(groups, space)
    out = []
    for g in groups:
        t = trajectory(space, g[0].flags) if fitted is not None and g else None
        out.append(fitted.oom_per_1k(t) if fitted is not None and t is not None else math.nan)
    return out

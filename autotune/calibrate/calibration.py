"""Calibrate the simulator to a study's measured trials, and say how much better it predicts.

The launched trials are split by config (:func:`autotune.calibrate.observations.split`):
the stages fit the profile on one part, and the other part, never seen by the fit, shows
the prediction error before (the starting profile, nominal unless given) and after. The
profile is then what ``autotune simulate --profile`` and ``engine.sim_profile`` read.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from autotune.calibrate import observations as obs
from autotune.calibrate.model import simulate
from autotune.calibrate.stages import StageResult, memory_stage, oom_stage, speed_stage, startup_stage
from autotune.deploy import NOMINAL, SimProfile, device_kind, plan_startup, resolve_deployment
from autotune.deploy.profile import nominal
from autotune.errors import UserError
from autotune.space import SearchSpace
from autotune.study.trials import TrialRecord

# The fit needs a few engines that started; the error needs at least one it did not see.
MIN_FITTED = 3
MIN_HELD_OUT = 1
DEFAULT_REQUESTS = 300  # requests per simulated benchmark while fitting (docs/calibration.md)
DEFAULT_HOLDOUT_EVERY = 3
HELD_OUT_METRICS = ("p99_e2e_s", "mean_tpot_s", "kv_cache_tokens", "startup_s")


def fit_profile(train: Sequence[TrialRecord], space: SearchSpace, base: SimProfile | None = None,
                requests: int = DEFAULT_REQUESTS) -> tuple[SimProfile, list[StageResult]]:
    """The profile ``train`` supports, stage by stage, starting from ``base`` (default: the nominal
    profile of the space's device, a CPU host's for ``gpu: cpu``)."""
    if base is None:
        base = nominal(device_kind(space.engine.gpu))
    profile, memory = memory_stage(train, space, base)
    profile, startup = startup_stage(train, space, profile)
    profile, speed = speed_stage(train, space, profile, requests)
    return profile, [memory, startup, speed, oom_stage(train)]


@dataclass(frozen=True)
class HeldOutError:
    """Median absolute relative error of one metric over the held-out trials."""

    metric: str
    trials: int
    before: float
    after: float


def predictions(r: TrialRecord, space: SearchSpace, profile: SimProfile) -> dict[str, float]:
    """What ``profile`` predicts for the held-out trial ``r``, for the metrics it measured."""
    measured = measured_values(r)
    e = space.engine
    plan = plan_startup(resolve_deployment(e.model, e.gpu, r.flags, e.env), profile)
    out = {"kv_cache_tokens": float(plan.kv_cache_tokens), "startup_s": plan.startup_s}
    if any(k in measured for k in ("p99_e2e_s", "mean_tpot_s")):
        out.update(simulate(space, r.flags, profile, None, r.number))
    return {k: out.get(k, math.nan) for k in measured}


def measured_values(r: TrialRecord) -> dict[str, float]:
    m: dict[str, float] = {k: v for k, v in obs.latencies(r).items() if k in HELD_OUT_METRICS}
    if obs.kv_cache_tokens(r):
        m["kv_cache_tokens"] = float(obs.kv_cache_tokens(r))
    if math.isfinite(obs.startup_s(r)):
        m["startup_s"] = obs.startup_s(r)
    return m


def held_out_errors(held: Sequence[TrialRecord], space: SearchSpace, before: SimProfile,
                    after: SimProfile) -> list[HeldOutError]:
    errs: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in HELD_OUT_METRICS}
    for r in held:
        meas = measured_values(r)
        if not meas:
            continue
        for side, profile in enumerate((before, after)):
            pred = predictions(r, space, profile)
            for k, v in meas.items():
                p = pred.get(k, math.nan)
                # A prediction the model cannot make (the config would not start) is 100 % off.
                errs[k][side].append(abs(p / v - 1.0) if math.isfinite(p) and p > 0 else 1.0)
    return [HeldOutError(k, len(b), statistics.median(b), statistics.median(a))
            for k, (b, a) in errs.items() if b]


@dataclass(frozen=True)
class Calibration:
    profile: SimProfile
    base: SimProfile
    stages: tuple[StageResult, ...]
    errors: tuple[HeldOutError, ...]
    fitted_trials: tuple[int, ...]
    held_out_trials: tuple[int, ...]
    holdout_every: int
    requests: int

    def error(self, metric: str) -> HeldOutError | None:
        return next((e for e in self.errors if e.metric == metric), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "simulated_fit": True,
            "fitted_trials": list(self.fitted_trials),
            "held_out_trials": list(self.held_out_trials),
            "held_out_rule": f"configs {self.holdout_every}, {2 * self.holdout_every}, ... in the order of their first "
                             "trial, with all their runs",
            "fit_requests": self.requests,
            "stages": [asdict(s) for s in self.stages],
            "held_out_error": {e.metric: {"trials": e.trials, "before": e.before, "after": e.after}
                               for e in self.errors},
            "profile": {k: v for k, v in self.profile.to_dict().items() if k != "noise"},
            "changed": {k: {"from": getattr(self.base, k), "to": v} for k, v in self.profile.to_dict().items()
                        if k != "noise" and not math.isclose(v, getattr(self.base, k), rel_tol=1e-9)},
        }


def calibrate(recs: Sequence[TrialRecord], space: SearchSpace, *, base: SimProfile = NOMINAL,
              holdout_every: int = DEFAULT_HOLDOUT_EVERY, requests: int = DEFAULT_REQUESTS) -> Calibration:
    """Fit on part of ``recs`` and measure the prediction error on the rest."""
    if holdout_every < 2:
        raise UserError(f"--holdout-every {holdout_every}: must be at least 2 (every n-th config is held out)")
    if requests < 10:
        raise UserError(f"--requests {requests}: must be at least 10")
    sp = obs.split(recs, holdout_every)
    n_fit = sum(obs.started(r) for r in sp.fit)
    n_held = sum(obs.started(r) for r in sp.held_out)
    if not sp.fit and not sp.held_out:
        raise UserError("the study has no measured trial yet; run it first (autotune run)")
    if n_fit < MIN_FITTED or n_held < MIN_HELD_OUT:
        raise UserError(f"too few measured trials to calibrate: {n_fit + n_held} engines started ({n_fit} to fit, "
                        f"{n_held} held out); calibration needs at least {MIN_FITTED} to fit and {MIN_HELD_OUT} "
                        "held out: run more trials")
    profile, stages = fit_profile(sp.fit, space, base, requests)
    errors = held_out_errors(sp.held_out, space, base, profile)
    return Calibration(profile, base, tuple(stages), tuple(errors), tuple(r.number for r in sp.fit),
                       tuple(r.number for r in sp.held_out), holdout_every, requests)

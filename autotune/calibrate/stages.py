"""The calibration stages: each fits the constants the physics lets one kind of measurement see.

1. **memory**: the KV cache size each engine reported at startup (and each startup that
   failed for lack of KV memory) against the startup memory model, microseconds per
   evaluation. The same fit pruning learns from (:class:`autotune.study.search.pruning.MemoryModel`).
2. **startup**: the startup times against the model's startup-time sum.
3. **speed**: latencies (p99 and p50 end-to-end, TPOT, p50 TTFT) against the simulator
   run on the measured configs, with the memory constants already fitted (the KV capacity
   decides preemptions, which latency then shows). Short benchmarks with a control variate
   (:mod:`autotune.calibrate.model`).
4. **oom**: the runtime OOM hazard's constants are not fitted (see :func:`oom_stage`).

A constant a stage's measurements barely move (it changes no residual by more than the
measurement noise across its whole range) is left at the starting profile's value and
reported as such: a study only identifies what its configs vary.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.calibrate import observations as obs
from autotune.calibrate.model import ShortBenchmark
from autotune.deploy import SimProfile, device_kind, plan_startup
from autotune.space import SearchSpace
from autotune.study.search import MEMORY_CONSTANTS, MemoryModel, fitting, startup_observations
from autotune.study.trials import TrialRecord

STARTUP_CONSTANTS = ("process_start_s", "load_gb_s", "profile_s", "compile_s", "capture_s_per_size")
SPEED_CONSTANTS = ("compute_eff", "hbm_eff", "link_eff", "link_latency_scale", "nccl_latency_us", "eager_launch_us",
                   "piecewise_launch_frac", "cpu_step_us", "cpu_seq_us", "api_base_s", "api_per_prompt_token_s")
OOM_CONSTANTS = ("cuda_context_gib", "lazy_buffers_gib", "frag_frac", "frag_sigma")
# Assumed log-space spread of one startup time (the simulator's per-start noise is 10 %).
STARTUP_SPREAD = 0.10
# A residual a prediction cannot be made for (the config would not start under the profile).
MISSING = 10.0
# A posterior standard deviation below this share of the prior's counts as determined.
DETERMINED = 0.5
# The speed stage simulates every fitted config per evaluation: at most this many configs
# (spread over the study), a few Levenberg-Marquardt iterations, and a stop once an
# iteration gains less than 0.1 % (the measurements' own noise is 3 %).
SPEED_ROWS = 16
SPEED_ITERATIONS = 8
SPEED_RTOL = 1e-3


@dataclass(frozen=True)
class StageResult:
    name: str
    determined: tuple[str, ...]  # constants the measurements pinned down
    # The others: left at the starting value, or moved only together with others (a sum, a
    # product) and so not pinned down each.
    undetermined: tuple[str, ...]
    observations: int
    note: str = ""
    seconds: float = 0.0


def _pinned(names: Sequence[str], covariance: np.ndarray, prior_sigma: np.ndarray) -> tuple[str, ...]:
    """The constants whose posterior spread is well below the prior's."""
    sd = np.sqrt(np.diag(covariance))
    return tuple(n for n, s, p in zip(names, sd, prior_sigma, strict=True) if s < DETERMINED * p)


def memory_stage(train: Sequence[TrialRecord], space: SearchSpace, profile: SimProfile) -> tuple[SimProfile, StageResult]:
    t0 = time.perf_counter()
    e = space.engine
    mm = MemoryModel(e.model, e.gpu, e.env, profile)
    found = startup_observations(train)
    if not found:
        return profile, StageResult("memory", (), MEMORY_CONSTANTS, 0, "no engine reported its KV cache size")
    learned = mm.fit(found)
    pinned = _pinned(MEMORY_CONSTANTS, learned.covariance, mm.box.sigma)
    note = (f"KV memory residual spread {learned.spread_gib * 1024:.0f} MiB; the engines reported "
            f"{learned.bias_gib:+.2f} GiB of KV memory against the starting profile's prediction, on average")
    if len({dict(o.flags).get("tensor_parallel_size", 1) for o in found}) == 1:
        note += "; non_torch_gib and nccl_gib act as one sum at a single TP size"
    return learned.profile, StageResult("memory", pinned, tuple(n for n in MEMORY_CONSTANTS if n not in pinned),
                                        len(found), note, time.perf_counter() - t0)


def _fit_constants(names: Sequence[str], profile: SimProfile, residuals: fitting.Residuals, n_obs: int,
                   stage: str, t0: float, max_iter: int = 30, rtol: float = 1e-5,
                   device: str = "gpu") -> tuple[SimProfile, StageResult]:
    """Fit the constants among ``names`` that move the residuals more than their noise across
    their range (``device``'s ranges: a CPU host has its own); leave the others at ``profile``'s values."""
    box = fitting.profile_box(names, profile, device)
    x0 = box.center
    r0 = residuals(x0)
    j0 = fitting.jacobian(residuals, x0, r0, box)
    reach = np.sqrt(np.sum((j0 * (box.hi - box.lo)) ** 2, axis=0))
    active = [k for k in range(len(names)) if reach[k] >= 1.0]
    if not active:
        return profile, StageResult(stage, (), tuple(names), n_obs, "no constant moves the measurements beyond their "
                                    "noise", time.perf_counter() - t0)
    sub = [names[k] for k in active]
    sub_box = fitting.Box(box.lo[active], box.hi[active], box.center[active], box.sigma[active])

    def sub_residuals(x: np.ndarray) -> np.ndarray:
        full = x0.copy()
        full[active] = x
        return residuals(full)

    f = fitting.fit(sub_residuals, sub_box, max_iter=max_iter, rtol=rtol, start=(r0, j0[:, active]))
    fitted = fitting.with_logs(profile, sub, f.x)
    pinned = _pinned(sub, f.covariance(sub_box), sub_box.sigma)
    undetermined = tuple(n for n in names if n not in pinned)
    rms = math.sqrt(float(np.mean(f.data_residuals**2))) if len(f.data_residuals) else 0.0
    note = f"residual RMS {rms:.2f} noise units; left at the start: {', '.join(n for n in names if n not in sub) or '-'}"
    return fitted, StageResult(stage, pinned, undetermined, n_obs, note, time.perf_counter() - t0)


def startup_stage(train: Sequence[TrialRecord], space: SearchSpace, profile: SimProfile) -> tuple[SimProfile, StageResult]:
    t0 = time.perf_counter()
    rows = [(r, obs.startup_s(r)) for r in train if math.isfinite(obs.startup_s(r))]
    if not rows:
        return profile, StageResult("startup", (), STARTUP_CONSTANTS, 0, "no engine reported its startup time")
    e = space.engine
    mm = MemoryModel(e.model, e.gpu, e.env, profile)
    deps = [mm.deployment(r.flags) for r, _ in rows]

    def residuals(x: np.ndarray) -> np.ndarray:
        p = fitting.with_logs(profile, STARTUP_CONSTANTS, x)
        return np.array([(math.log(plan_startup(d, p).startup_s) - math.log(s)) / STARTUP_SPREAD
                         for d, (_, s) in zip(deps, rows, strict=True)])

    return _fit_constants(STARTUP_CONSTANTS, profile, residuals, len(rows), "startup", t0,
                          device=device_kind(e.gpu))


def speed_stage(train: Sequence[TrialRecord], space: SearchSpace, profile: SimProfile,
                requests: int) -> tuple[SimProfile, StageResult]:
    t0 = time.perf_counter()
    rows = [(r, m) for r in train if (m := obs.latencies(r))]
    if len(rows) > SPEED_ROWS:  # evenly over the study: its configs, not its last few
        rows = [rows[round(i * (len(rows) - 1) / (SPEED_ROWS - 1))] for i in range(SPEED_ROWS)]
    if not rows:
        return profile, StageResult("speed", (), SPEED_CONSTANTS, 0, "no trial served its whole benchmark without an "
                                    "engine death")
    benches = [ShortBenchmark(space, r.flags, profile, requests, r.number, tuple(m)) for r, m in rows]
    spread = obs.latency_spread(train)  # measured from the study's repeats where it has them

    def residuals(x: np.ndarray) -> np.ndarray:
        p = fitting.with_logs(profile, SPEED_CONSTANTS, x)
        out: list[float] = []
        for b, (_, meas) in zip(benches, rows, strict=True):
            pred = b.predict(p)
            out += [(math.log(pred[k]) - math.log(v)) / spread[k] if k in pred else MISSING
                    for k, v in meas.items()]
        return np.array(out)

    return _fit_constants(SPEED_CONSTANTS, profile, residuals, len(rows), "speed", t0, SPEED_ITERATIONS, SPEED_RTOL,
                          device_kind(space.engine.gpu))


def oom_stage(train: Sequence[TrialRecord]) -> StageResult:
    """Not fitted. A study sees a runtime OOM as a few all-or-nothing engine deaths in a few
    of its configs (most configs never come near the cliff, and the search moves away from
    those that do), while the hazard has three constants of its own plus the CUDA context
    that sets the physical headroom: counts that sparse cannot separate them. (What they can pin
    down is the hazard's combined shape near the deaths: export.oom_model refits that, for its
    predictions only, in :mod:`autotune.calibrate.hazard`.)"""
    served = [r for r in train if obs.started(r)]
    hit = [r for r in served if (r.metrics.get("requests_oom") or 0) > 0]
    return StageResult("oom", (), OOM_CONSTANTS, len(served),
                       f"not fitted: {len(hit)} of {len(served)} engines lost requests to runtime OOMs; the hazard's "
                       "constants and the CUDA context are not identifiable from counts that sparse")

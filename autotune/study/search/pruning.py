"""Known-constraint pruning that learns its own error: predict startup failure, launch nothing.

The prediction is the memory model of :mod:`autotune.deploy` (weights, activations, CUDA
graphs, KV cache vs max_model_len), the same accounting the simulator starts from,
evaluated on the model's config.json and the GPU's datasheet memory, so it costs
microseconds instead of a multi-minute server start.

The model's uncertain constants (non-torch and NCCL memory, activation and sampler bytes,
CUDA-graph memory and vLLM's estimate of it) are not known on a real GPU, and a config
wrongly predicted to fail is never measured. So the predictor does not trust the model:

* **Before any startup** it rejects only what cannot start whatever those constants are
  within their documented ranges (the most favourable corner of the ranges fails too).
* **After each startup** it refits them to what the engines reported (the KV cache size of
  each config that started; each config that failed for lack of KV memory as an upper
  bound), with a weak prior around autotune's model profile, and keeps the error of that
  fit: a bias (how far the reported KV memory was from the model profile's prediction) and
  a spread (the fit's residuals, never below :data:`SIGMA_FLOOR_GIB`), plus the linearised
  uncertainty of the constants the startups did not pin down.
* A config is rejected only if it is predicted to fail by more than that uncertainty:
  even the optimistic end (:data:`Z` standard deviations) of its KV memory is short of one
  ``max_model_len`` request. Configs within the uncertainty of the boundary are launched,
  and their startups teach the model.

Everything is recomputed from the study's records (:meth:`StartupPredictor.update`), so a
resumed study learns the same; the only state is a cache keyed by the records it came from.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from autotune.deploy import (
    Deployment,
    SimProfile,
    device_kind,
    get_device,
    plan_startup,
    resolve_deployment,
    resolve_model,
)
from autotune.deploy.memory import GiB
from autotune.deploy.profile import ranges as profile_ranges
from autotune.engine import unmodelled_flags
from autotune.errors import UserError
from autotune.results import FailureClass
from autotune.space import SearchSpace
from autotune.study.search import fitting
from autotune.study.trials import State, TrialRecord

log = logging.getLogger(__name__)

# The profile constants the KV cache size depends on (docs/simulator.md, "Startup memory").
# cuda_context_gib is not among them: the context lies outside vLLM's budget, so no KV size
# shows it; the favourable corner takes its low end.
MEMORY_CONSTANTS = ("non_torch_gib", "nccl_gib", "activation_scale", "sampler_copies", "cudagraph_base_gib",
                    "cudagraph_per_graph_layer_mib", "cudagraph_estimate_ratio")
# vLLM's messages when the KV cache cannot hold one max_model_len request (kv_cache_utils).
KV_SHORTAGE_MARKS = ("No available memory for the cache blocks", "To serve at least one request")
# The smallest spread assumed for a reported KV size against the model (5 MiB, two KV blocks of
# a 72B model at TP 2): the rounding to whole blocks, and memory no model accounts to the byte.
SIGMA_FLOOR_GIB = 0.005
# Standard deviations of KV memory a config may be predicted short by and still launch.
Z = 3.0


@dataclass(frozen=True)
class StartupObservation:
    """What one launched trial says about startup memory."""

    number: int
    flags: dict[str, Any]
    kv_cache_tokens: int  # the reported KV cache size; 0: it failed for lack of KV memory

    @property
    def shortage(self) -> bool:
        return self.kv_cache_tokens == 0


def startup_observations(recs: Iterable[TrialRecord]) -> list[StartupObservation]:
    """Launched trials that tell the KV memory: engines that started and reported their KV
    cache, and startups that failed for lack of KV memory. Others (a flag the model does not
    model, a fixed ``kv_cache_memory_bytes``, another failure) say nothing about it."""
    out = []
    for r in recs:
        if r.state != State.COMPLETE or unmodelled_flags(r.flags) or r.flags.get("kv_cache_memory_bytes"):
            continue
        kv = r.metrics.get("kv_cache_tokens", math.nan)
        if r.started and math.isfinite(kv) and kv > 0:
            out.append(StartupObservation(r.number, dict(r.flags), int(kv)))
        elif not r.started and r.failure_class == str(FailureClass.STARTUP_OOM) and is_kv_shortage(r.failure_reason):
            out.append(StartupObservation(r.number, dict(r.flags), 0))
    return out


def is_kv_shortage(reason: str) -> bool:
    return any(m in reason for m in KV_SHORTAGE_MARKS)


@dataclass(frozen=True)
class MemoryFit:
    """The memory constants as the study's startups show them, and how sure that is."""

    profile: SimProfile  # the model profile with the fitted memory constants
    covariance: np.ndarray  # of the constants' logs (MEMORY_CONSTANTS order), linearised
    spread_gib: float  # the residual spread of reported KV memory against the fit
    bias_gib: float  # mean reported minus predicted KV memory, under the model profile
    observations: int
    within_ranges: bool  # the ranges explain every startup (else their corner bounds nothing)


class MemoryModel:
    """autotune's startup memory model of one deployment, with a profile that can be refitted.

    ``profile`` is autotune's own model (``study.strategy.model_profile``), never the
    physics a sim backend runs (``engine.sim_profile``).
    """

    def __init__(self, model: str, gpu: str, env: Mapping[str, str], profile: SimProfile) -> None:
        self.model, self.gpu, self.env, self.profile = model, gpu, dict(env), profile
        self._deployments: dict[str, Deployment] = {}
        device = device_kind(gpu)
        self.box = fitting.profile_box(MEMORY_CONSTANTS, profile, device)
        ranges = profile_ranges(device)
        # The most favourable profile in the ranges: least memory outside the KV cache. For a
        # CUDA-graph capture that does not fit, a larger graph estimate is favourable instead
        # (it leaves more of the budget outside the KV cache), hence the second one.
        self.favourable = self.with_logs(self.box.lo, replace(profile, cuda_context_gib=ranges["cuda_context_gib"][0]))
        self.favourable_for_capture = replace(self.favourable,
                                              cudagraph_estimate_ratio=ranges["cudagraph_estimate_ratio"][1])

    # --- the accounting ---------------------------------------------------------------------
    def deployment(self, flags: Mapping[str, Any]) -> Deployment:
        key = json.dumps(flags, sort_keys=True, default=str)
        dep = self._deployments.get(key)
        if dep is None:
            dep = self._deployments[key] = resolve_deployment(self.model, self.gpu, flags, self.env)
        return dep

    def with_logs(self, x: np.ndarray, base: SimProfile | None = None) -> SimProfile:
        return fitting.with_logs(base or self.profile, MEMORY_CONSTANTS, x)

    @staticmethod
    def available_gib(dep: Deployment, profile: SimProfile) -> float:
        """KV memory vLLM would size (GiB per GPU), before the check that it holds a request.
        Negative when the rest of the budget is over it already."""
        m = plan_startup(dep, profile).mem
        return m.budget - m.weights - m.non_torch - m.activation_peak - m.cuda_graphs_estimate

    @staticmethod
    def needed_gib(dep: Deployment) -> float:
        """KV memory vLLM requires to start: one max_model_len request plus the null block."""
        return (math.ceil(dep.max_model_len / dep.block_size) + 1) * dep.block_size * dep.kv_bytes_per_token / GiB

    @staticmethod
    def reported_gib(dep: Deployment, kv_cache_tokens: int) -> float:
        """The KV memory an engine that reported ``kv_cache_tokens`` had: whole blocks, so
        up to one block more than the tokens show (half a block on average)."""
        return (kv_cache_tokens + dep.block_size / 2) * dep.kv_bytes_per_token / GiB

    # --- learning -------------------------------------------------------------------------------
    def fit(self, observations: Sequence[StartupObservation]) -> MemoryFit:
        deps = [self.deployment(o.flags) for o in observations]

        def residuals(x: np.ndarray) -> np.ndarray:
            p = self.with_logs(x)
            out = []
            for o, dep in zip(observations, deps, strict=True):
                a = self.available_gib(dep, p)
                if o.shortage:  # an upper bound: the engine had less than one request's worth
                    out.append(max(0.0, a - self.needed_gib(dep)) / SIGMA_FLOOR_GIB)
                else:
                    out.append((a - self.reported_gib(dep, o.kv_cache_tokens)) / SIGMA_FLOOR_GIB)
            return np.array(out)

        f = fitting.fit(residuals, self.box, kinks=True)
        exact = [i for i, o in enumerate(observations) if not o.shortage]
        res = f.data_residuals[exact] * SIGMA_FLOOR_GIB
        spread = max(SIGMA_FLOOR_GIB, float(np.sqrt(np.mean(res**2)))) if exact else SIGMA_FLOOR_GIB
        bias = float(np.mean([self.reported_gib(deps[i], observations[i].kv_cache_tokens)
                              - self.available_gib(deps[i], self.profile) for i in exact])) if exact else 0.0
        return MemoryFit(
            profile=self.with_logs(f.x), covariance=f.covariance(self.box, spread / SIGMA_FLOOR_GIB),
            spread_gib=spread, bias_gib=bias, observations=len(observations),
            within_ranges=bool(np.all(np.abs(f.data_residuals) <= Z)),
        )

    # --- prediction -----------------------------------------------------------------------------
    def kv_upper_gib(self, dep: Deployment, learned: MemoryFit | None) -> float:
        """The most KV memory ``dep`` can plausibly have: the favourable corner of the ranges
        before any startup; after, the fit's prediction plus Z standard deviations (its
        spread and the constants' uncertainty), never above the corner while the ranges
        explain the startups."""
        corner = self.available_gib(dep, self.favourable)
        if learned is None:
            return corner
        x = fitting.logs(learned.profile, MEMORY_CONSTANTS)
        mu = self.available_gib(dep, learned.profile)
        h = 0.02
        # Both one-sided slopes, the steeper kept: at a kink the candidate may move either way.
        grad = np.array([max(abs(self.available_gib(dep, self.with_logs(x + s * unit, learned.profile)) - mu)
                             for s in (h, -h)) for unit in np.eye(len(x))]) / h
        sd = math.sqrt(float(grad @ learned.covariance @ grad) + learned.spread_gib**2)
        upper = mu + Z * sd
        return min(upper, corner) if learned.within_ranges else upper


@dataclass
class StartupPredictor:
    """Decides whether a sampled config may launch. ``learn`` False is the plain rule
    (reject whatever the model profile predicts to fail), kept to measure what learning adds."""

    memory: MemoryModel
    learn: bool = True
    learned: MemoryFit | None = None
    _seen: tuple[int, ...] = field(default=(), repr=False)

    @classmethod
    def for_space(cls, space: SearchSpace) -> StartupPredictor | None:
        """A predictor when the memory model knows this model and device (a GPU of the table, or the
        CPU host of vLLM's CPU build); else None (no pruning)."""
        try:
            resolve_model(space.engine.model)
            get_device(space.engine.gpu)
        except UserError as e:
            log.info("startup pruning off, no memory model: %s", e)
            return None
        s = space.study.strategy
        return cls(MemoryModel(space.engine.model, space.engine.gpu, space.engine.env, s.base_profile),
                   learn=s.prune_learns_error)

    def update(self, recs: Sequence[TrialRecord]) -> None:
        """Learn from the study's launched trials (refitted only when they changed)."""
        if not self.learn:
            return
        obs = startup_observations(recs)
        key = tuple(sorted(o.number for o in obs))
        if key == self._seen:
            return
        self._seen = key
        self.learned = self.memory.fit(obs) if obs else None

    @property
    def profile(self) -> SimProfile:
        """The memory constants predictions use now: learned, else the model profile's."""
        return self.learned.profile if self.learned is not None else self.memory.profile

    def failure(self, flags: dict[str, Any]) -> str:
        """The predicted startup failure reason, or '' when the config should start, when it
        is within the model's uncertainty of starting, or when a flag the memory model does
        not model is set (pruning is an optimisation: a wrong prediction would lose a config
        that can start, e.g. one with cpu_offload_gb)."""
        if unmodelled_flags(flags):
            return ""
        dep = self.memory.deployment(flags)
        pred = plan_startup(dep, self.profile)
        if pred.ok:
            return ""
        if not self.learn:
            return f"predicted startup failure: {pred.failure_reason}"
        if pred.failure_class == FailureClass.INVALID_CONFIG:
            # On a GPU an invalid config is an argument check, whatever the constants. The CPU build
            # also refuses for node memory (ValueErrors, classed alike), which the uncertain constants
            # decide: those only when the most favourable constants are refused too.
            if dep.gpu.is_cpu and plan_startup(dep, self.memory.favourable).ok:
                return ""
            return f"predicted startup failure: {pred.failure_reason}"
        if is_kv_shortage(pred.failure_reason):
            short = self.memory.needed_gib(dep) - self.memory.kv_upper_gib(dep, self.learned)
            if short <= 0:
                return ""
            return (f"predicted startup failure, {short:.2f} GiB of KV memory short beyond the model's uncertainty: "
                    f"{pred.failure_reason}")
        # Other memory failures (no room for the weights, the profile run, the graphs): only
        # when the most favourable constants fail too.
        if any(plan_startup(dep, p).ok for p in (self.memory.favourable, self.memory.favourable_for_capture)):
            return ""
        return f"predicted startup failure even with the most favourable memory constants: {pred.failure_reason}"

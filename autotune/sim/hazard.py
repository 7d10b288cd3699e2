"""Runtime OOM hazard: memory vLLM did not account for, against the physical headroom.

vLLM sizes the KV cache so that weights + profiled peak + KV fill ``gpu_memory_utilization``
of the GPU; the CUDA context (and, with the graph estimate off, CUDA graphs) live in what is
left. During serving, each step needs memory the profile did not see:

* ``extra``: the step's certain excess over the profiled peak (prompt logprobs, sampler
  logprobs: :mod:`autotune.sim.step_memory`);
* ``fixed``: lazily created buffers (NCCL algorithm/protocol buffers for new message sizes,
  cuBLAS workspaces for new GEMM shapes), a constant per engine;
* allocator fragmentation: PyTorch's caching allocator rounds and splits blocks, so the
  memory *reserved* for a step's transient tensors exceeds the *allocated* peak the
  profile measured (vLLM's profile reads ``allocated_bytes.all.peak``). We model the
  excess as ``frag_frac * act_step * Z`` with Z log-normal (median 1): steps with other
  shapes than before make the allocator carve new segments.

A step OOMs when ``extra + fixed + frag_frac * act_step * Z > headroom``; per step

    p = 1 if extra + fixed >= headroom, else Q(ln((headroom - fixed - extra) / (frag_frac * act_step)) / sigma),

independent between steps, so k identical steps survive with (1 - p)^k. The constants are
the profile's (:class:`autotune.deploy.SimProfile`); docs/simulator.md gives their reasoning.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.deploy import SimProfile

GiB = 2**30


@dataclass(frozen=True)
class Hazard:
    headroom_bytes: float
    fixed_bytes: float
    frag_frac: float
    sigma: float

    @classmethod
    def from_profile(cls, headroom_bytes: float, profile: SimProfile) -> Hazard:
        return cls(headroom_bytes, profile.lazy_buffers_gib * GiB, profile.frag_frac, profile.frag_sigma)

    def p_step(self, act_bytes: float, extra_bytes: float = 0.0) -> float:
        margin = self.headroom_bytes - self.fixed_bytes - extra_bytes
        if margin <= 0:
            return 1.0
        scale = self.frag_frac * act_bytes
        if scale <= 0:
            return 0.0
        z = math.log(margin / scale) / self.sigma
        return 0.5 * math.erfc(z / math.sqrt(2))

    def typical_excess(self, act_bytes: float) -> float:
        """The median unaccounted memory of a step (for the peak-memory report)."""
        return self.fixed_bytes + self.frag_frac * act_bytes

    @staticmethod
    def first_failure(p: float, k: int, rng: random.Random) -> int:
        """The step (1..k) at which the engine dies, or 0 if it survives k steps."""
        u = rng.random()  # drawn every time, so the noise stream does not depend on p
        if p <= 0.0 or u <= 0.0:
            return 0
        if p >= 1.0:
            return 1
        # Geometric: the number of trials to the first failure.
        j = int(math.log(u) / math.log1p(-p)) + 1
        return j if j <= k else 0


def run_rng(workload_seed: int, seed: int) -> random.Random:
    """The RNG of trial ``seed`` of a benchmark: with noise off it draws nothing but
    :meth:`Hazard.first_failure`'s one number per crash draw. String seeds hash
    deterministically (sha512), independent of PYTHONHASHSEED."""
    return random.Random(f"autotune-sim/{workload_seed}/{seed}")


def survives(draws: Sequence[tuple[float, int, float]], workload_seed: int, seed: int) -> bool:
    """Whether trial ``seed`` would survive every crash draw of a crash-free trial's log.

    With noise off the trial seed moves nothing but the crash draws, so every seed follows
    the same trajectory up to its first crash: one that survives the log's draws (each
    ``(p, k, extra GiB)``: a step's crash probability over ``k`` identical steps) *is* the logged trial,
    value for value, and need not be simulated. The brute force of a truth relies on this
    (experiments/scenarios/ground_truth.py), where most repeat runs exist only to catch a
    rare crash."""
    rng = run_rng(workload_seed, seed)
    return not any(Hazard.first_failure(p, k, rng) for p, k, *_ in draws)

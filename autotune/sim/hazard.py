"""Runtime OOM hazard: memory vLLM did not account for, against the physical headroom.

vLLM sizes the KV cache so that weights + profiled peak + KV fill ``gpu_memory_utilization``
of the GPU; CUDA graphs and the CUDA context then live in what is left. During serving,
each step needs memory the profile did not see:

* ``fixed``: lazily created buffers (NCCL algorithm/protocol buffers for new message sizes,
  cuBLAS workspaces for new GEMM shapes), a constant per engine;
* allocator fragmentation: PyTorch's caching allocator rounds and splits blocks, so the
  memory *reserved* for a step's transient tensors exceeds the *allocated* peak the
  profile measured (vLLM's profile reads ``allocated_bytes.all.peak``). We model the
  excess as ``frag_frac * act_step * Z`` with Z log-normal (median 1): steps with other
  shapes than before make the allocator carve new segments.

A step OOMs when ``fixed + frag_frac * act_step * Z > headroom``; per step

    p = P(Z > (headroom - fixed) / (frag_frac * act_step)) = Q(ln(ratio) / sigma),

independent between steps, so k identical steps survive with (1 - p)^k. The parameters
and their justification are in docs/simulator.md ("Runtime OOM hazard").
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

GiB = 2**30

FIXED_GIB = 0.15
FRAG_FRAC = 0.25
SIGMA = 0.6


@dataclass(frozen=True)
class Hazard:
    headroom_bytes: float
    fixed_bytes: float = FIXED_GIB * GiB
    frag_frac: float = FRAG_FRAC
    sigma: float = SIGMA

    def p_step(self, act_bytes: float) -> float:
        margin = self.headroom_bytes - self.fixed_bytes
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

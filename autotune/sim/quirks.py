"""Structural departures from the analytic model: what a real GPU does that no constant can fit.

The simulator's :class:`~autotune.deploy.SimProfile` holds *constants* (efficiencies,
overheads, memory terms) inside a fixed analytic structure: a roofline step time, a
per-sequence CPU cost, V1's scheduler. A real deployment differs from such a model in
*shape*, not only in scale. :class:`Quirks` names those differences, each off by default, so
that a benchmark can build a "truth" the calibrated model cannot fit by refitting its
constants (experiments/reality_gap, the ``structural`` truth family). Nothing in autotune's
own search, pruning or calibration ever constructs a non-default ``Quirks``: they are the
physics of a truth, never part of autotune's model.

Each mechanism, and where it comes from:

* ``gemm_tile`` / ``gemm_wave``: GEMM time is paid in tiles and waves of thread blocks
  (cuBLAS/CUTLASS tile the token dimension by 64-256 rows; a partial tile or a partial wave
  over the SMs costs a full one), so a step of 129 tokens costs closer to 256 than to 129.
  ``gemm_wave`` is how much of the padded work is paid (0: none, 1: all).
* ``graph_padding``: vLLM pads a decode batch to the next captured CUDA-graph size and runs
  the graph at that size (``vllm/v1/worker/gpu_model_runner.py``: ``pad_for_cudagraph``), so
  a batch of 17 sequences computes 24 rows.
* ``attn_ctx_exp`` / ``attn_ctx_ref``: attention kernels (FlashAttention, FlashInfer) are not
  linear in context: split-KV scheduling, occupancy and cache behaviour make the per-token
  cost grow (exponent > 0) or shrink (< 0) with the context length beyond ``attn_ctx_ref``.
* ``fp8_kv_penalty``: on GPUs without FP8 tensor cores (A100) an fp8 KV cache is stored in
  fp8 but dequantised in the attention kernel, so it halves KV memory but costs attention
  time instead of saving it (vLLM issues on fp8 KV cache slowdowns on Ampere). The KV read
  and attention FLOPs cost ``1 + penalty`` times their nominal fp8 value.
* ``prefill_chunk_cap``: a scheduler variant: each request's prefill is chunked to at most
  this many tokens a step (vLLM's ``long_prefill_token_threshold`` with partial prefills),
  so long prompts take more steps than the token budget alone implies. 0: off.
* ``frag_growth``: allocator fragmentation that grows with uptime: the transient memory a
  step can lose to fragmentation grows by this fraction over ``frag_horizon_s`` of engine
  uptime, so the OOM hazard of a config rises through a long benchmark.
* ``cpu_knee`` / ``cpu_power``: per-sequence CPU work (input preparation, detokenisation,
  output processing in the API server) grows faster than linearly beyond ``cpu_knee``
  sequences a step: cost ``cpu_seq_us * s * (1 + (s / knee) ** power)``.
* ``field_amp`` / ``field_seed`` / ``field_scale``: a smooth random field over the config
  space, ``exp(field_amp * z(flags))`` with ``z`` a unit-variance random-Fourier-feature
  sample over the flags, scaling every step time: the interactions between flags that no
  analytic model writes down (kernel selection, allocator layout).

Run-to-run behaviour (only with ``SimProfile.noise`` on):

* ``speed``: a speed factor of this run set by whoever runs the trial (a node's persistent
  offset and the drift of the cluster's clock: experiments/reality_gap's truth backend).
* ``outlier_chance`` / ``outlier_scale``: heavy-tailed outlier runs: with this chance a
  server start is slower by a Pareto-distributed factor (a noisy neighbour, thermal
  throttling, a slow NCCL ring), up to ``1 + outlier_scale`` and beyond.
* ``kv_jitter``: each server start sizes its KV cache a little differently (vLLM profiles
  the memory it can give the cache at every start, and non-torch memory varies), by
  ``+-kv_jitter`` with even chances: near a KV cliff, p99 becomes bimodal.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

FIELD_FEATURES = 32  # random Fourier features of the smooth field: enough for a GP-like sample


@dataclass(frozen=True)
class Quirks:
    """Structural departures of a truth from the analytic model (module docstring); all off."""

    gemm_tile: int = 0
    gemm_wave: float = 0.0
    graph_padding: bool = False
    attn_ctx_exp: float = 0.0
    attn_ctx_ref: float = 2048.0
    fp8_kv_penalty: float = 0.0
    prefill_chunk_cap: int = 0
    frag_growth: float = 0.0
    frag_horizon_s: float = 600.0
    cpu_knee: float = 0.0
    cpu_power: float = 1.0
    field_amp: float = 0.0
    field_seed: int = 0
    field_scale: float = 1.0
    speed: float = 1.0
    outlier_chance: float = 0.0
    outlier_scale: float = 0.0
    kv_jitter: float = 0.0

    @property
    def active(self) -> bool:
        return self != NONE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Quirks:
        return cls(**dict(data))

    def with_speed(self, speed: float) -> Quirks:
        return replace(self, speed=speed)

    # --- step time ---------------------------------------------------------------------
    def gemm_rows(self, tokens: int, decode_only: bool, capture: Sequence[int]) -> float:
        """Rows the GEMMs of a step of ``tokens`` rows effectively compute."""
        rows = float(tokens)
        if self.graph_padding and decode_only and capture and tokens <= capture[-1]:
            rows = float(next(s for s in capture if s >= tokens))
        if self.gemm_tile > 0 and rows > 0:
            padded = math.ceil(rows / self.gemm_tile) * self.gemm_tile
            rows += self.gemm_wave * (padded - rows)
        return rows

    def attention_scale(self, avg_context: float, fp8_kv_without_fp8_units: bool) -> float:
        """Factor on a step's attention FLOPs at ``avg_context`` tokens of context per sequence."""
        f = 1.0
        if self.attn_ctx_exp and avg_context > 0:
            f *= (max(avg_context, 1.0) / self.attn_ctx_ref) ** self.attn_ctx_exp
        if fp8_kv_without_fp8_units:
            f *= 1.0 + self.fp8_kv_penalty
        return f

    def kv_read_scale(self, fp8_kv_without_fp8_units: bool) -> float:
        return 1.0 + self.fp8_kv_penalty if fp8_kv_without_fp8_units else 1.0

    def cpu_seq_factor(self, seqs: int) -> float:
        if self.cpu_knee <= 0:
            return 1.0
        return 1.0 + (seqs / self.cpu_knee) ** self.cpu_power

    def field_factor(self, flags: Mapping[str, Any]) -> float:
        """``exp(field_amp * z(flags))``: the smooth random field at this config."""
        if self.field_amp <= 0:
            return 1.0
        return math.exp(self.field_amp * _field(self.field_seed, self.field_scale, flags))

    # --- memory and noise --------------------------------------------------------------
    def fragmentation(self, uptime_s: float) -> float:
        """Factor on a step's fragmentable memory after ``uptime_s`` of engine uptime."""
        if self.frag_growth <= 0:
            return 1.0
        return 1.0 + self.frag_growth * min(1.0, uptime_s / self.frag_horizon_s)

    def start_draws(self, rng: random.Random) -> tuple[float, float]:
        """(speed factor, KV-cache size factor) of one server start (noise on)."""
        speed = self.speed
        if self.outlier_chance > 0 and rng.random() < self.outlier_chance:
            speed *= 1.0 + self.outlier_scale * rng.paretovariate(2.5) / 1.67  # median ~1 + 0.8 scale
        kv = 1.0
        if self.kv_jitter > 0:
            kv += self.kv_jitter if rng.random() < 0.5 else -self.kv_jitter
        return speed, kv


NONE = Quirks()


def encode_flag(name: str, value: Any) -> float:
    """A flag's value on a scale where one unit is "a large change": log2 for counts, tenths
    for fractions, 0/1 for booleans, a fixed pseudo-random position for strings."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        v = float(value)
        if 0 < v <= 1:
            return 10.0 * v
        return math.log2(v) if v > 0 else 0.0
    digest = hashlib.sha256(f"{name}={value}".encode()).digest()
    return 2.0 * digest[0] / 255.0


def _field(seed: int, scale: float, flags: Mapping[str, Any]) -> float:
    """A unit-variance smooth random function of the flags (random Fourier features of an
    RBF kernel with length ``scale`` in :func:`encode_flag` units)."""
    names = sorted(flags)
    x = [encode_flag(n, flags[n]) for n in names]
    total = 0.0
    for k in range(FIELD_FEATURES):
        rng = random.Random(f"autotune-sim-field/{seed}/{k}")
        phase = rng.uniform(0.0, 2 * math.pi)
        dot = 0.0
        for n, v in zip(names, x, strict=True):
            # Each flag's frequency depends on its name only, so a field is the same function
            # of a flag in every space that has it.
            w = random.Random(f"autotune-sim-field/{seed}/{k}/{n}").gauss(0.0, 1.0 / scale)
            dot += w * v
        total += math.cos(dot + phase)
    return total * math.sqrt(2.0 / FIELD_FEATURES)

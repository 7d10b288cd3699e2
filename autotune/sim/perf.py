"""Execution time of one engine step: a roofline plus the overheads around it.

    t_step = max(FLOPs / achievable_rate, bytes / achievable_bandwidth)
             + 2 * layers * all_reduce(tokens * hidden * 2 B)        (TP > 1)
             + eager kernel-launch overhead                          (no CUDA graph for this batch)
             + CPU scheduling overhead (per step + per sequence)

FLOPs: decoder GEMMs (2 x params/TP per token), LM head per sequence, attention
(4 x heads/TP x head_dim x new x context). Bytes: all weights of the rank once per step,
the KV read by attention and the KV written. Every uncertain constant (efficiencies,
latencies, overheads) comes from the :class:`~autotune.deploy.SimProfile`; docs/simulator.md
gives each one's reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.deploy import Deployment, SimProfile
from autotune.deploy.memory import capture_sizes
from autotune.sim.quirks import NONE, Quirks

EAGER_KERNELS_PER_LAYER = 14  # norms, qkv, rope, attention, o, 2 all-reduces, gate_up, act, down, adds
DEQUANT_TILE_ROWS = 32  # query rows (tokens x query heads per KV head) of one CPU attention tile


@dataclass(frozen=True)
class StepCost:
    """Linear pieces of a step's cost, so a run of k decode steps can be summed exactly."""

    flops: float
    bytes: float
    fixed_s: float  # all-reduce + launch + CPU overhead


class PerfModel:
    def __init__(self, dep: Deployment, profile: SimProfile, quirks: Quirks = NONE, field: float = 1.0) -> None:
        """``quirks``: a truth's structural departures (autotune/sim/quirks.py; none for
        autotune's own model); ``field``: its smooth random field at this config."""
        a, g, tp, p = dep.arch, dep.gpu, dep.tp, profile
        self.dep = dep
        self.quirks = quirks
        self.quirky = quirks.active  # checked once: the step-time path is hot
        self.scale = field  # on every step time
        fp8_kv = dep.config.cache.kv_cache_dtype.startswith("fp8")
        self.fp8_kv_slow = fp8_kv and not g.fp8_tflops  # stored in fp8, dequantised to compute
        self.rate = g.peak_matmul_flops(dep.precision) * p.compute_eff
        # Attention runs in the KV cache's dtype on bf16 tensor cores.
        self.attn_rate = g.peak_matmul_flops("bf16") * p.compute_eff
        self.bw = g.hbm_tb_s * 1e12 * p.hbm_eff
        self.weight_bytes = a.weight_bytes_per_gpu(dep.precision, tp)
        self.kv_tok = dep.kv_bytes_per_token
        self.gemm_flops_tok = a.matmul_flops_per_token(tp)
        self.lm_flops_seq = a.lm_head_flops_per_seq(tp)
        self.attn_coef = 4.0 * a.num_layers * (a.num_heads / tp) * a.head_dim
        self.layers = a.num_layers
        self.hidden = a.hidden_size
        self.tp = tp
        sizes = capture_sizes(dep)
        self.capture = sizes
        self.max_graph_batch = max(sizes) if sizes else 0
        custom_ar = not dep.config.parallel.disable_custom_all_reduce
        self.ar_latency = (g.link_latency_us * p.link_latency_scale if custom_ar else p.nccl_latency_us) * 1e-6
        self.link = g.link_gb_s * 1e9 * p.link_eff
        self.launch_s = self.layers * EAGER_KERNELS_PER_LAYER * p.eager_launch_us * 1e-6
        self.piecewise_frac = p.piecewise_launch_frac
        self.cpu_step_s = p.cpu_step_us * 1e-6
        self.cpu_seq_s = p.cpu_seq_us * 1e-6
        # A CPU host's fp8 KV: each prefill query tile dequantises the context it attends to (module doc).
        elements = dep.kv_bytes_per_token / dep.kv_dtype_bytes
        self.kv_dequant_s = elements * p.kv_fp8_dequant_ns * 1e-9 if self.fp8_kv_slow else 0.0
        self.kv_quant_s = elements * p.kv_fp8_quant_ns * 1e-9 if self.fp8_kv_slow else 0.0  # per token written
        self.tile_tokens = DEQUANT_TILE_ROWS * a.num_kv_heads / a.num_heads  # query tokens per tile

    def all_reduce_s(self, tokens: int) -> float:
        if self.tp == 1:
            return 0.0
        msg = tokens * self.hidden * 2
        per = self.ar_latency + 2 * (self.tp - 1) / self.tp * msg / self.link
        return 2 * self.layers * per

    def fixed_s(self, tokens: int, seqs: int, decode_only: bool) -> float:
        # CUDA graphs replay whole decode batches up to the largest captured size; mixed
        # prefill batches run piecewise graphs (attention outside), so they pay part of it.
        if self.max_graph_batch and decode_only and seqs <= self.max_graph_batch:
            launch = 0.0
        elif self.max_graph_batch and tokens <= self.max_graph_batch:
            launch = self.piecewise_frac * self.launch_s
        else:
            launch = self.launch_s
        cpu = self.cpu_step_s + self.cpu_seq_s * seqs * self.quirks.cpu_seq_factor(seqs)
        return self.all_reduce_s(tokens) + launch + cpu

    def cost(self, tokens: int, seqs: int, attn_work: float, kv_read_tokens: int, decode_only: bool,
             logit_rows: int = 0) -> StepCost:
        """``attn_work`` = sum over sequences of new x (context_before + (new + 1) / 2);
        ``logit_rows``: prompt rows the LM head also runs over (prompt logprobs)."""
        q = self.quirks
        rows = q.gemm_rows(tokens, decode_only, self.capture) if self.quirky else tokens
        flops_gemm = self.gemm_flops_tok * rows + self.lm_flops_seq * (seqs + logit_rows)
        attn = self.attn_coef * attn_work * (self.rate / self.attn_rate)
        kv_read = float(self.kv_tok * kv_read_tokens)
        if self.quirky:
            attn *= q.attention_scale(kv_read_tokens / max(seqs, 1), self.fp8_kv_slow)
            kv_read *= q.kv_read_scale(self.fp8_kv_slow)
        byts = self.weight_bytes + kv_read + self.kv_tok * tokens
        return StepCost(flops_gemm + attn, byts, self.fixed_s(tokens, seqs, decode_only) + self.kv_quant_s * tokens
                        + self.dequant_s(attn_work, kv_read_tokens))

    def dequant_s(self, attn_work: float, kv_read_tokens: int) -> float:
        """Time a CPU host spends dequantising an fp8 KV cache for a step's attention (0 elsewhere; the
        quantisation of what a step writes, ``kv_quant_s`` per token, is charged beside it).
        vLLM's CPU attention (TileGemm224<BFloat16, fp8>) dequantises every K and V tile it reads into a
        bf16 scratch tile, once per tile of query rows: a prefill chunk of n tokens after c reads about
        n (c + n / 2) / tile_tokens cache tokens, so the cost grows with new tokens x context. A decode
        step's single tile per sequence is left out: there fp8's halved KV bytes win (measured 0.8x of
        bf16's time, experiments/vllm_cpu/fp8_kernel.py), which the bytes term already gives it."""
        if not self.kv_dequant_s:
            return 0.0
        prefill_work = max(attn_work - kv_read_tokens, 0.0)  # attention beyond one read of each context
        return self.kv_dequant_s * prefill_work / self.tile_tokens

    def decode_growth(self, seqs: int, kv_read_tokens: int) -> tuple[float, float]:
        """(FLOPs, bytes) a decode step of ``seqs`` sequences gains per step as each reads one
        more token of KV; a truth's attention shape is taken at the run's first step."""
        d_flops = self.attn_coef * seqs * (self.rate / self.attn_rate)
        d_bytes = float(self.kv_tok * seqs)
        q = self.quirks
        if self.quirky:
            d_flops *= q.attention_scale(kv_read_tokens / max(seqs, 1), self.fp8_kv_slow)
            d_bytes *= q.kv_read_scale(self.fp8_kv_slow)
        return d_flops, d_bytes

    def time(self, c: StepCost) -> float:
        return (max(c.flops / self.rate, c.bytes / self.bw) + c.fixed_s) * self.scale

    def decode_run_s(self, c0: StepCost, d_flops: float, d_bytes: float, k: int) -> float:
        """Sum of k consecutive decode steps whose FLOPs and bytes grow by d_* per step
        (the KV each sequence reads grows by one token a step): sum of a max of two
        arithmetic series, split where they cross."""
        a1, b1 = c0.flops / self.rate, d_flops / self.rate
        a2, b2 = c0.bytes / self.bw, d_bytes / self.bw
        total = k * c0.fixed_s
        return (total + _sum_max_linear(a1, b1, a2, b2, k)) * self.scale


def _arith(a: float, b: float, j0: int, j1: int) -> float:
    """sum_{j=j0}^{j1-1} (a + b j)."""
    n = j1 - j0
    if n <= 0:
        return 0.0
    return n * a + b * (j0 + j1 - 1) * n / 2


def _sum_max_linear(a1: float, b1: float, a2: float, b2: float, k: int) -> float:
    if b1 == b2:
        return _arith(max(a1, a2), b1, 0, k)
    cross = (a2 - a1) / (b1 - b2)  # where line 1 overtakes line 2 (or the reverse)
    split = min(max(int(cross) + 1, 0), k) if cross >= 0 else 0
    first_is_1 = a1 >= a2  # which line is on top before the crossing
    if split <= 0 or split >= k:
        # No crossing inside [0, k): the larger line at the midpoint wins throughout.
        mid = (k - 1) / 2
        return _arith(a1, b1, 0, k) if a1 + b1 * mid >= a2 + b2 * mid else _arith(a2, b2, 0, k)
    head = _arith(a1, b1, 0, split) if first_is_1 else _arith(a2, b2, 0, split)
    tail = _arith(a2, b2, split, k) if first_is_1 else _arith(a1, b1, split, k)
    return head + tail

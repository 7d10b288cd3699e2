"""NVML sampler: memory used and utilisation per GPU, in a background thread.

Only the GPUs in CUDA_VISIBLE_DEVICES are watched (Ray sets it per worker to its GPU pair);
entries are NVML indices or ``GPU-<uuid>``. Without a driver or library (a CPU machine)
the sampler says so (``available=False`` and a reason) and reports no numbers at all.

``nvml`` can be injected (any object with pynvml's functions) so the logic is testable
without a GPU; production uses the real ``pynvml`` module from nvidia-ml-py.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.telemetry.series import thin

GIB = 1024**3


class GpuMemoryNotReleased(RuntimeError):
    """A worker-level failure: GPU memory did not return to baseline after a trial's server stopped."""


def visible_device_ids(env: Mapping[str, str] | None = None) -> list[str] | None:
    """Entries of CUDA_VISIBLE_DEVICES, or None when unset (all GPUs)."""
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return [x.strip() for x in raw.split(",") if x.strip()]


@dataclass
class NvmlReport:
    available: bool
    reason: str = ""  # why not available
    gpus: list[str] = field(default_factory=list)  # device identifiers as NVML names them
    baseline_used_gib: list[float] = field(default_factory=list)
    peak_used_gib: list[float] = field(default_factory=list)
    peak_util_pct: list[float] = field(default_factory=list)
    mean_util_pct: list[float] = field(default_factory=list)
    # (seconds since start, used GiB per GPU, utilisation % per GPU)
    timeline: list[tuple[float, list[float], list[float]]] = field(default_factory=list)

    def timeline_downsampled(self, points: int = 200) -> list[tuple[float, list[float], list[float]]]:
        return thin(self.timeline, points)


class NvmlSampler:
    """Sample the visible GPUs every ``interval_s`` between :meth:`start` and :meth:`stop`."""

    def __init__(self, devices: list[str] | None = None, interval_s: float = 0.5, nvml: Any = None,
                 env: Mapping[str, str] | None = None):
        self.interval_s = interval_s
        self.available = False
        self.reason = ""
        self._nvml = nvml
        self._handles: list[Any] = []
        self.gpus: list[str] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._samples: list[tuple[float, list[float], list[float]]] = []
        self._t0 = 0.0
        self.baseline_used_gib: list[float] = []
        devices = devices if devices is not None else visible_device_ids(env)
        self._init(devices)

    def _init(self, devices: list[str] | None) -> None:
        if self._nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError as e:
                self.reason = f"nvml unavailable: pynvml not importable ({e})"
                return
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
        except Exception as e:  # pynvml.NVMLError and friends: no driver, no library
            self.reason = f"nvml unavailable: {type(e).__name__}: {e}"
            return
        try:
            if devices is None:
                devices = [str(i) for i in range(nv.nvmlDeviceGetCount())]
            for d in devices:
                if d.isdigit():
                    h = nv.nvmlDeviceGetHandleByIndex(int(d))
                else:
                    # Ray may hand out UUIDs; MIG devices (MIG-...) are not supported by index here.
                    h = nv.nvmlDeviceGetHandleByUUID(d)
                self._handles.append(h)
                self.gpus.append(d)
        except Exception as e:
            self.reason = f"nvml unavailable: cannot open GPUs {devices}: {type(e).__name__}: {e}"
            self._handles, self.gpus = [], []
            return
        if not self._handles:
            self.reason = "nvml unavailable: no visible GPUs"
            return
        self.available = True

    def read(self) -> tuple[list[float], list[float]]:
        """Memory used (GiB) and utilisation (%) of each visible GPU, right now."""
        if not self.available:
            return [], []
        nv = self._nvml
        used, util = [], []
        for h in self._handles:
            used.append(nv.nvmlDeviceGetMemoryInfo(h).used / GIB)
            try:
                util.append(float(nv.nvmlDeviceGetUtilizationRates(h).gpu))
            except Exception:
                util.append(float("nan"))  # some devices (MIG) do not report utilisation
        return used, util

    def record_baseline(self) -> list[float]:
        self.baseline_used_gib = self.read()[0]
        return self.baseline_used_gib

    def wait_for_baseline(self, tolerance_gib: float = 0.5, timeout_s: float = 120.0, poll_s: float = 1.0) -> float:
        """Block until every GPU is within ``tolerance_gib`` of its baseline; seconds waited.

        Raises :class:`GpuMemoryNotReleased` after ``timeout_s``: a leaked engine process
        would make every later trial on this worker start with less memory than it thinks.
        """
        if not self.available or not self.baseline_used_gib:
            return 0.0
        start = time.monotonic()
        while True:
            used = self.read()[0]
            over = [(g, u, b) for g, u, b in zip(self.gpus, used, self.baseline_used_gib, strict=True)
                    if u > b + tolerance_gib]
            if not over:
                return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                detail = ", ".join(f"GPU {g}: {u:.2f} GiB used vs {b:.2f} GiB baseline" for g, u, b in over)
                raise GpuMemoryNotReleased(
                    f"GPU memory did not return to baseline within {timeout_s:g}s after the server stopped "
                    f"({detail}); a process may still hold it (check nvidia-smi). Failing this worker.")
            time.sleep(poll_s)

    def start(self) -> None:
        if not self.available or self._thread is not None:
            return
        self._t0 = time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                used, util = self.read()
            except Exception:
                used, util = [], []
            if used:
                with self._lock:
                    self._samples.append((time.monotonic() - self._t0, used, util))
            self._stop.wait(self.interval_s)

    def stop(self) -> NvmlReport:
        """Stop sampling and report; samples are cleared for the next trial."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
        if not self.available:
            return NvmlReport(available=False, reason=self.reason)
        with self._lock:
            samples, self._samples = self._samples, []
        n = len(self._handles)
        peak = [max((s[1][i] for s in samples), default=0.0) for i in range(n)]
        utils = [[s[2][i] for s in samples if s[2][i] == s[2][i]] for i in range(n)]
        return NvmlReport(
            available=True,
            gpus=list(self.gpus),
            baseline_used_gib=list(self.baseline_used_gib),
            peak_used_gib=[round(p, 4) for p in peak] if samples else [],
            peak_util_pct=[max(u, default=0.0) for u in utils] if samples else [],
            mean_util_pct=[sum(u) / len(u) if u else 0.0 for u in utils] if samples else [],
            timeline=samples,
        )

    def close(self) -> None:
        self.stop()
        if self.available:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass
            self.available = False
            self.reason = "closed"

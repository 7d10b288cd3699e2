"""NVML sampler and GPU-memory baseline. The GPU is FAKED (an injected nvml module) except in the
first test, which uses the real pynvml on this GPU-less machine: it must say unavailable."""

from __future__ import annotations

import types

import pytest

from autotune.backends.vllm import VllmBackend
from autotune.telemetry import GpuMemoryNotReleased, NvmlSampler, visible_device_ids
from autotune.telemetry.nvml import GIB
from tests.fakes.helpers import fake_request


def test_real_pynvml_without_a_driver_reports_unavailable():
    s = NvmlSampler()
    if s.available:
        pytest.skip("this machine has NVML; the unavailable path is not testable here")
    s.start()
    report = s.stop()
    assert report.available is False and report.reason.startswith("nvml unavailable")
    assert report.peak_used_gib == [] and report.timeline == [] and s.read() == ([], [])


class FakeNvml:
    """pynvml's functions over a dict of per-GPU used bytes (a fake: no GPU here)."""

    def __init__(self, used_gib: dict[int, float], fail_init: bool = False):
        self.used = {i: v * GIB for i, v in used_gib.items()}
        self.fail_init = fail_init
        self.opened: list[int] = []

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.used)

    def nvmlDeviceGetHandleByIndex(self, i):
        self.opened.append(i)
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return int(uuid.rsplit("-", 1)[1])

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=self.used[h], total=80 * GIB)

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=50, memory=10)


def test_only_visible_gpus_are_sampled_and_peak_is_kept():
    nv = FakeNvml({0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0})
    s = NvmlSampler(nvml=nv, env={"CUDA_VISIBLE_DEVICES": "2,GPU-x-3"}, interval_s=0.01)
    assert s.available and s.gpus == ["2", "GPU-x-3"]
    s.start()
    nv.used[2] = 70 * GIB
    import time

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(x[1][0] == 70 for x in s._samples):
        time.sleep(0.01)
    nv.used[2] = 3 * GIB
    r = s.stop()
    assert r.peak_used_gib == [70.0, 4.0] and r.peak_util_pct == [50.0, 50.0] and r.timeline
    assert visible_device_ids({}) is None and visible_device_ids({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_init_failure_is_unavailable_with_reason():
    s = NvmlSampler(nvml=FakeNvml({0: 1.0}, fail_init=True))
    assert not s.available and "NVML Shared Library Not Found" in s.reason


def test_baseline_wait_passes_when_memory_returns_and_fails_the_worker_when_not():
    nv = FakeNvml({0: 0.5})
    s = NvmlSampler(nvml=nv, env={"CUDA_VISIBLE_DEVICES": "0"})
    s.record_baseline()
    nv.used[0] = 0.6 * GIB  # within tolerance
    assert s.wait_for_baseline(tolerance_gib=0.5, timeout_s=1, poll_s=0.01) >= 0
    nv.used[0] = 40 * GIB  # a leaked engine
    with pytest.raises(GpuMemoryNotReleased, match="GPU 0: 40.00 GiB used vs 0.50 GiB baseline"):
        s.wait_for_baseline(tolerance_gib=0.5, timeout_s=0.2, poll_s=0.01)


def test_backend_records_peak_and_refuses_a_trial_on_leaked_memory(tmp_path, monkeypatch):
    # Fake GPU (injected nvml) and fake vLLM server: the backend's baseline logic end to end.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    nv = FakeNvml({0: 9.0, 1: 0.25})
    b = VllmBackend(nvml=nv, gpu_release_timeout_s=0.3)
    try:
        res = b.run_trial(fake_request(tmp_path))
        assert res.extra["nvml"]["available"] and res.peak_mem_gib == [0.25]
        assert res.extra["gpu_memory_wait"]["baseline_used_gib"] == [0.25]
        nv.used[1] = 30 * GIB  # the previous server's memory never came back
        with pytest.raises(GpuMemoryNotReleased):
            b.run_trial(fake_request(tmp_path, trial=1))
    finally:
        b.close()

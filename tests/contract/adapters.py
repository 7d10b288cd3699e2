"""One adapter per backend: the same scenarios, built the way each backend can produce them.

The contract's assertions (test_backend_contract.py) are written once, against what every
adapter returns: the request it ran and the backend's TrialResult. An adapter chooses the
deployment (model, flags, workload) for its backend, since a 72B model on the simulator and
a tiny model on vLLM's CPU build need different sizes, and the scenario means the same on
each:

* ``healthy(prefix_caching, early_stop)``: a benchmark that completes (unless the rule
  stops it) on a workload whose prompts share prefixes;
* ``startup_failure(kind)``: ``kv_too_small`` (the KV cache cannot hold one
  ``max_model_len`` request: vLLM refuses to start) or ``invalid_value``
  (``kv_cache_dtype=fp7``, a value vLLM's argument parser rejects);
* ``engine_death()``: the engine dies mid-run on every start, ``max_restarts`` = 1.

Each scenario runs once per session and is shared by the tests that read it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.backends.base import Backend, ServerSpec, TrialRequest
from autotune.backends.sim import SimBackend
from autotune.backends.vllm import VllmBackend
from autotune.early_stop import EarlyStopRule
from autotune.results import FailureClass, TrialResult
from autotune.workload import LengthDist, WorkloadSpec
from tests.fakes.helpers import fake_request
from tests.integration.conftest import TINY_FLAGS, cpu_server, tiny_workload

STARTUP_FAILURES = ("kv_too_small", "invalid_value")


@dataclass
class Run:
    request: TrialRequest
    result: TrialResult


class Adapter:
    """What the contract needs from a backend; subclasses build the requests."""

    name: str
    death_class: FailureClass  # what an engine death mid-run is on this backend
    block_size: int  # the KV block size the healthy trials run with

    def __init__(self) -> None:
        self._runs: dict[tuple[Any, ...], Run] = {}

    def _once(self, key: tuple[Any, ...], make: Callable[[], Run]) -> Run:
        if key not in self._runs:
            self._runs[key] = make()
        return self._runs[key]

    def healthy(self, prefix_caching: bool, early_stop: EarlyStopRule) -> Run:
        return self._once(("healthy", prefix_caching, early_stop), lambda: self._healthy(prefix_caching, early_stop))

    def startup_failure(self, kind: str) -> Run:
        return self._once(("startup", kind), lambda: self._startup_failure(kind))

    def engine_death(self) -> Run:
        return self._once(("death",), self._engine_death)

    def max_model_len(self, request: TrialRequest) -> int:
        return int(request.flags["max_model_len"])

    def _healthy(self, prefix_caching: bool, early_stop: EarlyStopRule) -> Run:
        raise NotImplementedError

    def _startup_failure(self, kind: str) -> Run:
        raise NotImplementedError

    def _engine_death(self) -> Run:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _run(backend: Backend, req: TrialRequest) -> Run:
    return Run(req, backend.run_trial(req))


class SimAdapter(Adapter):
    """The simulator: Qwen2.5-72B at TP2 on A100-80GB pairs.

    CUDA graphs are kept outside the KV budget (vLLM before v0.21, or the env var at 0), the
    accounting under which gpu_memory_utilization 0.975 leaves the thin headroom the
    engine-death case needs; with vLLM 0.32's estimate on, that config survives."""

    name = "sim"
    death_class = FailureClass.RUNTIME_OOM
    block_size = 16
    SERVER = ServerSpec(model="Qwen/Qwen2.5-72B-Instruct", gpu="A100-80GB",
                        env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"})
    FLAGS: dict[str, Any] = {"tensor_parallel_size": 2, "max_model_len": 8192, "dtype": "bfloat16",
                             "block_size": 16, "gpu_memory_utilization": 0.92}

    def __init__(self) -> None:
        super().__init__()
        self.backend = SimBackend()

    def _request(self, flags: dict[str, Any], workload: WorkloadSpec, seed: int = 0,
                 early_stop: EarlyStopRule | None = None) -> TrialRequest:
        return TrialRequest(0, self.SERVER, {**self.FLAGS, **flags}, workload, seed, early_stop)

    def _healthy(self, prefix_caching: bool, early_stop: EarlyStopRule) -> Run:
        workload = WorkloadSpec(num_requests=120, concurrency=8,
                                prompt_len=LengthDist(dist="uniform", mean=288, min=64, max=512),
                                output_len=LengthDist(dist="uniform", mean=72, min=16, max=128),
                                shared_prefix_fraction=0.5, shared_prefix_len=1024)
        return _run(self.backend, self._request({"enable_prefix_caching": prefix_caching}, workload,
                                                early_stop=early_stop))

    def _startup_failure(self, kind: str) -> Run:
        flags = {"kv_too_small": {"max_model_len": 32768, "kv_cache_memory_bytes": 2**30},
                 "invalid_value": {"kv_cache_dtype": "fp7"}}[kind]
        return _run(self.backend, self._request(flags, WorkloadSpec(num_requests=20)))

    def _engine_death(self) -> Run:
        """The simulator's deaths are drawn from its OOM hazard, not forced: at
        gpu_memory_utilization 0.975 with CUDA graphs its headroom is thin (tests/sim). The
        scenario is the first trial seed on which every start dies after serving something."""
        workload = WorkloadSpec(num_requests=400, concurrency=16, max_restarts=1,
                                prompt_len=LengthDist(dist="lognormal", mean=300, sigma=0.8, min=16, max=3000),
                                output_len=LengthDist(dist="lognormal", mean=160, sigma=0.6, min=8, max=1024),
                                shared_prefix_fraction=0.8, shared_prefix_len=1024)
        flags = {"gpu_memory_utilization": 0.975, "enable_prefix_caching": False}
        for seed in range(20):
            run = _run(self.backend, self._request(flags, workload, seed))
            if run.result.crashes > workload.max_restarts and run.result.metrics()["requests_ok"] > 0:
                return run
        raise AssertionError("no seed in 0..19 gives an engine death on every start: the simulator's "
                             "OOM hazard at gpu_memory_utilization 0.975 changed")


class FakeAdapter(Adapter):
    """The fake vLLM server (tests/fakes), started through VllmBackend's real code path.
    Fake because: a CUDA OOM at runtime cannot happen on vLLM's CPU build."""

    name = "fake"
    death_class = FailureClass.RUNTIME_OOM
    block_size = 16

    def __init__(self, tmp: Path) -> None:
        super().__init__()
        self.tmp = tmp
        self._healthy_runs = 0  # each run gets its own fake-state directory
        self.backend = VllmBackend(hang_timeout_s=5.0, stop_grace_s=5.0, watch_interval_s=0.2,
                                   metrics_interval_s=0.2)

    def _request(self, name: str, workload: WorkloadSpec, flags: dict[str, Any] | None = None,
                 early_stop: EarlyStopRule | None = None, **cfg: Any) -> TrialRequest:
        flags = {"max_num_seqs": 8, "block_size": self.block_size, "max_model_len": 2048, **(flags or {})}
        return fake_request(self.tmp / name, workload=workload, flags=flags, early_stop=early_stop, **cfg)

    @staticmethod
    def _workload(**kw: Any) -> WorkloadSpec:
        base: dict[str, Any] = dict(num_requests=24, concurrency=4,
                                    prompt_len=LengthDist(dist="uniform", mean=24, min=8, max=40),
                                    output_len=LengthDist(dist="uniform", mean=12, min=4, max=20),
                                    shared_prefix_fraction=0.75, shared_prefix_len=48, max_restarts=3,
                                    request_timeout_s=30.0, token_id_high=1000)
        return WorkloadSpec(**{**base, **kw})

    def _healthy(self, prefix_caching: bool, early_stop: EarlyStopRule) -> Run:
        self._healthy_runs += 1
        name = f"healthy-{self._healthy_runs}"
        return _run(self.backend, self._request(name, self._workload(), {"enable_prefix_caching": prefix_caching},
                                                early_stop=early_stop))

    def _startup_failure(self, kind: str) -> Run:
        wl = self._workload(num_requests=20)
        if kind == "kv_too_small":
            return _run(self.backend, self._request(kind, wl, scenario="startup_oom_len"))
        return _run(self.backend, self._request(kind, wl, {"kv_cache_dtype": "fp7"}))

    def _engine_death(self) -> Run:
        return _run(self.backend, self._request("death", self._workload(num_requests=40, max_restarts=1),
                                                scenario="runtime_oom", fail_after=3, token_delay_s=0.01))

    def close(self) -> None:
        self.backend.close()


class RealVllmAdapter(Adapter):
    """vLLM's CPU build serving the tiny dummy Qwen2 (tests/integration/conftest.py).
    An engine death is a SIGKILL of the server's process group: classified as a crash."""

    name = "vllm"
    death_class = FailureClass.CRASH
    block_size = 32  # the CPU attention backend takes multiples of 32
    KILL_AFTER = 4  # answers per server start before its process group is killed

    def __init__(self, python: str, model: Path) -> None:
        super().__init__()
        self.python = python
        self.model = model
        # A large KV cache (1 GiB: VLLM_CPU_KVCACHE_SPACE) so nothing is evicted or preempted.
        self.flags = {k: v for k, v in TINY_FLAGS.items() if k != "num_gpu_blocks_override"}

    def _request(self, flags: dict[str, Any], workload: WorkloadSpec,
                 early_stop: EarlyStopRule | None = None) -> TrialRequest:
        return TrialRequest(0, cpu_server(self.model, self.python), {**self.flags, **flags}, workload,
                            early_stop=early_stop)

    def _healthy(self, prefix_caching: bool, early_stop: EarlyStopRule) -> Run:
        req = self._request({"enable_prefix_caching": prefix_caching},
                            tiny_workload(shared_prefix_fraction=0.75, shared_prefix_len=64), early_stop)
        return self._run(req)

    def _startup_failure(self, kind: str) -> Run:
        # 8 blocks of 32 tokens, one reserved: 224 tokens < max_model_len 256.
        flags = {"kv_too_small": {"num_gpu_blocks_override": 8}, "invalid_value": {"kv_cache_dtype": "fp7"}}[kind]
        return self.failed_start(flags)

    def failed_start(self, flags: dict[str, Any]) -> Run:
        """A start with ``flags`` over the tiny ones that vLLM refuses, run once per session:
        tests/integration/test_vllm_cpu.py reads the contract's two as well as its own."""
        key = ("failed_start", tuple(sorted(flags.items())))
        return self._once(key, lambda: self._run(self._request(flags, tiny_workload(num_requests=20))))

    def _engine_death(self) -> Run:
        answered: dict[int, int] = {}
        pids: dict[int, int] = {}

        def kill_each_start(name: str, info: dict[str, Any]) -> None:
            if name == "server_started":
                pids[info["start"]] = info["pid"]
            elif name == "request_done":
                answered[info["start"]] = answered.get(info["start"], 0) + 1
                if answered[info["start"]] == self.KILL_AFTER:
                    os.killpg(pids[info["start"]], signal.SIGKILL)

        return self._run(self._request({}, tiny_workload(max_restarts=1)), events=kill_each_start)

    @staticmethod
    def _run(req: TrialRequest, events: Callable[[str, dict[str, Any]], None] | None = None) -> Run:
        backend = VllmBackend(events=events)
        try:
            return _run(backend, req)
        finally:
            backend.close()

"""The real vLLM backend: one trial = start a server, run the fixed benchmark, classify, stop.

Engine deaths follow the simulator's semantics exactly: requests in flight when the engine
dies get ``oom`` (runtime OOM) or ``error`` (any other death, a hang included); unsent
requests are held while a new server starts (its startup counts in ``gpu_time_s``); after
``workload.max_restarts`` restarts the remaining requests count as ``oom``/``error`` like
the last death; ``crashes`` counts engine deaths.

No Optuna, Ray or MLflow here: plain data in, a TrialResult out. A failed trial is a
result; only a worker-level problem (GPU memory not coming back) raises.

The worker may run on another node than the driver, so everything the trial produced (the
server log of every start, the GPU memory timeline, the /metrics snapshots) comes back in
``TrialResult.artifacts``. The only file written is the server log, in a scratch directory
on this node that is removed before :meth:`VllmBackend.run_trial` returns.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import numpy as np

from autotune.backends.base import EventHook, TrialRequest
from autotune.backends.vllm.classify import (
    Classification,
    classify_death,
    classify_startup,
    kv_cache_tokens_from_log,
    non_default_args_from_log,
    read_log_lines,
)
from autotune.backends.vllm.metrics import MetricsDelta, Snapshot, parse_metrics, snapshot_row
from autotune.backends.vllm.server import (
    ServerProcess,
    build_command,
    free_port,
    launch_header,
    served_model_name,
)
from autotune.backends.vllm.weights import prefetch_weights
from autotune.early_stop import StopTally
from autotune.engine.config import world_size
from autotune.loadgen import LoadGenerator, PhaseEnd, RequestOutcome
from autotune.results import (
    FailureClass,
    RequestRecord,
    RequestStatus,
    TrialResult,
    TrialStatus,
    cap_log,
    startup_failure,
)
from autotune.telemetry import NvmlReport, NvmlSampler, thin
from autotune.workload import generate_trace

T = TypeVar("T")
# Points kept of the GPU timeline and of the /metrics snapshots: enough for the run's shape.
SERIES_POINTS = 500


async def scrape_metrics(session: aiohttp.ClientSession, base_url: str, timeout_s: float = 10.0) -> Snapshot | None:
    try:
        async with session.get(base_url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            if r.status != 200:
                return None
            return parse_metrics(await r.text())
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


class _Scrapes:
    """Every /metrics scrape of one trial, kept as a snapshot row (``t_s`` since the trial
    started, the server ``start``, then :func:`snapshot_row`'s counters and gauges)."""

    def __init__(self, session: aiohttp.ClientSession, t0: float):
        self.session = session
        self.t0 = t0
        self.rows: list[dict[str, Any]] = []

    async def scrape(self, server: ServerProcess, start_no: int, timeout_s: float = 10.0) -> Snapshot | None:
        snap = await scrape_metrics(self.session, server.base_url, timeout_s)
        if snap is not None:
            self.rows.append({"t_s": round(time.monotonic() - self.t0, 3), "start": start_no, **snapshot_row(snap)})
        return snap


class _ServerWatch:
    """The load generator's view of engine health; also samples /metrics gauges while it runs."""

    def __init__(self, server: ServerProcess, start_no: int, scrapes: _Scrapes, delta: MetricsDelta,
                 metrics_interval_s: float):
        self.server = server
        self.start_no = start_no
        self.scrapes = scrapes
        self.delta = delta
        self.metrics_interval_s = metrics_interval_s
        self.last: Snapshot | None = None
        self._last_scrape = 0.0

    async def dead(self) -> str | None:
        for attempt in range(2):
            rc = self.server.exit_code()
            if rc is not None:
                return f"server process exited with status {rc}"
            probe = await self.server.health(self.scrapes.session)
            if probe.alive:
                if probe.ok:
                    await self._maybe_scrape()
                return None
            if attempt == 0:
                await asyncio.sleep(0.5)  # one confirmation: a refused connect can race a restarting listener
        rc = self.server.exit_code()
        if rc is not None:
            return f"server process exited with status {rc}"
        return f"/health failing ({probe.describe()})"

    async def _maybe_scrape(self) -> None:
        now = time.monotonic()
        if now - self._last_scrape < self.metrics_interval_s:
            return
        self._last_scrape = now
        snap = await self.scrapes.scrape(self.server, self.start_no, timeout_s=5.0)
        if snap is not None:
            self.last = snap
            self.delta.observe_gauges(snap)


def _run_coro(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, or in a fresh thread when this thread already runs a loop (async Ray actors)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name="vllm-trial")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _local_model_config(model: str) -> dict[str, Any]:
    p = Path(model) / "config.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        pass
    try:  # a hub model already in the cache (huggingface_hub comes with vLLM, not with us)
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(model, "config.json")
        if isinstance(path, str):
            return json.loads(Path(path).read_text())
    except Exception:
        pass
    return {}


def _vocab_size(model: str, config: dict[str, Any]) -> int | None:
    """Highest safe token ID + 1: the smaller of the model's and the tokenizer's vocabulary."""
    sizes = [int(config["vocab_size"])] if config.get("vocab_size") else []
    tok = Path(model) / "tokenizer.json"
    if tok.is_file():
        try:
            data = json.loads(tok.read_text())
            sizes.append(len(data["model"]["vocab"]) + len(data.get("added_tokens") or []))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return min(sizes) if sizes else None


def _read_log(path: Path) -> str:
    """The server log of every start of the trial, capped with its tail kept (results.cap_log)."""
    try:
        return cap_log(path.read_text(errors="replace"))
    except OSError:  # the server never got as far as a log (nothing was started)
        return ""


def _sent_record(o: RequestOutcome, casualty: RequestStatus | None = None, why: str = "") -> RequestRecord:
    """The record of a request that was sent, with the options it carried. A ``casualty`` of
    an engine death gets that status, and no latency or output: the engine lost it."""
    opts = o.options
    if casualty is not None:
        status, e2e, out, error = casualty, None, 0, why
    elif o.ok:
        status, e2e, out, error = RequestStatus.OK, o.e2e_s, o.output_tokens, ""
    else:
        status, e2e, out, error = RequestStatus.ERROR, None, o.output_tokens, f"{o.error_kind}: {o.error}"
    return RequestRecord(o.index, o.send_s, o.ttft_s, e2e, o.prompt_tokens, out, status, error[:300],
                         opts.prompt_logprobs, opts.logprobs, opts.n, o.streamed)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


class VllmBackend:
    """Real vLLM trials. One instance per worker: it remembers the GPUs' baseline memory.

    ``scratch_root`` is where each trial's scratch directory goes (default: the system's
    temporary directory): a path on the worker's own node, never one of the driver's.
    """

    name = "vllm"

    def __init__(
        self,
        hang_timeout_s: float = 120.0,
        stop_grace_s: float = 30.0,
        watch_interval_s: float = 0.5,
        metrics_interval_s: float = 2.0,
        gpu_release_timeout_s: float = 180.0,
        gpu_release_tolerance_gib: float = 0.5,
        nvml: Any = None,
        events: EventHook | None = None,
        scratch_root: str | None = None,
    ):
        self.hang_timeout_s = hang_timeout_s
        self.stop_grace_s = stop_grace_s
        self.watch_interval_s = watch_interval_s
        self.metrics_interval_s = metrics_interval_s
        self.gpu_release_timeout_s = gpu_release_timeout_s
        self.gpu_release_tolerance_gib = gpu_release_tolerance_gib
        self.scratch_root = scratch_root
        self._nvml_module = nvml
        self._sampler: NvmlSampler | None = None
        self.events = events
        self._servers: list[ServerProcess] = []  # running now (stopped on close)
        self._trial_starts: list[ServerProcess] = []  # every start of the current trial

    # -- helpers ---------------------------------------------------------------------------

    def _emit(self, name: str, **info: Any) -> None:
        if self.events is not None:
            self.events(name, info)

    def _gpu_ready(self, env: dict[str, str]) -> dict[str, Any]:
        """Baseline on the first trial; before later ones, wait for memory to come back to it."""
        if self._sampler is None:
            self._sampler = NvmlSampler(nvml=self._nvml_module, env=env)
            if self._sampler.available:
                self._sampler.record_baseline()
                return {"baseline_used_gib": self._sampler.baseline_used_gib, "waited_s": 0.0}
            return {"unavailable": self._sampler.reason}
        if not self._sampler.available:
            return {"unavailable": self._sampler.reason}
        waited = self._sampler.wait_for_baseline(self.gpu_release_tolerance_gib, self.gpu_release_timeout_s)
        return {"baseline_used_gib": self._sampler.baseline_used_gib, "waited_s": round(waited, 3)}

    @staticmethod
    def _prefetch(req: TrialRequest) -> dict[str, Any]:
        try:
            w = prefetch_weights(req.server.model, req.server.download_dir, req.flags.get("load_format"),
                                 env=req.server.env)
        except Exception as e:  # no network, gated model: vLLM will say the same at startup
            return {"error": f"{type(e).__name__}: {e}"[:300]}
        return {"path": w.path, "downloaded": w.downloaded, "seconds": round(w.seconds, 3), "note": w.note}

    def _new_server(self, req: TrialRequest, env: dict[str, str], log: Path, start_no: int) -> ServerProcess:
        port = free_port(req.server.host)
        argv = build_command(req.server, req.flags, port)
        shown = {k: v for k, v in env.items() if k in req.server.env or k == "CUDA_VISIBLE_DEVICES"}
        srv = ServerProcess(argv=argv, env=env, log_path=log, host=req.server.host, port=port)
        note = f"trial {req.trial_number} server start {start_no}" + (" (restart)" if start_no else "")
        srv.start(header=launch_header(argv, shown, note))
        self._servers.append(srv)
        self._trial_starts.append(srv)
        self._emit("server_started", pid=srv.pid, port=port, start=start_no, base_url=srv.base_url)
        return srv

    def _stop(self, srv: ServerProcess) -> int | None:
        rc = srv.stop(self.stop_grace_s)
        if srv in self._servers:
            self._servers.remove(srv)
        return rc

    def _failed_start(self, req: TrialRequest, srv: ServerProcess,
                      why: str) -> tuple[Classification, int | None, list[str]]:
        """Stop a server that never became healthy; why (from this start's log), its exit
        status (None: it was still starting, a hang) and its log lines."""
        rc = srv.exit_code()  # read before stopping it: afterwards it is the stop's status
        self._stop(srv)
        lines = read_log_lines(srv.log_path, srv.log_offset)
        return classify_startup(lines, rc, why == "timeout", req.server.startup_timeout_s, srv.spawn_error), rc, lines

    # -- the trial -----------------------------------------------------------------------

    def run_trial(self, req: TrialRequest) -> TrialResult:
        env = {**os.environ, **req.server.env}
        gpu_wait = self._gpu_ready(env)  # may raise GpuMemoryNotReleased: a worker-level failure
        assert self._sampler is not None
        # This node's scratch space for the server log; the text travels back in the result.
        scratch = Path(tempfile.mkdtemp(prefix=f"autotune-trial-{req.trial_number}-", dir=self.scratch_root))
        try:
            self._emit("loading_weights")
            extra: dict[str, Any] = {"gpu_memory_wait": gpu_wait, "weights": self._prefetch(req)}
            self._trial_starts = []
            self._sampler.start()
            try:
                result = _run_coro(self._trial(req, env, scratch / "server.log", extra))
            finally:
                for srv in list(self._servers):
                    self._stop(srv)
                report = self._sampler.stop()
            self._attach_nvml(result, report)
            result.artifacts.server_log = _read_log(scratch / "server.log")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return result

    def _attach_nvml(self, result: TrialResult, report: NvmlReport) -> None:
        if not report.available:
            result.peak_mem_gib = []
            result.extra["nvml"] = {"available": False, "reason": report.reason}
            return
        result.peak_mem_gib = list(report.peak_used_gib)
        result.extra["nvml"] = {
            "available": True, "gpus": report.gpus, "baseline_used_gib": report.baseline_used_gib,
            "peak_used_gib": report.peak_used_gib, "peak_util_pct": report.peak_util_pct,
            "mean_util_pct": report.mean_util_pct, "samples": len(report.timeline),
        }
        result.artifacts.gpu_timeline = [{"t_s": t, "used_gib": used, "util_pct": util}
                                         for t, used, util in report.timeline_downsampled(SERIES_POINTS)]

    async def _trial(self, req: TrialRequest, env: dict[str, str], log: Path, extra: dict[str, Any]) -> TrialResult:
        async with aiohttp.ClientSession() as session:
            scrapes = _Scrapes(session, time.monotonic())
            result = await self._serve(req, env, log, extra, scrapes)
        result.artifacts.metrics_snapshots = thin(scrapes.rows, SERIES_POINTS)
        return result

    async def _serve(self, req: TrialRequest, env: dict[str, str], log: Path, extra: dict[str, Any],
                     scrapes: _Scrapes) -> TrialResult:
        spec = req.workload
        total = spec.num_requests
        config = _local_model_config(req.server.model)
        max_len = req.flags.get("max_model_len") or config.get("max_position_embeddings")
        trace = generate_trace(spec, max_model_len=int(max_len) if max_len else None)

        # First start: its time-to-ready is startup_s (weights were fetched before, not counted).
        srv = self._new_server(req, env, log, 0)
        ok, why = await srv.wait_ready(req.server.startup_timeout_s)
        if not ok:
            return self._startup_failed(req, srv, why, extra)
        startup_s = srv.ready_at - srv.started_at  # type: ignore[operator]
        self._emit("server_ready", pid=srv.pid, start=0, startup_s=startup_s)
        first_lines = read_log_lines(log, srv.log_offset)
        extra["vllm_non_default_args"] = non_default_args_from_log(first_lines)
        kv_tokens = kv_cache_tokens_from_log(first_lines)

        records: dict[int, RequestRecord] = {}
        tally = StopTally(req.early_stop, total)
        deaths: list[Classification] = []
        itl: list[float] = []
        mismatched = 0
        delta = MetricsDelta()
        start_no = 0

        def on_done(o: RequestOutcome) -> bool:
            tally.add(_sent_record(o))
            self._emit("request_done", index=o.index, ok=o.ok, e2e_s=o.e2e_s, start=start_no, done=tally.done)
            return tally.should_stop()

        gen = LoadGenerator(
            base_url=srv.base_url, model=served_model_name(req.server, req.flags), spec=spec, trace=trace,
            token_id_high=_vocab_size(req.server.model, config), hang_timeout_s=self.hang_timeout_s,
            watch_interval_s=self.watch_interval_s, on_done=on_done,
        )
        remaining = [t.index for t in trace]
        clock = 0.0
        duration = 0.0
        early_stopped = False
        leftover_status: RequestStatus | None = None
        leftover_reason = ""

        before = await scrapes.scrape(srv, start_no)
        while remaining:
            watch = _ServerWatch(srv, start_no, scrapes, delta, self.metrics_interval_s)
            gen.base_url = srv.base_url
            phase = await gen.run_phase(remaining, watch, clock)
            clock, duration = phase.clock_end_s, duration + phase.duration_s
            after = await scrapes.scrape(srv, start_no) if srv.exit_code() is None else None
            if after is not None:
                delta.observe_gauges(after)
            last = after or watch.last  # a dead server's counters: the last scrape while it lived
            if last is not None:
                delta.add_interval(before, last)
            casualties = set(phase.casualties)
            for idx, o in phase.outcomes.items():
                if idx in casualties:
                    continue
                records[idx] = _sent_record(o)
                if o.ok:
                    itl.extend(o.itl_s)
                    mismatched += o.output_tokens != o.expected_output_tokens
            remaining = phase.unsent
            if phase.end == PhaseEnd.COMPLETED:
                break
            if phase.end == PhaseEnd.EARLY_STOP:
                early_stopped = True
                leftover_status, leftover_reason = RequestStatus.NOT_RUN, "not sent: trial stopped early"
                break
            # The engine died or hung: stop what is left of it, then decide why from its log.
            self._stop(srv)
            cls = classify_death(read_log_lines(log, srv.log_offset), phase.reason, phase.end == PhaseEnd.HANG)
            deaths.append(cls)
            self._emit("engine_died", start=start_no, failure_class=str(cls.failure_class), reason=cls.reason,
                       casualties=len(casualties))
            status = RequestStatus.OOM if cls.failure_class == FailureClass.RUNTIME_OOM else RequestStatus.ERROR
            for idx in sorted(casualties):
                o = phase.outcomes[idx]
                records[idx] = _sent_record(o, status, f"in flight when the engine died ({cls.failure_class}): {o.error}")
                tally.add(records[idx])
            if not remaining:
                break
            if tally.should_stop():
                early_stopped = True
                leftover_status, leftover_reason = RequestStatus.NOT_RUN, "not sent: trial stopped early"
                break
            if start_no >= spec.max_restarts:
                leftover_status = status
                leftover_reason = (f"not sent: the engine died {len(deaths)} times "
                                   f"(max_restarts={spec.max_restarts}); last: {cls.failure_class}")
                break
            # Restart with the unsent requests held; this startup counts in gpu_time_s.
            start_no += 1
            srv = self._new_server(req, env, log, start_no)
            ok, why = await srv.wait_ready(req.server.startup_timeout_s)
            if not ok:
                rcls, _, _ = self._failed_start(req, srv, why)
                extra["restart_failure"] = {"failure_class": str(rcls.failure_class), "reason": rcls.reason,
                                            "evidence": rcls.evidence}
                leftover_status = status
                leftover_reason = f"not sent: restart {start_no} failed ({rcls.failure_class})"
                break
            assert srv.ready_at is not None  # wait_ready succeeded
            self._emit("server_ready", pid=srv.pid, start=start_no, startup_s=srv.ready_at - srv.started_at)
            before = await scrapes.scrape(srv, start_no)

        self._stop(srv)
        for idx in remaining:
            if idx not in records:
                st = leftover_status or RequestStatus.NOT_RUN
                opts = trace[idx].options
                records[idx] = RequestRecord(idx, 0.0, None, None, trace[idx].prompt_len, 0, st, leftover_reason,
                                             opts.prompt_logprobs, opts.logprobs, opts.n, opts.streamable)
        gpu_time = sum(s.alive_s() for s in self._trial_starts)
        result = self._result(records, deaths, delta, kv_tokens, startup_s, duration, gpu_time, early_stopped,
                              itl, mismatched, start_no, extra)
        result.gpus, result.goodput_slo = world_size(req.flags), spec.goodput_slo
        return result

    def _startup_failed(self, req: TrialRequest, srv: ServerProcess, why: str, extra: dict[str, Any]) -> TrialResult:
        """The first start failed: the simulator's startup-failure result, classified from the log."""
        cls, rc, lines = self._failed_start(req, srv, why)
        elapsed = (srv.stopped_at or time.monotonic()) - srv.started_at
        res = startup_failure(self.name, cls.failure_class, cls.reason, cls.evidence, req.workload.num_requests,
                              startup_s=elapsed)
        res.gpus, res.goodput_slo = world_size(req.flags), req.workload.goodput_slo
        extra["exit_code"] = rc
        extra["vllm_non_default_args"] = non_default_args_from_log(lines)
        res.extra.update(extra)
        return res

    def _result(self, records: dict[int, RequestRecord], deaths: list[Classification],
                delta: MetricsDelta, kv_tokens: int, startup_s: float, duration: float, gpu_time: float,
                early_stopped: bool, itl: list[float], mismatched: int, restarts: int,
                extra: dict[str, Any]) -> TrialResult:
        if not kv_tokens:
            info = delta.info.get("vllm:cache_config_info", {})
            try:  # newer vLLM labels the capacity itself; older only blocks and block size
                kv_tokens = int(float(info["kv_cache_size_tokens"])) if "kv_cache_size_tokens" in info else \
                    int(float(info.get("num_gpu_blocks", 0)) * float(info.get("block_size", 0)))
            except ValueError:
                kv_tokens = 0
        summary = {k: v for k, v in delta.summary().items() if not math.isnan(v)}
        result = TrialResult(
            status=TrialStatus.OK,
            backend=self.name,
            records=[records[i] for i in sorted(records)],
            # Like the simulator: requests never sent because of an early stop are not issued.
            requests_issued=sum(r.status != RequestStatus.NOT_RUN for r in records.values()),
            kv_cache_tokens=kv_tokens,
            crashes=len(deaths),
            preemptions=int(delta.counters["preemptions"]),
            startup_s=startup_s,
            duration_s=duration,
            gpu_time_s=gpu_time,
            early_stopped=early_stopped,
            server_metrics=summary,
        )
        if deaths:
            # The trial's class: a runtime OOM if any death was one (it decides the OOM objective), else the first.
            main = next((d for d in deaths if d.failure_class == FailureClass.RUNTIME_OOM), deaths[0])
            result.failure_class, result.failure_reason, result.failure_evidence = main.failure_class, main.reason, main.evidence
        extra.update({
            "restarts": restarts,
            "engine_deaths": [{"failure_class": str(d.failure_class), "reason": d.reason, "evidence": d.evidence}
                              for d in deaths],
            "itl_p50_s": _pct(itl, 50), "itl_p99_s": _pct(itl, 99),
            "itl_mean_s": float(np.mean(itl)) if itl else math.nan,
            "output_token_mismatches": mismatched,
            "cache_config_info": delta.info.get("vllm:cache_config_info", {}),
        })
        result.extra.update(extra)
        return result

    def close(self) -> None:
        for srv in list(self._servers):
            self._stop(srv)
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None

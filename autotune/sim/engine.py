"""The discrete-event simulation of one trial: startup, the benchmark, OOM crashes, restarts.

The engine loop takes one scheduler step at a time, except that a run of pure-decode
steps in which nothing can change (no arrival, completion, admission or preemption, and
free blocks for all of it) is taken in one go with its time summed exactly. Step times
come from :mod:`perf`, crash draws from :mod:`hazard`, both with the trial's RNG.

OOM semantics shared with every backend: requests in flight at a crash fail as ``oom``;
the engine restarts after its startup time while the client holds unsent requests; after
``max_restarts`` restarts the next crash ends the benchmark and every request not yet
finished counts as ``oom``.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from autotune.deploy import Deployment
from autotune.deploy.memory import GiB, StartupPrediction, forward_activation_bytes, sampler_bytes
from autotune.early_stop import EarlyStopRule, StopTally
from autotune.results import FailureClass, RequestRecord, RequestStatus, TrialResult, TrialStatus
from autotune.sim.events import Clock, LoadGenerator
from autotune.sim.hazard import Hazard
from autotune.sim.kv_cache import BlockPool
from autotune.sim.perf import PerfModel
from autotune.sim.request import SimRequest
from autotune.sim.scheduler import Scheduler
from autotune.workload import TraceRequest, WorkloadSpec, generate_trace

STEP_NOISE_SIGMA = 0.03  # run-to-run jitter of one step's time (log-normal)
# From the client's send to the engine's waiting queue: HTTP, the API server, tokenisation.
API_BASE_S = 1.0e-3
API_PER_PROMPT_TOKEN_S = 1.0e-6
API_NOISE_SIGMA = 0.5
MAX_DECODE_RUN = 4096  # steps taken at once, at most


@dataclass
class _Stats:
    crashes: int = 0
    steps: int = 0
    decode_runs: int = 0
    max_act: float = 0.0
    max_p: float = 0.0
    restart_s: float = 0.0
    crash_log: list[str] = field(default_factory=list)


class TrialSim:
    def __init__(self, dep: Deployment, startup: StartupPrediction, workload: WorkloadSpec,
                 seed: int = 0, early_stop: EarlyStopRule | None = None) -> None:
        self.dep = dep
        self.startup = startup
        self.workload = workload
        self.early_stop = early_stop
        self.perf = PerfModel(dep)
        self.hazard = Hazard(startup.mem.headroom * GiB)
        # String seeds hash deterministically (sha512), independent of PYTHONHASHSEED.
        self.rng = random.Random(f"autotune-sim/{workload.seed}/{seed}")
        self.trace: list[TraceRequest] = generate_trace(workload, dep.max_model_len)
        self.total = len(self.trace)
        self.clock = Clock()
        self.gen = LoadGenerator(self.trace, workload.concurrency, workload.closed_loop)
        self.records: dict[int, RequestRecord] = {}
        self.tally = StopTally(early_stop, self.total)
        self.stats = _Stats()
        self.stopped = False
        self.ended = False
        self.inbound: list[tuple[float, int, SimRequest]] = []  # (reaches the engine, idx, request)
        self.hits = 0  # prefix-cache counters (tokens) and preemptions of engines that already died
        self.queries = 0
        self.preemptions = 0
        self._new_engine()

    # --- engine lifecycle ------------------------------------------------------------------
    def _retire_engine(self) -> None:
        """Fold a (dead or finished) engine's counters into the trial's."""
        self.hits += self.pool.hits
        self.queries += self.pool.queries
        self.preemptions += self.sched.preemptions

    def _new_engine(self) -> None:
        dep = self.dep
        self.pool = BlockPool(self.startup.num_gpu_blocks, dep.block_size, dep.config.cache.enable_prefix_caching)
        self.sched = Scheduler(dep, self.pool)

    def _prefix_blocks(self, tr: TraceRequest) -> int:
        return tr.prefix_len // self.dep.block_size if tr.shares_prefix else 0

    def _send_due(self) -> None:
        for tr, send in self.gen.due(self.clock.now):
            req = SimRequest(tr.index, tr.prompt_len, tr.output_len, self._prefix_blocks(tr), send)
            delay = (API_BASE_S + API_PER_PROMPT_TOKEN_S * tr.prompt_len) * self.rng.lognormvariate(0.0, API_NOISE_SIGMA)
            heapq.heappush(self.inbound, (send + delay, tr.index, req))

    def _deliver(self) -> None:
        """Requests that reached the engine by now join its waiting queue, in arrival order."""
        inbound, now = self.inbound, self.clock.now
        while inbound and inbound[0][0] <= now:
            self.sched.add(heapq.heappop(inbound)[2])

    def _next_event(self) -> float | None:
        """The next time something reaches the engine from outside."""
        times = [t for t in (self.gen.next_arrival(), self.inbound[0][0] if self.inbound else None) if t is not None]
        return min(times) if times else None

    # --- the loop ----------------------------------------------------------------------------
    def run(self) -> TrialResult:
        while not (self.stopped or self.ended):
            self._send_due()
            self._deliver()
            if not self.sched.has_work:
                t = self._next_event()
                if t is None:
                    break
                self.clock.advance_to(t)
                continue
            if not self._try_decode_run():
                self._single_step()
        return self._result()

    def _noise(self, steps: int) -> float:
        return self.rng.lognormvariate(0.0, STEP_NOISE_SIGMA / math.sqrt(steps))

    def _step_act(self, tokens: int, seqs: int, decode_only: bool) -> float:
        """Transient bytes of a step outside the CUDA-graph pool (what can fragment)."""
        graphed = decode_only and seqs <= self.perf.max_graph_batch
        fwd = 0 if graphed else forward_activation_bytes(self.dep, tokens)
        act = fwd + sampler_bytes(self.dep, seqs)
        if act > self.stats.max_act:
            self.stats.max_act = act
        return act

    def _crash_draw(self, tokens: int, seqs: int, decode_only: bool, k: int) -> int:
        p = self.hazard.p_step(self._step_act(tokens, seqs, decode_only))
        self.stats.max_p = max(self.stats.max_p, p)
        return Hazard.first_failure(p, k, self.rng)

    def _try_decode_run(self) -> bool:
        sched = self.sched
        k = sched.decode_run_length(MAX_DECODE_RUN)
        if k < 2:
            return False
        running = sched.running
        s = len(running)
        kv_read = sum(r.num_computed for r in running)
        c0 = self.perf.cost(s, s, kv_read + s, kv_read, True)
        t_arr = self._next_event()
        if t_arr is not None:
            k = min(k, int((t_arr - self.clock.now) / self.perf.time(c0)))
            if k < 2:
                return False
        d_flops = self.perf.attn_coef * s * (self.perf.rate / self.perf.attn_rate)
        d_bytes = self.perf.kv_tok * s
        fail = self._crash_draw(s, s, True, k)
        run = fail or k
        dt = self.perf.decode_run_s(c0, d_flops, d_bytes, run) * self._noise(run)
        self.stats.decode_runs += 1
        self.stats.steps += run
        if fail:
            if fail > 1:
                sched.advance_decode(fail - 1)  # no completion: fail - 1 < k <= remaining
            self.clock.now += dt
            self._crash(s)
            return True
        done = sched.advance_decode(k)
        self.clock.now += dt
        self._complete(done)
        return True

    def _single_step(self) -> None:
        plan = self.sched.schedule()
        if not plan.items:
            # Nothing schedulable although work waits: cannot happen when one max_model_len
            # request fits the cache (checked at startup); end rather than spin.
            self.stats.crash_log.append("scheduler made no progress; benchmark ended")
            self.ended = True
            return
        seqs = len(plan.items)
        cost = self.perf.cost(plan.tokens, seqs, plan.attn_work, plan.kv_read, plan.decode_only)
        dt = self.perf.time(cost) * self._noise(1)
        self.stats.steps += 1
        fail = self._crash_draw(plan.tokens, seqs, plan.decode_only, 1)
        self.clock.now += dt
        if fail:
            self._crash(plan.tokens)
            return
        self._complete(self.sched.finish_step(plan, self.clock.now))

    # --- outcomes ----------------------------------------------------------------------------
    def _complete(self, done: list[SimRequest]) -> None:
        now = self.clock.now
        for r in done:
            e2e = now - r.send_s
            ttft = (r.first_token_s - r.send_s) if r.first_token_s is not None else e2e
            self.records[r.idx] = RequestRecord(r.idx, r.send_s, ttft, e2e, r.prompt_len, r.generated)
            self.tally.add(RequestStatus.OK, e2e)
            self.gen.finished(now)
            self._check_stop()
            if self.stopped:
                return
        self._send_due()

    def _fail(self, idx: int, send_s: float, prompt: int, generated: int, status: RequestStatus, why: str) -> None:
        self.records[idx] = RequestRecord(idx, send_s, None, None, prompt, generated, status, why)
        if status != RequestStatus.NOT_RUN:
            self.tally.add(status, None)

    def _crash(self, tokens: int) -> None:
        now = self.clock.now
        st = self.stats
        st.crashes += 1
        headroom = self.startup.mem.headroom
        msg = (f"torch.OutOfMemoryError: CUDA out of memory. GPU 0 has a total capacity of "
               f"{self.dep.gpu.mem_total_gib:.2f} GiB of which {max(headroom, 0) * 1024:.2f} MiB was free "
               f"after startup (engine died at t={now:.1f}s in a step of {tokens} tokens; simulated)")
        st.crash_log.append(msg)
        lost = self.sched.drop_all() + [r for _, _, r in self.inbound]
        self.inbound = []
        for r in lost:
            self._fail(r.idx, r.send_s, r.prompt_len, r.generated, RequestStatus.OOM, "engine died: CUDA OOM")
        self.gen.finished(now, len(lost))
        if st.crashes > self.workload.max_restarts:
            for tr in self.gen.take_rest():
                self._fail(tr.index, now, tr.prompt_len, 0, RequestStatus.OOM,
                           f"not served: engine died {st.crashes} times (max_restarts={self.workload.max_restarts})")
            self.ended = True
            return
        self._check_stop()
        if self.stopped:
            return
        # Restart: the startup time passes with the GPUs held; held requests then go out.
        self.clock.now += self.startup.startup_s
        st.restart_s += self.startup.startup_s
        self._retire_engine()
        self._new_engine()
        self.gen.reopen(self.clock.now)

    def _check_stop(self) -> None:
        if self.tally.should_stop():
            self.stopped = True

    def _result(self) -> TrialResult:
        now = self.clock.now
        for r in self.sched.drop_all() + [r for _, _, r in self.inbound]:  # non-empty only when stopped early
            self._fail(r.idx, r.send_s, r.prompt_len, r.generated, RequestStatus.NOT_RUN, "aborted: early stop")
        for tr in self.gen.take_rest():
            self._fail(tr.index, now, tr.prompt_len, 0, RequestStatus.NOT_RUN, "not sent: early stop")
        timeout = self.workload.request_timeout_s
        for rec in self.records.values():
            if rec.status == RequestStatus.OK and rec.e2e_s is not None and rec.e2e_s > timeout:
                rec.status, rec.error = RequestStatus.ERROR, f"timeout after {timeout:.0f}s"
        records = [self.records[i] for i in sorted(self.records)]
        issued = sum(r.status != RequestStatus.NOT_RUN for r in records)
        self._retire_engine()
        st = self.stats
        mem = self.startup.mem
        peak = mem.total - mem.headroom + self.hazard.typical_excess(st.max_act) / GiB
        if st.crashes:
            peak = mem.total  # it ran into the ceiling
        return TrialResult(
            status=TrialStatus.OK,
            backend="sim",
            records=records,
            failure_class=FailureClass.RUNTIME_OOM if st.crashes else FailureClass.NONE,
            failure_reason=st.crash_log[0] if st.crashes else "",
            failure_evidence=st.crash_log[:5],
            requests_issued=issued,
            kv_cache_tokens=self.startup.kv_cache_tokens,
            crashes=st.crashes,
            preemptions=self.preemptions,
            peak_mem_gib=[round(min(peak, mem.total), 3)] * self.dep.tp,
            startup_s=self.startup.startup_s,
            duration_s=now,
            gpu_time_s=self.startup.startup_s + now,
            early_stopped=self.stopped,
            server_metrics={
                # The vllm backend's names and units (tokens); no lookups: no rate, as there.
                "prefix_cache_hits": float(self.hits),
                "prefix_cache_queries": float(self.queries),
                "prefix_cache_hit_rate": self.hits / self.queries if self.queries else math.nan,
            },
            extra={
                "simulated": True,
                "steps": st.steps,
                "decode_runs": st.decode_runs,
                "restart_s": st.restart_s,
                "max_step_oom_p": st.max_p,
                "mem_gib": mem.as_dict(),
                "startup_log": list(self.startup.log),
            },
        )

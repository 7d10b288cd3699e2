"""vLLM V1's continuous-batching scheduler, reduced to what moves latency and memory.

Each step has a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs).
Running requests are scheduled first, in order, each taking what it still needs (one
token when decoding, a chunk when prefilling); when their KV blocks cannot be allocated,
the *last* running request is preempted by recompute (blocks freed, progress kept as
prompt, back to the front of the waiting queue). Only if nothing was preempted, waiting
requests are admitted FCFS while budget, sequence cap and free blocks allow, after a
prefix-cache lookup. Without chunked prefill, a prompt must fit the remaining budget whole.
On a CPU host, admission also needs free blocks for the request's whole sequence, not only its
first chunk: vLLM 0.32's ``scheduler_reserve_full_isl`` (docs/simulator.md, "CPU host").

:meth:`Scheduler.decode_run_length` finds how many pure-decode steps can be taken at once
with nothing changing the batch, which is what makes the simulation fast.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from autotune.deploy import Deployment
from autotune.sim.kv_cache import BlockPool
from autotune.sim.request import SimRequest


@dataclass(slots=True)
class StepPlan:
    items: list[tuple[SimRequest, int]] = field(default_factory=list)  # (request, new tokens)
    tokens: int = 0
    attn_work: float = 0.0  # sum of new x (context_before + (new + 1) / 2)
    kv_read: int = 0  # cached tokens attention reads
    decode_only: bool = True
    # Prompt rows scheduled for each request with prompt logprobs (vLLM V1's num_logits: the
    # chunk, less the last prompt token, which predicts the first output token).
    plp_rows: list[int] = field(default_factory=list)
    logprobs: bool = False  # some request samples with logprobs

    def add(self, req: SimRequest, n: int) -> None:
        ctx = req.num_computed
        self.items.append((req, n))
        self.tokens += n
        self.attn_work += n * (ctx + (n + 1) / 2)
        self.kv_read += ctx
        if n != 1 or req.num_tokens - req.num_computed != 1:
            self.decode_only = False
        if req.prompt_logprobs:
            self.plp_rows.append(max(0, min(n, req.prompt_len - 1 - ctx)))
        if req.logprobs:
            self.logprobs = True


class Scheduler:
    def __init__(self, dep: Deployment, pool: BlockPool, prefill_cap: int = 0) -> None:
        """``prefill_cap``: a scheduler variant of a truth (sim/quirks.py): each request's
        prefill chunk is at most this many tokens a step; 0, V1's rule (the budget)."""
        sc = dep.config.scheduler
        self.prefill_cap = prefill_cap
        self.max_seqs = sc.max_num_seqs
        self.budget = sc.max_num_batched_tokens
        self.chunked = sc.enable_chunked_prefill
        self.pool = pool
        # vLLM 0.32's SchedulerConfig.scheduler_reserve_full_isl (default True): a waiting request is
        # admitted only if the KV cache can hold its whole sequence (KVCacheManager.allocate_slots,
        # full_sequence_must_fit), not only its first chunk. Modelled on the CPU host, where the
        # measured preemption counts show it; GPU deployments keep the model their committed ground
        # truths were made with (first chunk only), docs/simulator.md says so.
        self.full_isl = dep.gpu.is_cpu
        self.running: list[SimRequest] = []
        self.waiting: deque[SimRequest] = deque()
        self.preemptions = 0

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def add(self, req: SimRequest) -> None:
        self.waiting.append(req)

    # --- one step --------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        plan = StepPlan()
        budget = self.budget
        running, pool = self.running, self.pool
        preempted = False
        bs = pool.block_size
        # The decode fast path's sums are kept in locals and added to the plan's at the end:
        # the same totals (ints, and attention work in halves, which floats add exactly).
        items_append, plp_rows = plan.items.append, plan.plp_rows
        tokens, kv_read, attn_work, logprobs = 0, 0, 0.0, False
        n_running = len(running)
        i = 0
        while i < n_running and budget > 0:
            req = running[i]
            ctx = req.num_computed
            if req.prompt_len + req.generated - ctx == 1 and (
                    -(-(ctx + 1) // bs) <= req.shared_held + req.private_blocks or pool.take_plain_block(req)):
                # The common case, inlined for speed: a decode step in a block it already holds, or
                # in one never-hashed free block it takes (what _chunk, pool.allocate, plan.add and
                # _cache do for it, in that order).
                items_append((req, 1))
                tokens += 1
                attn_work += ctx + 1.0
                kv_read += ctx
                if req.prompt_logprobs:
                    plp_rows.append(max(0, min(1, req.prompt_len - 1 - ctx)))
                if req.logprobs:
                    logprobs = True
                if len(req.block_keys) > req.shared_held:
                    pool.register(req, ctx + 1)
                budget -= 1
                i += 1
                continue
            n = self._chunk(req, min(req.num_tokens - req.num_computed, budget))
            scheduled = True
            while not pool.allocate(req, n):
                victim = running.pop()
                n_running -= 1
                self._preempt(victim)
                preempted = True
                if victim is req:
                    scheduled = False
                    break
            if not scheduled:
                break
            plan.add(req, n)
            self._cache(req, n)
            budget -= n
            i += 1
        plan.tokens += tokens
        plan.attn_work += attn_work
        plan.kv_read += kv_read
        plan.logprobs = plan.logprobs or logprobs
        if not preempted:
            budget = self._admit(plan, budget)
        return plan

    def _preempt(self, req: SimRequest) -> None:
        self.pool.free(req)
        req.reset_for_recompute()
        self.waiting.appendleft(req)
        self.preemptions += 1

    def _admission(self, req: SimRequest, budget: int) -> tuple[int, int, int] | None:
        """(prefix-hit blocks, tokens to schedule, free blocks needed), or None if the
        prompt cannot be scheduled in this budget."""
        hits = self.pool.lookup(req) if req.num_computed == 0 else 0
        todo = req.num_tokens - req.num_computed - hits * self.pool.block_size
        if not self.chunked and todo > budget:
            return None
        n = self._chunk(req, min(todo, budget))
        need = self.pool.new_blocks_needed(req, n, hits)
        if self.full_isl and todo > n:
            need = max(need, self.pool.new_blocks_needed(req, todo, hits))
        return hits, n, need

    def _chunk(self, req: SimRequest, n: int) -> int:
        """``n`` tokens of ``req``, capped by the prefill chunk limit while it prefills."""
        if self.prefill_cap and self.chunked and n > 1:
            return min(n, self.prefill_cap)
        return n

    def _admit(self, plan: StepPlan, budget: int) -> int:
        pool, running, waiting = self.pool, self.running, self.waiting
        while waiting and budget > 0 and len(running) < self.max_seqs:
            req = waiting[0]
            adm = self._admission(req, budget)
            if adm is None or adm[2] > pool.num_free:
                break
            hits, n, _ = adm
            if req.num_computed == 0:
                pool.record_lookup(req, hits)
            if hits:
                pool.take_hits(req, hits)
            ok = pool.allocate(req, n)
            assert ok, "admission check and allocation disagree"
            waiting.popleft()
            running.append(req)
            plan.add(req, n)
            self._cache(req, n)
            budget -= n
        return budget

    def _cache(self, req: SimRequest, n: int) -> None:
        if len(req.block_keys) > req.shared_held:
            self.pool.register(req, req.num_computed + n)

    def finish_step(self, plan: StepPlan, t_end: float) -> list[SimRequest]:
        """Apply a step's progress; return the requests that finished (blocks freed)."""
        done: list[SimRequest] = []
        for req, n in plan.items:
            computed = req.num_computed = req.num_computed + n
            if req.prompt_logprobs and computed >= req.prompt_len:
                req.prompt_logprobs = False  # done; not again after a preemption (vLLM V1 and V2)
            generated = req.generated
            if computed == req.prompt_len + generated:  # == num_tokens, inlined
                generated = req.generated = generated + 1
                if req.first_token_s is None:
                    req.first_token_s = t_end
                if generated >= req.output_len:
                    done.append(req)
        if done:
            self._retire(done)
        return done

    def _retire(self, done: list[SimRequest]) -> None:
        gone = set(done)  # SimRequest compares and hashes by identity (eq=False)
        self.running = [r for r in self.running if r not in gone]
        for r in done:
            self.pool.free(r)

    # --- many decode steps at once -----------------------------------------------------
    def decode_run_length(self, cap: int) -> int:
        """How many pure-decode steps (<= cap) can run with the batch unchanged: every
        running request decoding, no completion before the last of them, nobody admitted,
        and blocks for all of them free now (so no preemption). 0 or 1: step normally."""
        running = self.running
        if not running or len(running) > self.budget or cap < 2:
            return 0
        k = cap
        # Newest first: a request still prefilling was admitted last, so a step that cannot be a
        # decode run (most steps under load) is told apart at once.
        for r in reversed(running):
            generated = r.generated
            if r.prompt_len + generated - r.num_computed != 1:  # not decoding (num_tokens, inlined)
                return 0
            if r.output_len - generated < k:  # tokens it has still to generate
                k = r.output_len - generated
        if k < 2:
            return 0
        # Each request's room: tokens its held blocks still take (it holds every computed token's).
        bs = self.pool.block_size
        rooms = [(r.shared_held + r.private_blocks) * bs - r.num_computed for r in running]
        if self._could_admit(rooms):
            return 0
        free = self.pool.num_free
        if _blocks_for_run(rooms, k, bs) <= free:
            return k
        lo, hi = 1, k  # largest k whose blocks fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _blocks_for_run(rooms, mid, bs) <= free:
                lo = mid
            else:
                hi = mid - 1
        return lo if _blocks_for_run(rooms, lo, bs) <= free else 0

    def _could_admit(self, rooms: list[int]) -> bool:
        """Whether a normal step now would admit a waiting request (``rooms``: the running
        requests', as decode_run_length has them). Free blocks only shrink while decoding, so if
        it cannot now, it cannot until something finishes."""
        if not self.waiting or len(self.running) >= self.max_seqs:
            return False
        budget = self.budget - len(self.running)
        if budget <= 0:
            return False
        adm = self._admission(self.waiting[0], budget)
        if adm is None:
            return False
        return adm[2] <= self.pool.num_free - _blocks_for_run(rooms, 1, self.pool.block_size)

    def advance_decode(self, k: int) -> list[SimRequest]:
        """Apply k decode steps to every running request (blocks checked by the caller)."""
        done: list[SimRequest] = []
        pool = self.pool
        bs = pool.block_size
        for r in self.running:
            if -(-(r.num_computed + k) // bs) > r.shared_held + r.private_blocks:  # needs a block (allocate's test)
                ok = pool.allocate(r, k)
                assert ok, "decode run allocated more blocks than were free"
            r.num_computed += k
            r.generated += k
            if r.generated >= r.output_len:
                done.append(r)
        if done:
            self._retire(done)
        return done

    def drop_all(self) -> list[SimRequest]:
        """The engine died: every request it held is lost; the block pool goes with it."""
        lost = list(self.running) + list(self.waiting)
        self.running = []
        self.waiting = deque()
        return lost


def _blocks_for_run(rooms: list[int], k: int, block_size: int) -> int:
    """Free blocks k more tokens of every running request take, given each one's room (tokens
    its held blocks still take): ceil((k - room) / block_size) for each whose room is short,
    which is ceil((computed + k) / block_size) less the blocks it holds, in integers."""
    return sum(-((room - k) // block_size) for room in rooms if room < k)

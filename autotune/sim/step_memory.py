"""Memory one engine step needs that vLLM's startup profile did not see.

vLLM sizes the KV cache from one profiled forward pass (``max_num_batched_tokens`` tokens,
then a sampler pass over ``max_num_seqs`` rows, no logprobs: ``profile_run`` /
``_dummy_sampler_run``), so a real step whose transient peak exceeds that profile takes
the difference out of the physical headroom. This module computes, per step, the step's
transient peak with the same structure as the profile and charges its excess::

    post_fwd = hidden(T) + max(sampler(S) + LP, PLP)
    peak     = max(fwd(T), post_fwd)
    U        = max(0, peak - profiled peak)

``T`` tokens and ``S`` sampled sequences in the step, ``hidden(T) = T*H*2`` (the hidden
states still held after the forward), ``fwd`` the forward activations (none for a decode
batch replayed from the CUDA-graph pool). What the profile never runs:

* ``PLP``, prompt logprobs (vllm#5907, vllm#52054), which depend on the model runner:
  V1 (``VLLM_USE_V2_MODEL_RUNNER=0``, ``gpu_model_runner._get_prompt_logprobs_dict``) loops
  over the requests with prompt logprobs and, for each, materialises ``[n_r, V]`` logits in
  the head dtype, their ``[n_r, V]`` fp32 log-softmax, and (TP > 1) the local vocab shard
  during the all-gather; one request's tensors are still bound while the next one's are
  made (Python rebinding). V2 (vLLM 0.32.0's default, ``gpu/sample/prompt_logprob.py``)
  computes logits for all ``T`` rows of the step in chunks of 1024 and reads only the
  top-k columns: at most two chunks of logits (the previous one is still bound) plus the
  shard.
* ``LP``, sampled-token logprobs, V1 runner only: one more fp32 ``[S, V]`` copy
  (``sampler.compute_logprobs``); V2 reads the top-k columns.

Sampler rows at ``n > 1`` need no term of their own: V1 fans the request out into n child
sequences (``parallel_sampling.ParentRequest``), each one row of ``S`` like any sequence.
Prefill activations of one step never exceed the profile's (``T <= max_num_batched_tokens``)
and attention workspaces are taken as 0 for the dense models here (docs/simulator.md).

The transient bytes that can fragment (``act``) are the step's forward activations, its
sampler buffers and the logits tensors above: fresh vocabulary-sized allocations of shapes
the allocator has not seen.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.deploy import Deployment, SimProfile
from autotune.deploy.memory import activation_bytes_per_token, profiled_activation_peak, sampler_bytes_per_row

V2_PROMPT_LOGPROBS_CHUNK = 1024  # vllm/v1/worker/gpu/sample/prompt_logprob.py CHUNK_SIZE
HEAD_DTYPE_BYTES = 2  # logits in the model dtype (bf16/fp16): every bundled model


@dataclass(frozen=True, slots=True)
class StepMemory:
    """One step's memory beyond the profile, in bytes."""

    unprofiled: float  # U: certain excess of the step's peak over the profiled peak
    act: float  # transient bytes the allocator can fragment
    largest: float  # the largest single allocation of the step (named in an OOM message)
    what: str  # what that allocation is


class StepMemoryModel:
    """Per-step memory for one deployment under one profile (constants bound once)."""

    def __init__(self, dep: Deployment, profile: SimProfile, max_graph_batch: int) -> None:
        a = dep.arch
        self.v1 = dep.env.model_runner == "v1"
        self.vocab = a.vocab_size
        self.gather = 1.0 + (1.0 / dep.tp if dep.tp > 1 else 0.0)  # full logits + local shard
        self.fwd_tok = activation_bytes_per_token(dep, profile)
        self.hidden_tok = a.hidden_size * 2
        self.sampler_row = sampler_bytes_per_row(dep, profile)
        self.gate_up_tok = 2 * a.intermediate_size / dep.tp * 2  # the forward's largest tensor per token
        self.profiled = profiled_activation_peak(dep, profile)
        self.max_graph_batch = max_graph_batch

    def step(self, tokens: int, seqs: int, decode_only: bool, plp_rows: list[int] | None = None,
             logprobs: bool = False) -> StepMemory:
        """``plp_rows``: prompt rows of each request with prompt logprobs scheduled in this step
        (in scheduling order; None or empty: none); ``logprobs``: any request in it asks for
        sampled-token logprobs."""
        graphed = decode_only and seqs <= self.max_graph_batch
        fwd = 0.0 if graphed else tokens * self.fwd_tok
        sampler = seqs * self.sampler_row
        lp = seqs * self.vocab * 4.0 if logprobs and self.v1 else 0.0
        plp, plp_largest = self._prompt_logprobs(tokens, plp_rows) if plp_rows else (0.0, 0.0)
        post = tokens * self.hidden_tok + max(sampler + lp, plp)
        unprofiled = max(0.0, max(fwd, post) - self.profiled)
        act = fwd + sampler + lp + plp
        if plp_largest:
            largest, what = plp_largest, ("prompt logprobs: fp32 log_softmax over the vocabulary" if self.v1
                                          else "prompt logprobs: a 1024-row chunk of logits")
        elif lp:
            largest, what = lp, "sampled-token logprobs: fp32 log_softmax over the vocabulary"
        else:
            largest, what = tokens * self.gate_up_tok, "forward activations (gate_up projection)"
        return StepMemory(unprofiled, act, largest, what)

    def logit_rows(self, tokens: int, plp_rows: list[int] | None) -> int:
        """Extra rows the LM head runs over for prompt logprobs (their time): V1 each
        request's own rows, V2 every row of the step."""
        if not plp_rows:
            return 0
        return sum(plp_rows) if self.v1 else tokens

    def _prompt_logprobs(self, tokens: int, rows: list[int]) -> tuple[float, float]:
        """(peak bytes of the prompt-logprobs pass, its largest single tensor)."""
        vb = self.vocab * HEAD_DTYPE_BYTES
        if not self.v1:
            chunks = [min(V2_PROMPT_LOGPROBS_CHUNK, tokens - s) for s in range(0, tokens, V2_PROMPT_LOGPROBS_CHUNK)]
            prev, peak = 0, 0.0
            for c in chunks:
                peak = max(peak, (prev + c * self.gather) * vb)
                prev = c
            return peak, chunks[0] * vb
        v32 = self.vocab * 4.0
        prev_logits = prev_scores = 0.0
        peak = largest = 0.0
        for n in rows:
            if n <= 0:
                continue
            logits, scores = n * vb, n * v32
            # While this request's logits are gathered the previous request's tensors are still
            # bound; then its log-softmax is made while its logits and the previous scores live.
            peak = max(peak, prev_logits + prev_scores + logits * self.gather, prev_scores + logits + scores)
            largest = max(largest, scores)
            prev_logits, prev_scores = logits, scores
        return peak, largest

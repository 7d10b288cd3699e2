"""A request's state inside the simulated engine.

Token accounting follows vLLM V1: a request knows ``num_tokens`` (prompt plus tokens
generated so far) and ``num_computed`` (tokens whose KV is in the cache). A step that
brings ``num_computed`` up to ``num_tokens`` samples one new token. Prefill, chunked
prefill, decode and recompute after preemption are all this one rule.

A request with ``n > 1`` is n of these, as in vLLM V1 (``parallel_sampling.ParentRequest``
fans it out into n child requests with the same prompt); they share ``idx``.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.results import RequestStatus


@dataclass(slots=True, eq=False)
class SimRequest:
    idx: int  # the benchmark request (shared by the children of an n > 1 request)
    prompt_len: int
    output_len: int
    # Prefix-cache identities of the KV blocks this request's prompt can share, from its first
    # block on (see BlockPool); empty when nothing is shareable.
    block_keys: tuple[object, ...]
    send_s: float = 0.0
    # vLLM skips reading the prefix cache for prompt-logprobs requests (SamplingParams
    # skip_reading_prefix_cache); they still write it.
    reads_cache: bool = True
    prompt_logprobs: bool = False  # its prompt's logits are still to be computed
    logprobs: bool = False  # sampled-token logprobs on every step
    num_computed: int = 0
    generated: int = 0
    shared_held: int = 0  # leading prefix blocks held by reference (hashed, shareable)
    private_blocks: int = 0  # blocks only this request uses
    may_register: bool = True  # its own prefix blocks can still become the cached copy
    first_token_s: float | None = None
    finish_s: float | None = None
    status: RequestStatus | None = None
    preempted: int = 0

    @property
    def prefix_blocks(self) -> int:
        return len(self.block_keys)

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.generated

    @property
    def blocks_held(self) -> int:
        return self.shared_held + self.private_blocks

    def reset_for_recompute(self) -> None:
        """Recompute preemption: the KV is dropped, generated tokens are kept as prompt."""
        self.num_computed = 0
        self.shared_held = 0
        self.private_blocks = 0
        self.may_register = True
        self.preempted += 1

"""A request's state inside the simulated engine.

Token accounting follows vLLM V1: a request knows ``num_tokens`` (prompt plus tokens
generated so far) and ``num_computed`` (tokens whose KV is in the cache). A step that
brings ``num_computed`` up to ``num_tokens`` samples one new token. Prefill, chunked
prefill, decode and recompute after preemption are all this one rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.results import RequestStatus


@dataclass(slots=True, eq=False)
class SimRequest:
    idx: int
    prompt_len: int
    output_len: int
    prefix_blocks: int  # full blocks of the shared system prompt this request starts with
    send_s: float = 0.0
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
    def num_tokens(self) -> int:
        return self.prompt_len + self.generated

    @property
    def blocks_held(self) -> int:
        return self.shared_held + self.private_blocks

    @property
    def remaining_output(self) -> int:
        return self.output_len - self.generated

    def reset_for_recompute(self) -> None:
        """Recompute preemption: the KV is dropped, generated tokens are kept as prompt."""
        self.num_computed = 0
        self.shared_held = 0
        self.private_blocks = 0
        self.may_register = True
        self.preempted += 1

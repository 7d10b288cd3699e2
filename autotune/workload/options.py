"""Per-request sampling options that change what the engine computes, not just how long.

Users' traffic is not only prompt and output lengths: evaluation harnesses ask for
``prompt_logprobs`` (a logits row over the whole vocabulary for every prompt token), chat
clients for ``logprobs`` and best-of style clients for ``n > 1`` sequences. These are the
batches vLLM's startup profile never saw, the ones behind runtime OOMs (vLLM issues #5907,
#10325, PR #14728), so the benchmark carries them per request, explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RequestOptions:
    """The OpenAI ``/v1/completions`` fields one request sets, by vLLM's names.

    ``prompt_logprobs``: top-k logprobs for every prompt token (vLLM computes the full
    ``[prompt tokens, vocab]`` logits for it whatever k is; k only sizes what is returned).
    ``logprobs``: top-k logprobs for every generated token. ``n``: independent sequences
    generated for the one prompt (each produces the request's ``output_len`` tokens).
    ``None`` means the field is not sent (vLLM's default: not computed).
    """

    prompt_logprobs: int | None = None
    logprobs: int | None = None
    n: int = 1

    def __post_init__(self) -> None:
        for name in ("prompt_logprobs", "logprobs"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must be >= 0")  # the value is file content: not quoted
        if self.n < 1:
            raise ValueError("n must be >= 1")

    @property
    def streamable(self) -> bool:
        """vLLM refuses ``prompt_logprobs > 0`` with ``stream=True`` (completion/protocol.py,
        check_logprobs: "`prompt_logprobs` are not available when `stream=True`")."""
        return not self.prompt_logprobs

    def payload(self) -> dict[str, Any]:
        """The request-body fields for these options (empty for a plain request)."""
        out: dict[str, Any] = {}
        if self.prompt_logprobs is not None:
            out["prompt_logprobs"] = self.prompt_logprobs
        if self.logprobs is not None:
            out["logprobs"] = self.logprobs
        if self.n != 1:
            out["n"] = self.n
        return out


PLAIN = RequestOptions()

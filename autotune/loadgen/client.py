"""One streaming completion request and what it measured.

Prompts go as token IDs (``prompt: [ids]``) with ``min_tokens = max_tokens`` and
``ignore_eos`` so every backend sees exactly the same tokens in and produces exactly the
same number of tokens out: latency differences then come from the engine config alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import aiohttp


class ErrorKind(StrEnum):
    NONE = ""
    HTTP_4XX = "http_4xx"  # the server rejected this request (too long, bad token IDs, ...)
    HTTP_5XX = "http_5xx"  # the server failed it (EngineDeadError surfaces as 500)
    CONNECTION = "connection"  # refused, reset or cut mid-stream: usually the server died
    TIMEOUT = "timeout"  # request_timeout_s passed
    CANCELLED = "cancelled"  # the load generator gave up on it (engine dead or hung)
    PROTOCOL = "protocol"  # a 200 stream that did not end properly or carried an error


@dataclass
class RequestOutcome:
    """What one request measured. Times are seconds; ``send_s`` is relative to benchmark start."""

    index: int
    send_s: float = 0.0
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)  # gaps between streamed chunks after the first
    prompt_tokens: int = 0
    output_tokens: int = 0
    expected_output_tokens: int = 0
    error_kind: ErrorKind = ErrorKind.NONE
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.error_kind == ErrorKind.NONE


def completion_payload(model: str, prompt_ids: list[int], output_len: int) -> dict:
    return {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_completion(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    prompt_ids: list[int],
    output_len: int,
    outcome: RequestOutcome,
    timeout_s: float,
    on_chunk: Callable[[], None] | None = None,
) -> RequestOutcome:
    """Send one request and fill ``outcome`` in place (so a cancelled request keeps its partial data).

    Never raises for a failed request (only for cancellation): the failure is in ``error_kind``.
    """
    outcome.prompt_tokens = len(prompt_ids)
    outcome.expected_output_tokens = output_len
    start = time.perf_counter()
    last: float | None = None
    chunks = 0
    done = False
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with session.post(url, json=completion_payload(model, prompt_ids, output_len), timeout=timeout) as resp:
            if resp.status != 200:
                body = (await resp.text())[:500]
                outcome.error_kind = ErrorKind.HTTP_4XX if resp.status < 500 else ErrorKind.HTTP_5XX
                outcome.error = f"HTTP {resp.status}: {body}"
                return outcome
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                msg = json.loads(data)
                if "error" in msg:
                    outcome.error_kind = ErrorKind.PROTOCOL
                    outcome.error = f"stream error: {json.dumps(msg['error'])[:300]}"
                    return outcome
                if msg.get("choices"):
                    now = time.perf_counter()
                    if last is None:
                        outcome.ttft_s = now - start
                    else:
                        outcome.itl_s.append(now - last)
                    last = now
                    chunks += 1
                    if on_chunk is not None:
                        on_chunk()
                usage = msg.get("usage")
                if usage:
                    outcome.prompt_tokens = int(usage.get("prompt_tokens") or outcome.prompt_tokens)
                    outcome.output_tokens = int(usage.get("completion_tokens") or 0)
    except TimeoutError:
        outcome.error_kind = ErrorKind.TIMEOUT
        outcome.error = f"no complete response within {timeout_s:g}s"
        return outcome
    except (aiohttp.ClientError, ConnectionError) as e:
        outcome.error_kind = ErrorKind.CONNECTION
        outcome.error = f"{type(e).__name__}: {e}"[:300]
        return outcome
    except (ValueError, UnicodeDecodeError) as e:
        outcome.error_kind = ErrorKind.PROTOCOL
        outcome.error = f"unparseable stream chunk: {e}"[:300]
        return outcome
    except asyncio.CancelledError:
        outcome.error_kind = ErrorKind.CANCELLED
        outcome.error = outcome.error or "cancelled by the load generator"
        raise
    if not done:
        outcome.error_kind = ErrorKind.PROTOCOL
        outcome.error = "stream ended without [DONE]"
        return outcome
    if outcome.output_tokens == 0:
        # A server without usage reporting: one chunk per token is the best we know.
        outcome.output_tokens = chunks
    outcome.e2e_s = time.perf_counter() - start
    return outcome

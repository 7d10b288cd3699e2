"""One completion request and what it measured.

Prompts go as token IDs (``prompt: [ids]``) with ``min_tokens = max_tokens`` and
``ignore_eos`` so every backend sees exactly the same tokens in and produces exactly the
same number of tokens out: latency differences then come from the engine config alone.

Requests stream, except those vLLM will not stream (``prompt_logprobs > 0``, see
:attr:`RequestOptions.streamable`): those are sent plain and measure only end-to-end time.
With ``n > 1`` vLLM streams one chunk per sequence per step, each chunk naming its
sequence in ``choices[0].index`` (completion/serving.py); TTFT is the first chunk of any
sequence, the inter-token gaps are sequence 0's, and the output tokens are the usage
total over all sequences.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import aiohttp

from autotune.workload import RequestOptions


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
    options: RequestOptions = field(default_factory=RequestOptions)
    streamed: bool = True
    ttft_s: float | None = None  # None when not streamed
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)  # gaps between sequence 0's chunks after the first
    prompt_tokens: int = 0
    output_tokens: int = 0  # all sequences together
    expected_output_tokens: int = 0  # n x the trace's output_len
    error_kind: ErrorKind = ErrorKind.NONE
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.error_kind == ErrorKind.NONE


def completion_payload(model: str, prompt_ids: list[int], output_len: int,
                       options: RequestOptions | None = None) -> dict:
    """The /v1/completions body; ``output_len`` tokens per sequence, options by vLLM's names."""
    options = options or RequestOptions()
    body: dict = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "ignore_eos": True,
        # vLLM refuses n > 1 with greedy sampling ("n must be 1 when using greedy sampling",
        # sampling_params.py); the length is fixed by min/max_tokens either way.
        "temperature": 0.0 if options.n == 1 else 1.0,
        **options.payload(),
        "stream": options.streamable,
    }
    if options.streamable:
        body["stream_options"] = {"include_usage": True}
    return body


async def send_completion(
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

    ``outcome.options`` says what the request carries. Never raises for a failed request
    (only for cancellation): the failure is in ``error_kind``.
    """
    options = outcome.options
    outcome.streamed = options.streamable
    outcome.prompt_tokens = len(prompt_ids)
    outcome.expected_output_tokens = output_len * options.n
    start = time.perf_counter()
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        body = completion_payload(model, prompt_ids, output_len, options)
        async with session.post(url, json=body, timeout=timeout) as resp:
            if resp.status != 200:
                text = (await resp.text())[:500]
                outcome.error_kind = ErrorKind.HTTP_4XX if resp.status < 500 else ErrorKind.HTTP_5XX
                outcome.error = f"HTTP {resp.status}: {text}"
                return outcome
            if outcome.streamed:
                await _read_stream(resp, outcome, start, on_chunk)
            else:
                _read_response(await resp.read(), outcome)
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
        outcome.error = f"unparseable response: {e}"[:300]
        return outcome
    except asyncio.CancelledError:
        outcome.error_kind = ErrorKind.CANCELLED
        outcome.error = outcome.error or "cancelled by the load generator"
        raise
    if outcome.ok:
        outcome.e2e_s = time.perf_counter() - start
    return outcome


async def _sse_lines(resp: aiohttp.ClientResponse):
    """The stream's lines, however long: aiohttp's own line reader refuses lines over 64 KiB."""
    buf = b""
    async for data in resp.content.iter_any():
        buf += data
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield line
    if buf:
        yield buf


async def _read_stream(resp: aiohttp.ClientResponse, outcome: RequestOutcome, start: float,
                       on_chunk: Callable[[], None] | None) -> None:
    last: float | None = None  # sequence 0's last chunk
    chunks = 0
    async for raw in _sse_lines(resp):
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        msg = json.loads(data)
        if "error" in msg:
            outcome.error_kind = ErrorKind.PROTOCOL
            outcome.error = f"stream error: {json.dumps(msg['error'])[:300]}"
            return
        choices = msg.get("choices")
        if choices:
            now = time.perf_counter()
            if outcome.ttft_s is None:
                outcome.ttft_s = now - start
            if choices[0].get("index", 0) == 0:
                if last is not None:
                    outcome.itl_s.append(now - last)
                last = now
            chunks += 1
            if on_chunk is not None:
                on_chunk()
        _read_usage(msg, outcome)
    else:
        outcome.error_kind = ErrorKind.PROTOCOL
        outcome.error = "stream ended without [DONE]"
        return
    if outcome.output_tokens == 0:
        # A server without usage reporting: one chunk per token is the best we know.
        outcome.output_tokens = chunks


def _read_response(body: bytes, outcome: RequestOutcome) -> None:
    msg = json.loads(body)
    if "error" in msg or not msg.get("choices"):
        outcome.error_kind = ErrorKind.PROTOCOL
        outcome.error = f"response without choices: {body[:300].decode(errors='replace')}"
        return
    _read_usage(msg, outcome)


def _read_usage(msg: dict, outcome: RequestOutcome) -> None:
    usage = msg.get("usage")
    if usage:
        outcome.prompt_tokens = int(usage.get("prompt_tokens") or outcome.prompt_tokens)
        outcome.output_tokens = int(usage.get("completion_tokens") or 0)

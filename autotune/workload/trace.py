"""Deterministic trace generation from a WorkloadSpec.

The trace holds lengths, block identities, options and seeds, not token lists: the
simulator never needs the IDs (only block identities), and the load generator
materialises them per request.

Prefix sharing has one representation for every source: a request's prompt starts with
``prefix_blocks``, block identities of ``prefix_block_len`` tokens each, and the same
identity always stands for the same tokens. The synthetic shared system prompt is one block
(identity 0, ``shared_prefix_len`` tokens); a Mooncake trace's shared ``hash_ids`` are
blocks of 512 tokens. So vLLM's prefix cache hits real vLLM exactly where the simulator
counts a shared block.

Every random draw comes from the spec's seed. Each new feature draws from its own stream
(``default_rng([seed, tag])``), so adding one never shifts the draws of another, and a
spec that uses none of them gives the same trace as before they existed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune.workload.files import TraceRow
from autotune.workload.options import PLAIN, RequestOptions
from autotune.workload.spec import LengthDist, WorkloadSpec

SYSTEM_PROMPT_BLOCK = 0  # the synthetic shared system prompt's block identity
_BLOCK_STREAM = 0x5EED
_TAIL_STREAM = 0x7A11
_OPTIONS_STREAM = 0x0B75


@dataclass(frozen=True)
class TraceRequest:
    """One request of the fixed benchmark.

    ``prompt_len`` includes the prefix blocks. ``prefix_blocks`` are always whole blocks
    and cover fewer tokens than the prompt (an engine always computes at least the last
    prompt token), so ``prefix_len`` tokens are what a prefix cache can serve at best.
    ``output_len`` is per sequence: with ``options.n > 1`` each of the n sequences generates
    ``output_len`` tokens. ``arrival_s`` is the open-loop send time (None in a closed loop).
    """

    index: int
    prompt_len: int
    output_len: int
    arrival_s: float | None
    token_seed: int
    prefix_blocks: tuple[int, ...] = ()
    prefix_block_len: int = 0
    options: RequestOptions = PLAIN

    @property
    def prefix_len(self) -> int:
        return len(self.prefix_blocks) * self.prefix_block_len

    @property
    def shares_prefix(self) -> bool:
        return bool(self.prefix_blocks)

    def prompt_token_ids(self, spec: WorkloadSpec, token_id_high: int | None = None) -> list[int]:
        """The exact prompt, as token IDs: the prefix blocks' tokens then a unique suffix."""
        high = min(spec.token_id_high, token_id_high) if token_id_high else spec.token_id_high
        low = spec.token_id_low
        ids: list[int] = []
        for block in self.prefix_blocks:
            ids.extend(_block_token_ids(spec.seed, block, self.prefix_block_len, low, high))
        rng = np.random.default_rng(self.token_seed)
        ids.extend(rng.integers(low, high, size=self.prompt_len - len(ids)).tolist())
        return ids


@lru_cache(maxsize=4096)
def _block_token_ids(seed: int, block: int, length: int, low: int, high: int) -> tuple[int, ...]:
    """The tokens of one block identity: a function of (seed, identity) only."""
    rng = np.random.default_rng([seed, _BLOCK_STREAM, block])
    return tuple(rng.integers(low, high, size=length).tolist())


def _draw_lengths(rng: np.random.Generator, dist: LengthDist, n: int) -> np.ndarray:
    if dist.dist == "fixed":
        raw = np.full(n, dist.mean)
    elif dist.dist == "uniform":
        raw = rng.uniform(dist.min, min(dist.max, 2 * dist.mean - dist.min), size=n)
    else:
        # Parameterise by the mean: E[lognormal] = exp(mu + sigma^2 / 2).
        mu = np.log(dist.mean) - dist.sigma**2 / 2
        raw = rng.lognormal(mu, dist.sigma, size=n)
    return np.clip(np.rint(raw), dist.min, dist.max).astype(int)


@dataclass
class _Shape:
    """Lengths and prefix blocks of every request, before clipping to the context."""

    prompt: np.ndarray
    output: np.ndarray
    blocks: list[tuple[int, ...]]
    block_len: int
    token_seeds: np.ndarray


def _synthetic_shape(spec: WorkloadSpec, rng: np.random.Generator) -> _Shape:
    n = spec.num_requests
    prompt = _draw_lengths(rng, spec.prompt_len, n)
    output = _draw_lengths(rng, spec.output_len, n)
    shares = rng.random(n) < spec.shared_prefix_fraction
    token_seeds = rng.integers(0, 2**62, size=n)
    if spec.long_tail is not None:
        tail_rng = np.random.default_rng([spec.seed, _TAIL_STREAM])
        is_long = tail_rng.random(n) < spec.long_tail.fraction
        prompt = np.where(is_long, _draw_lengths(tail_rng, spec.long_tail.prompt_len, n), prompt)
    prompt = prompt + np.where(shares, spec.shared_prefix_len, 0)
    blocks: list[tuple[int, ...]] = [(SYSTEM_PROMPT_BLOCK,) if s else () for s in shares]
    return _Shape(prompt, output, blocks, spec.shared_prefix_len, token_seeds)


def _trace_shape(spec: WorkloadSpec, rows: Sequence[TraceRow], rng: np.random.Generator) -> _Shape:
    assert spec.trace is not None
    prompt = np.array([r.prompt_tokens for r in rows])
    output = np.array([r.output_tokens for r in rows])
    token_seeds = rng.integers(0, 2**62, size=len(rows))
    return _Shape(prompt, output, _shared_runs(rows), spec.trace.block_tokens, token_seeds)


def _shared_runs(rows: Sequence[TraceRow]) -> list[tuple[int, ...]]:
    """Each row's leading hash IDs that another selected row also has.

    Prefix caching only ever serves a leading run (block k is reusable only after blocks
    0..k-1), and a block no other request has can never hit, so only that run is shared.
    """
    counts = Counter(h for r in rows for h in set(r.hash_ids))
    out: list[tuple[int, ...]] = []
    for r in rows:
        run = 0
        while run < len(r.hash_ids) and counts[r.hash_ids[run]] > 1:
            run += 1
        out.append(r.hash_ids[:run])
    return out


def _arrivals(spec: WorkloadSpec, rows: Sequence[TraceRow], rng: np.random.Generator) -> np.ndarray | None:
    """Open-loop send times in seconds from the benchmark start; None in a closed loop."""
    n = spec.num_requests
    if spec.arrivals == "closed":
        return None
    if spec.arrivals == "trace":
        assert spec.trace is not None
        t = np.array([r.t_s for r in rows], dtype=float)
        return (t - t[0]) / spec.trace.speed
    # vllm bench serve's get_request: gamma gaps with shape = burstiness and mean 1/rate
    # (burstiness 1: exponential gaps, a Poisson process), then rescaled so the last
    # request goes out at exactly num_requests / rate, which vLLM does to steady throughput.
    assert spec.request_rate is not None
    b = spec.burstiness
    t = np.cumsum(rng.gamma(shape=b, scale=1.0 / (spec.request_rate * b), size=n))
    if t[-1] > 0:
        t *= (n / spec.request_rate) / t[-1]
    return t


def _options(spec: WorkloadSpec, rows: Sequence[TraceRow]) -> list[RequestOptions]:
    """Each request's options: a trace line's own, else drawn from the spec's fractions."""
    n = spec.num_requests
    o = spec.options
    u = np.random.default_rng([spec.seed, _OPTIONS_STREAM]).random((n, 3))

    def pick(share, col: int) -> np.ndarray:
        return u[:, col] < share.fraction if share is not None else np.zeros(n, dtype=bool)

    plp, lp, nn = pick(o.prompt_logprobs, 0), pick(o.logprobs, 1), pick(o.n, 2)
    out: list[RequestOptions] = []
    for i in range(n):
        own = rows[i].options if rows else None
        if own is not None:
            out.append(own)
            continue
        out.append(RequestOptions(
            prompt_logprobs=o.prompt_logprobs.value if plp[i] and o.prompt_logprobs else None,
            logprobs=o.logprobs.value if lp[i] and o.logprobs else None,
            n=o.n.value if nn[i] and o.n else 1,
        ))
    return out


def generate_trace(spec: WorkloadSpec, max_model_len: int | None = None) -> list[TraceRequest]:
    """The benchmark's requests, in send order. Same spec and seed, same trace.

    With ``max_model_len``, prompt + output is clipped to fit, as a client sizing its
    requests to the deployed context would do; otherwise vLLM would reject the request.
    """
    rng = np.random.default_rng(spec.seed)
    rows = spec.trace_rows
    if spec.trace is not None:
        if len(rows) < spec.num_requests:
            raise ValueError(f"num_requests {spec.num_requests} exceeds the {len(rows)} requests loaded from the trace")
        rows = rows[: spec.num_requests]
        shape = _trace_shape(spec, rows, rng)
    else:
        shape = _synthetic_shape(spec, rng)
    arrivals = _arrivals(spec, rows, rng)
    options = _options(spec, rows)

    out: list[TraceRequest] = []
    for i in range(spec.num_requests):
        plen, olen = int(shape.prompt[i]), int(shape.output[i])
        if max_model_len is not None and plen + olen > max_model_len:
            olen = max(1, min(olen, max_model_len // 4))
            plen = max(1, max_model_len - olen)
        blocks = shape.blocks[i]
        if blocks:
            # Whole blocks only, and at least one prompt token after them.
            blocks = blocks[: (plen - 1) // shape.block_len]
        out.append(
            TraceRequest(
                index=i,
                prompt_len=plen,
                output_len=olen,
                arrival_s=float(arrivals[i]) if arrivals is not None else None,
                token_seed=int(shape.token_seeds[i]),
                prefix_blocks=blocks,
                prefix_block_len=shape.block_len if blocks else 0,
                options=options[i],
            )
        )
    return out

"""Deterministic trace generation from a WorkloadSpec.

The trace holds lengths and seeds, not token lists: the simulator never needs the IDs
(only block identities), and the load generator materialises them per request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.workload.spec import LengthDist, WorkloadSpec


@dataclass(frozen=True)
class TraceRequest:
    """One request of the fixed benchmark.

    ``prompt_len`` includes the shared prefix when ``shares_prefix`` is set; the prefix is
    the same ``prefix_len`` tokens for every sharing request, so prefix caching can hit.
    """

    index: int
    prompt_len: int
    output_len: int
    shares_prefix: bool
    prefix_len: int
    arrival_s: float | None
    token_seed: int

    def prompt_token_ids(self, spec: WorkloadSpec, token_id_high: int | None = None) -> list[int]:
        """The exact prompt, as token IDs: the shared prefix (if any) then a unique suffix."""
        high = min(spec.token_id_high, token_id_high) if token_id_high else spec.token_id_high
        low = spec.token_id_low
        ids: list[int] = []
        if self.shares_prefix:
            ids.extend(_shared_prefix_ids(spec.seed, self.prefix_len, low, high))
        rng = np.random.default_rng(self.token_seed)
        ids.extend(rng.integers(low, high, size=self.prompt_len - len(ids)).tolist())
        return ids


def _shared_prefix_ids(seed: int, length: int, low: int, high: int) -> list[int]:
    rng = np.random.default_rng([seed, 0x5EED])
    return rng.integers(low, high, size=length).tolist()


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


def generate_trace(spec: WorkloadSpec, max_model_len: int | None = None) -> list[TraceRequest]:
    """The benchmark's requests, in send order. Same spec and seed, same trace.

    With ``max_model_len``, prompt + output is clipped to fit, as a client sizing its
    requests to the deployed context would do; otherwise vLLM would reject the request.
    """
    rng = np.random.default_rng(spec.seed)
    n = spec.num_requests
    prompt = _draw_lengths(rng, spec.prompt_len, n)
    output = _draw_lengths(rng, spec.output_len, n)
    shares = rng.random(n) < spec.shared_prefix_fraction
    token_seeds = rng.integers(0, 2**62, size=n)
    arrivals: np.ndarray | None = None
    if spec.request_rate is not None:
        arrivals = np.cumsum(rng.exponential(1.0 / spec.request_rate, size=n))

    out: list[TraceRequest] = []
    for i in range(n):
        plen = int(prompt[i]) + (spec.shared_prefix_len if shares[i] else 0)
        olen = int(output[i])
        if max_model_len is not None and plen + olen > max_model_len:
            olen = max(1, min(olen, max_model_len // 4))
            plen = max(1, max_model_len - olen)
        shared = bool(shares[i]) and plen > spec.shared_prefix_len
        out.append(
            TraceRequest(
                index=i,
                prompt_len=plen,
                output_len=olen,
                shares_prefix=shared,
                prefix_len=spec.shared_prefix_len if shared else 0,
                arrival_s=float(arrivals[i]) if arrivals is not None else None,
                token_seed=int(token_seeds[i]),
            )
        )
    return out

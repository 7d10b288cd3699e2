"""The workload section of a search space: what one trial's benchmark sends.

Every backend replays the same trace, so a trial on the simulator and one on real vLLM
see the same prompts (as token IDs), the same exact output lengths and the same order.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LengthDist(BaseModel):
    """A token-length distribution, clipped to [min, max].

    ``lognormal`` matches chat traffic (ShareGPT-like: most turns short, a long tail);
    ``mean`` is the distribution's mean before clipping, ``sigma`` the log-space spread.
    """

    model_config = ConfigDict(extra="forbid")

    dist: Literal["fixed", "uniform", "lognormal"] = "fixed"
    mean: float = Field(gt=0)
    sigma: float = Field(default=0.5, ge=0)
    min: int = Field(default=1, ge=1)
    max: int = Field(default=1_000_000, ge=1)

    @model_validator(mode="after")
    def _check_bounds(self) -> LengthDist:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class WorkloadSpec(BaseModel):
    """One fixed benchmark: N requests, closed-loop concurrency or open-loop Poisson rate."""

    model_config = ConfigDict(extra="forbid")

    num_requests: int = Field(default=1000, ge=1)
    concurrency: int | None = Field(default=16, ge=1)
    request_rate: float | None = Field(default=None, gt=0, description="open-loop Poisson rate, req/s")
    prompt_len: LengthDist = LengthDist(dist="lognormal", mean=600, sigma=0.6, min=16, max=4096)
    output_len: LengthDist = LengthDist(dist="lognormal", mean=250, sigma=0.6, min=8, max=2048)
    shared_prefix_fraction: float = Field(default=0.0, ge=0, le=1)
    shared_prefix_len: int = Field(default=0, ge=0)
    seed: int = 0
    max_restarts: int = Field(default=3, ge=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    # Token IDs are drawn from [token_id_low, token_id_high) so they stay clear of special tokens
    # and inside any vocabulary the backend serves; the backend may lower the upper bound.
    token_id_low: int = Field(default=100, ge=0)
    token_id_high: int = Field(default=30_000, ge=1)

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.request_rate is not None:
            # Open loop: the rate decides arrivals; concurrency is then only a client-side cap.
            pass
        elif self.concurrency is None:
            raise ValueError("set workload.concurrency (closed loop) or workload.request_rate (open loop)")
        if self.shared_prefix_fraction > 0 and self.shared_prefix_len == 0:
            raise ValueError("shared_prefix_fraction > 0 needs shared_prefix_len > 0")
        if self.token_id_low >= self.token_id_high:
            raise ValueError("token_id_low must be < token_id_high")
        return self

    @property
    def closed_loop(self) -> bool:
        return self.request_rate is None

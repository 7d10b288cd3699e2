"""The workload section of a search space: what one trial's benchmark sends.

Every backend replays the same trace, so a trial on the simulator and one on real vLLM
see the same prompts (as token IDs), the same exact output lengths, the same request
options and the same arrival times. The trace is a pure function of this spec (and, for
``trace:``, of the file's content, pinned by its SHA-256): same spec, same benchmark.

Lengths come either from distributions (``prompt_len``, ``output_len``, a ``long_tail``
and a shared system prompt) or from a recorded trace file (``trace``); arrivals are a
closed loop, Poisson or gamma at ``request_rate`` (``vllm bench serve``'s semantics), or
the trace's own timestamps. See docs/workload.md for every field.

Validation checks the fields only; it reads no file. The trace file is read where the
workload is loaded (``WorkloadSpec.loaded``, which ``autotune.space.load_space`` calls), so a
spec validates the same anywhere and a bad file is one error naming the file, not a
validation error of the schema.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from autotune.results import GoodputSLO
from autotune.workload.files import READERS, TraceFileError, TraceRow, format_choices, open_trace, read_trace

Arrivals = Literal["closed", "poisson", "gamma", "trace"]
# The key under which the space loader passes the space file's directory to validation:
# relative paths in a space (the simulator profiles) are relative to the space file, not to
# wherever autotune runs. (Trace paths are too, resolved by ``WorkloadSpec.loaded``.)
SPACE_DIR_CONTEXT = "space_dir"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LengthDist(_Strict):
    """A token-length distribution, clipped to [min, max].

    ``lognormal`` matches chat traffic (ShareGPT-like: most turns short, a long tail);
    ``mean`` is the distribution's mean before clipping, ``sigma`` the log-space spread.
    """

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


class LongTail(_Strict):
    """A share of requests whose prompt length comes from a second, long distribution.

    Chat traffic with occasional pasted documents or RAG context: the rare long prefills
    set the activation peaks and KV pressure that the median request never shows.
    """

    fraction: float = Field(gt=0, le=1)
    prompt_len: LengthDist


class OptionShare(_Strict):
    """``fraction`` of the requests carry the option with ``value`` (k, or n for ``n``)."""

    fraction: float = Field(ge=0, le=1)
    value: int = Field(ge=0)


class OptionsSpec(_Strict):
    """Request options drawn per request from the seed, independently of each other.

    ``prompt_logprobs: {fraction: 0.1, value: 5}`` makes 10 % of the requests ask for the
    top-5 logprobs of every prompt token (evaluation-style traffic), and so on. A trace
    line that sets any option itself is sent with exactly the line's options.
    """

    prompt_logprobs: OptionShare | None = None
    logprobs: OptionShare | None = None
    n: OptionShare | None = None

    @model_validator(mode="after")
    def _check(self) -> OptionsSpec:
        if self.n is not None and self.n.value < 2:
            raise ValueError(f"n.value must be >= 2 (n = 1 is every other request), got {self.n.value}")
        return self


class TraceSource(_Strict):
    """A recorded trace to replay: lengths, prefix blocks and timestamps from a file.

    ``path`` is relative to the space file. ``speed`` replays at k times the recorded rate
    (gaps divided by k). ``start_s``/``end_s`` select a window in seconds after the file's
    first request; ``workload.num_requests`` caps how many requests of it are sent.
    ``block_tokens`` is how many prompt tokens one ``hash_ids`` entry stands for (512 in
    the Mooncake traces). ``sha256`` pins the file's content: filled in when absent, and a
    file that no longer matches is refused (so a resumed study replays the same trace).
    """

    path: str
    format: str = "auto"  # auto, or a name of autotune.workload.files.READERS (declared there once)
    speed: float = Field(default=1.0, gt=0)
    start_s: float = Field(default=0.0, ge=0)
    end_s: float | None = Field(default=None, gt=0)
    block_tokens: int = Field(default=512, ge=1)
    sha256: str | None = None

    @field_validator("path")
    @classmethod
    def _a_path(cls, v: str) -> str:
        if not v.strip():  # "" would read the space file's directory
            raise ValueError("trace.path is empty; name a trace file (relative to the space file)")
        return v

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v != "auto" and v not in READERS:
            raise ValueError(f"unknown trace format {v!r}; use {format_choices()}")
        return v

    @model_validator(mode="after")
    def _check(self) -> TraceSource:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"trace.end_s ({self.end_s:g}) must be > trace.start_s ({self.start_s:g})")
        return self

    def read(self, base_dir: Path, limit: int) -> tuple[TraceSource, list[TraceRow]]:
        """Read the file (relative to ``base_dir``): this source with its format and sha256
        filled in, and the selected rows. Raises TraceFileError naming the file (and line)."""
        path = Path(self.path).expanduser()
        if not path.is_absolute():
            path = (base_dir / path).absolute()
        fmt, rows = read_trace(path, self.format, self.start_s, self.end_s, limit)
        digest = _sha256(path)
        if self.sha256 is not None and self.sha256 != digest:
            raise TraceFileError(path, None, f"content changed since the space pinned it (sha256 {digest[:12]}... "
                                             f"!= trace.sha256 {self.sha256[:12]}...); restore the file or remove "
                                             "trace.sha256")
        return self.model_copy(update={"format": fmt, "sha256": digest}), rows


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open_trace(path) as f:  # the same checks as the read: a swapped-in FIFO is refused
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# Fields that describe synthetic lengths; a trace brings its own.
_SYNTHETIC_ONLY = ("prompt_len", "output_len", "long_tail", "shared_prefix_fraction", "shared_prefix_len")


class WorkloadSpec(_Strict):
    """One fixed benchmark: which requests, with which options, arriving how."""

    num_requests: int = Field(default=1000, ge=1)
    concurrency: int | None = Field(default=16, ge=1)
    request_rate: float | None = Field(default=None, gt=0, description="open-loop rate, req/s")
    # Gamma shape of the open-loop inter-arrival times, as `vllm bench serve --burstiness`:
    # 1 is Poisson (coefficient of variation 1); below 1 burstier, above 1 more even.
    burstiness: float = Field(default=1.0, gt=0)
    arrivals: Arrivals | None = None  # None: inferred (request_rate -> poisson/gamma, trace -> trace, else closed)
    prompt_len: LengthDist = LengthDist(dist="lognormal", mean=600, sigma=0.6, min=16, max=4096)
    output_len: LengthDist = LengthDist(dist="lognormal", mean=250, sigma=0.6, min=8, max=2048)
    long_tail: LongTail | None = None
    shared_prefix_fraction: float = Field(default=0.0, ge=0, le=1)
    shared_prefix_len: int = Field(default=0, ge=0)
    trace: TraceSource | None = None
    options: OptionsSpec = OptionsSpec()
    goodput_slo: GoodputSLO | None = None
    seed: int = 0
    max_restarts: int = Field(default=3, ge=0)
    request_timeout_s: float = Field(default=600.0, gt=0)
    # Token IDs are drawn from [token_id_low, token_id_high) so they stay clear of special tokens
    # and inside any vocabulary the backend serves; the backend may lower the upper bound.
    token_id_low: int = Field(default=100, ge=0)
    token_id_high: int = Field(default=30_000, ge=1)
    _trace_rows: list[TraceRow] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        self.arrivals = self._resolve_arrivals()
        if self.shared_prefix_fraction > 0 and self.shared_prefix_len == 0:
            raise ValueError("shared_prefix_fraction > 0 needs shared_prefix_len > 0")
        if self.token_id_low >= self.token_id_high:
            raise ValueError("token_id_low must be < token_id_high")
        if self.trace is not None:
            # Compared with the defaults, not "was it given", so a dumped spec validates back.
            given = [f for f in _SYNTHETIC_ONLY if getattr(self, f) != type(self).model_fields[f].default]
            if given:
                raise ValueError(f"{given[0]} does not apply with a trace: lengths and prefix blocks come from "
                                 "the trace file; remove it")
        return self

    def loaded(self, base_dir: Path | str = ".") -> WorkloadSpec:
        """This workload ready to generate: with a trace, a copy with the file read (relative
        paths are relative to ``base_dir``, the space file's directory), its format and sha256
        pinned, the selected rows inside (they travel with the spec, so a worker on another
        node needs no copy of the file) and ``num_requests`` the rows read; without one,
        itself. Raises TraceFileError, one line naming the file, the line and the fix."""
        if self.trace is None:
            return self
        trace, rows = self.trace.read(Path(base_dir), self.num_requests)
        out = self.model_copy(update={"trace": trace, "num_requests": len(rows)})
        out._trace_rows = rows
        return out

    def _resolve_arrivals(self) -> Arrivals:
        mode = self.arrivals
        if mode is None:
            if self.request_rate is not None:
                mode = "poisson" if self.burstiness == 1 else "gamma"
            else:
                mode = "trace" if self.trace is not None else "closed"
        if mode in ("poisson", "gamma") and self.request_rate is None:
            raise ValueError(f"arrivals: {mode} needs workload.request_rate (requests/s)")
        if mode not in ("poisson", "gamma") and self.request_rate is not None:
            raise ValueError(f"request_rate is for poisson or gamma arrivals, not arrivals: {mode}")
        if mode == "poisson" and self.burstiness != 1:
            raise ValueError("poisson arrivals have burstiness 1; use arrivals: gamma for another burstiness")
        if mode in ("closed", "trace") and self.burstiness != 1:
            raise ValueError(f"burstiness applies to gamma arrivals, not arrivals: {mode}")
        if mode == "trace" and self.trace is None:
            raise ValueError("arrivals: trace needs workload.trace (a trace file with timestamps)")
        if mode == "closed" and self.concurrency is None:
            raise ValueError("set workload.concurrency (closed loop) or workload.request_rate (open loop)")
        return mode

    @property
    def closed_loop(self) -> bool:
        return self.arrivals == "closed"

    @property
    def trace_rows(self) -> list[TraceRow]:
        """The trace file's selected requests in file order (empty without ``trace``)."""
        if self.trace is not None and not self._trace_rows:
            raise ValueError("workload.trace: the trace file was not read; load the space with "
                             "autotune.space.load_space, or call WorkloadSpec.loaded(space_dir)")
        return self._trace_rows

"""The discretised grid each scenario's brute force runs over, and why the points lie where they do.

A grid names, for every searched param of a scenario's space, the values the brute force
visits (their Cartesian product). Each one was chosen from where that scenario's landscape
changes, measured with single noise-free simulations before the brute force (README.md,
"Grids"): dense where a flag crosses a startup boundary, a preemption regime or the runtime
OOM cliff; a few points where the response is flat or monotone; a param whose effect was
measured to be nil is held at vLLM's default (and the README says so). The product is kept
small enough for one scenario's brute force to take at most ~10 minutes on 2 CPU cores, as
issue 12 runs it once per truth. Values must be in the space (a categorical's choices, a
float's range): ``check`` enforces it.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from autotune.space import SearchSpace
from autotune.space.schema import ParamSpec
from experiments.search.common import GRID as SEARCH_BENCHMARK_GRID

B = [False, True]

GRIDS: dict[str, dict[str, list[Any]]] = {
    # The search benchmark's grid (experiments/search/README.md), 7,600 configs.
    "qwen72b": SEARCH_BENCHMARK_GRID,
    # V1 runner, mixed chat + scoring. gmu by 0.01 over the whole span that matters: the
    # startup boundary (0.88-0.89, by budget, eager and KV dtype), the preemption regime
    # (KV of 8k-19k tokens at 0.89-0.92) and the runtime-OOM cliff (hazard rising from 0.92,
    # crash loops at 0.96+ with budgets >= 2048, at 0.93+ with 4096). max_num_seqs only
    # moves the profiled sampler and the CUDA-graph set at concurrency 16: its ends and
    # middle. block_size 16 only: 16 and 32 gave the same p99 and OOMs at every point
    # measured (gmu 0.9/0.92/0.96 x budget 512/2048 x KV auto/fp8). Every budget: it sets
    # the prompt-logprobs chunk, hence the hazard. 11 x 3 x 2 x 2 x 5 x 2 = 1,320 configs.
    "qwen72b-mixed": {
        "gpu_memory_utilization": [0.88, 0.89, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98],
        "max_num_seqs": [16, 64, 256],
        "block_size": [16],
        "enforce_eager": B,
        "enable_prefix_caching": B,
        "max_num_batched_tokens": [512, 1024, 2048, 4096, 8192],
        "kv_cache_dtype": ["auto", "fp8"],
    },
    # KV-starved RAG. Every gmu step of the space (each 0.01 is ~5k tokens of KV, and the
    # p99 falls steeply until four requests fit); max_num_seqs at the concurrency (4), 16
    # and vLLM's H100 default 1024 (it only sizes the profiled sampler pass and the graph set
    # here; 128, in the grid until the space gained budgets 512 and 1024, lies between them
    # on that monotone response and tied them at every best); every budget, KV dtype, prefix
    # caching and eager.
    # 10 x 3 x 6 x 2 x 2 x 2 = 1,440 configs, 80 rejected (1024 seqs > budget 512).
    "rag-llama70b-h100": {
        "gpu_memory_utilization": [0.88, 0.89, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97],
        "max_num_seqs": [4, 16, 1024],
        "max_num_batched_tokens": [512, 1024, 2048, 4096, 8192, 16384],
        "kv_cache_dtype": ["auto", "fp8"],
        "enable_prefix_caching": B,
        "enforce_eager": B,
    },
    # Goodput near saturation. KV is never short (450k tokens), so gmu only at the space's
    # bottom, vLLM's default and the top (headroom for the OOM hazard). max_num_seqs by
    # powers of two: below ~128 the batch cap queues requests past the TTFT SLO. Every
    # budget: it decides TPOT under bursts. 3 x 6 x 6 x 2 x 2 = 432 configs, 12 of them
    # rejected by the budget >= max_num_seqs constraint.
    "bursty-goodput": {
        "gpu_memory_utilization": [0.84, 0.92, 0.96],
        "max_num_seqs": [32, 64, 128, 256, 512, 1024],
        "max_num_batched_tokens": [512, 1024, 2048, 4096, 8192, 16384],
        "enable_prefix_caching": B,
        "enforce_eager": B,
    },
    # Speed-bound, memory-rich. gmu at the bottom, default and top; max_num_seqs by powers
    # of two around the concurrency (256); every budget, prefix caching, KV dtype.
    # 3 x 5 x 5 x 2 x 2 = 300 configs.
    "small-highconc": {
        "gpu_memory_utilization": [0.84, 0.92, 0.96],
        "max_num_seqs": [32, 64, 128, 256, 512],
        "max_num_batched_tokens": [512, 1024, 2048, 4096, 8192],
        "enable_prefix_caching": B,
        "kv_cache_dtype": ["auto", "fp8"],
    },
    # Trace replay at 4x. Every gmu of the space (KV 120k-180k tokens against bursts that
    # hold ~100k), max_num_seqs by powers of two (no client cap: the batch cap is the
    # admission limit), every budget, prefix caching, eager. 4 x 5 x 5 x 2 x 2 = 400 configs.
    "trace-replay": {
        "gpu_memory_utilization": [0.84, 0.88, 0.92, 0.96],
        "max_num_seqs": [16, 32, 64, 128, 256],
        "max_num_batched_tokens": [512, 1024, 2048, 4096, 8192],
        "enable_prefix_caching": B,
        "enforce_eager": B,
    },
}


def grid_for(scenario: str) -> dict[str, list[Any]]:
    if scenario not in GRIDS:
        raise KeyError(f"no grid for scenario {scenario!r}; add one to experiments/scenarios/grids.py "
                       f"(known: {', '.join(sorted(GRIDS))})")
    return GRIDS[scenario]


# The most configs a brute force visits (``capped``). The flagship's 1,320 take 163 s on 2
# cores (experiments/reality_gap/README.md, "Brute-force cost"), and issue 18 asks for a
# truth's brute force in at most 3 minutes there.
MAX_CONFIGS = 1_500


def derived(space: SearchSpace) -> dict[str, list[Any]]:
    """The grid of a space that has no hand-placed one (a space given by path): each param's
    ``grid_values`` at the space's ``study.grid_points``, as the grid sampler visits it."""
    return {name: p.grid_values(space.study.grid_points) for name, p in space.params.items()}


def size(grid: dict[str, list[Any]]) -> int:
    """How many configs the grid holds (before the space's constraints reject any)."""
    return math.prod(len(v) for v in grid.values())


def capped(grid: dict[str, list[Any]], max_configs: int = MAX_CONFIGS) -> dict[str, list[Any]]:
    """``grid`` with at most ``max_configs`` configs where thinning can get there: while it holds
    more, the param with the most values (the first such, in the grid's order) loses one.

    Thinning keeps a param's first and last values and spreads the rest evenly *by position*,
    so a hand-placed grid stays densest where it was placed densest, and a param never drops
    below two values: a grid of only two-valued params is returned as it is. A space given by
    path can search many flags (ten at four points is a million configs), and the search
    benchmark's qwen72b grid holds 7,600; without the cap the first runs for a day or more, the
    second for about 15 minutes on 2 cores (both estimated from the flagship's 0.12 s a config:
    1,320 configs in 163 s, experiments/reality_gap/README.md, "Brute-force cost").
    refine.py searches a finer ladder of every flag from the grid's best, so the truth's best
    over the space does not depend on the cap."""
    counts = {name: len(values) for name, values in grid.items()}
    while math.prod(counts.values()) > max_configs:
        name = max(counts, key=lambda n: counts[n])
        if counts[name] <= 2:
            break
        counts[name] -= 1
    # Thinned once from the full list: thinning step by step would pile the kept values up at the ends.
    return {name: _thin(list(values), counts[name]) for name, values in grid.items()}


def _thin(values: list[Any], k: int) -> list[Any]:
    """``k`` of ``values``: the ends and evenly spaced positions between them."""
    n = len(values)
    if k >= n:
        return values
    return [values[round(i * (n - 1) / (k - 1))] for i in range(k)]


def check(grid: dict[str, list[Any]], space: SearchSpace) -> None:
    """Every searched param has grid values, and every value is one the space can sample."""
    if set(grid) != set(space.params):
        raise ValueError(f"grid params {sorted(grid)} != the space's {sorted(space.params)}")
    for name, values in grid.items():
        for v in values:
            problem = value_problem(name, space.params[name], v)
            if problem is not None:
                raise ValueError(f"grid: {problem}")


def value_problem(name: str, p: ParamSpec, v: Any) -> str | None:
    """Why ``v`` is not a value the searched param ``name`` can take (None: it is)."""
    if p.type == "categorical" and v not in (p.choices or []):
        return f"{name}={v!r} is not one of the space's choices {p.choices}"
    if p.type in ("int", "float") and (isinstance(v, bool) or not isinstance(v, int | float)
                                        or not (p.low <= v <= p.high)):  # type: ignore[operator]
        return f"{name}={v!r} is outside the space's [{p.low}, {p.high}]"
    if p.type == "bool" and not isinstance(v, bool):
        return f"{name}={v!r} is not a bool"
    return None


def configs(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination, in a fixed order."""
    return [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]

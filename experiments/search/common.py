"""Shared pieces of the search benchmark: the discretized space, true values, hypervolume.

Everything here is SIMULATED (autotune.sim); no number in experiments/search was measured on a GPU.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engine import resolve_defaults
from autotune.space import SearchSpace, load_space
from autotune.study.search import gpu_memory_gib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SPACE_PATH = ROOT / "search_spaces" / "qwen72b.yaml"
DATA = HERE / "data"
TABLE = DATA / "ground_truth.csv.gz"
FRONT = DATA / "true_front.csv"
TARGET = DATA / "target.json"

# The ground-truth grid over qwen72b.yaml's params. gpu_memory_utilization keeps the space's
# 0.005 step where the landscape changes (startup boundary ~0.88, runtime-OOM cliff ~0.95-0.98)
# and 0.01 in the flat middle; max_num_seqs takes the log-spaced powers of two the space spans.
GRID: dict[str, list[Any]] = {
    "gpu_memory_utilization": [0.85, 0.86, 0.87, 0.875, 0.88, 0.885, 0.89, 0.9, 0.91, 0.92, 0.93, 0.94,
                               0.95, 0.955, 0.96, 0.965, 0.97, 0.975, 0.98],
    "max_num_seqs": [16, 32, 64, 128, 256],
    "block_size": [16, 32],
    "enforce_eager": [False, True],
    "enable_prefix_caching": [False, True],
    "max_num_batched_tokens": [512, 1024, 2048, 4096, 8192],
    "kv_cache_dtype": ["auto", "fp8"],
}
PARAMS = list(GRID)
# Seeds of the ground truth ("true" value = mean over these). Trials in studies use other seeds.
TRUTH_SEEDS = (9001, 9002, 9003)

# Hypervolume: oom_per_1k is mapped to log10(1 + oom)/log10(1001) in [0, 1] (so 0, 1, 10, 100
# and 1000 OOMs/1k are 0, .10, .35, .67, 1: a deployable rate differs from a crash-looping one),
# p99 to p99 / P99_REF_FACTOR / target p99. Reference point (1, 1) = (1000 OOM/1k, 2x target p99).
P99_REF_FACTOR = 2.0


def space() -> SearchSpace:
    return load_space(SPACE_PATH)


def key_of(params: Mapping[str, Any]) -> tuple:
    """A hashable config key over the searched params (floats rounded like the driver does)."""
    out = []
    for n in PARAMS:
        v = params[n]
        if n == "gpu_memory_utilization":
            v = round(float(v), 6)
        elif isinstance(v, bool) or n in ("enforce_eager", "enable_prefix_caching"):
            v = bool(v)
        elif n in ("max_num_seqs", "block_size", "max_num_batched_tokens"):
            v = int(v)
        out.append(v)
    return tuple(out)


def grid_configs() -> list[dict[str, Any]]:
    return [dict(zip(PARAMS, combo, strict=True)) for combo in itertools.product(*GRID.values())]


def resolved_flags(sp: SearchSpace, params: Mapping[str, Any]) -> dict[str, Any]:
    flags = {**sp.fixed_flags(), **params}
    return resolve_defaults(flags, sp.engine.gpu, gpu_memory_gib(sp.engine.gpu))


@dataclass
class Truth:
    oom_per_1k: float
    p99_e2e_s: float  # nan when it never served
    started: bool
    gpu_time_s: float
    n_seeds: int
    failure: str = ""


def evaluate(sp: SearchSpace, params: Mapping[str, Any], seeds: Iterable[int] = TRUTH_SEEDS) -> Truth:
    """Mean of the simulator over ``seeds`` (a startup failure is deterministic: one run)."""
    from autotune.sim import predict_startup, simulate_trial

    flags = resolved_flags(sp, params)
    pred = predict_startup(sp.engine.model, sp.engine.gpu, flags)
    if not pred.ok:
        res = simulate_trial(sp.engine.model, sp.engine.gpu, flags, sp.workload, seed=0)
        assert res.status.value != "ok", f"predict_startup and the simulator disagree on {params}"
        m = res.metrics()
        return Truth(m["oom_per_1k"], math.nan, False, m["gpu_time_s"], 0, str(res.failure_class))
    ooms, p99s, gts = [], [], []
    for s in seeds:
        m = simulate_trial(sp.engine.model, sp.engine.gpu, flags, sp.workload, seed=s).metrics()
        ooms.append(m["oom_per_1k"])
        p99s.append(m["p99_e2e_s"])
        gts.append(m["gpu_time_s"])
    p = [x for x in p99s if not math.isnan(x)]
    return Truth(sum(ooms) / len(ooms), sum(p) / len(p) if p else math.nan, True, sum(gts) / len(gts), len(ooms))

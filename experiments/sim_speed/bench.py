"""CPU time of simulated trials (simulator speed, not GPU performance).

    .venv/bin/python experiments/sim_speed/bench.py [--repeats 10]

Times `simulate_trial` on the qwen72b space's 1000-request benchmark for a few configs
(median of --repeats runs each) and `predict_startup` alone.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

from autotune.sim import predict_startup, simulate_trial
from autotune.space import load_space

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "qwen72b.yaml"
CONFIGS = {
    "v1 defaults (gmu 0.9, prefix caching)": {"gpu_memory_utilization": 0.9},
    "report defaults (no prefix caching, preempting)": {"gpu_memory_utilization": 0.9, "enable_prefix_caching": False},
    "gmu 0.975 (runtime OOMs, restarts)": {"gpu_memory_utilization": 0.975, "enable_prefix_caching": False},
    "eager, max_num_seqs 64, block 32": {"gpu_memory_utilization": 0.93, "enforce_eager": True, "max_num_seqs": 64,
                                         "block_size": 32},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    sp = load_space(SPACE)
    print(f"simulator CPU timings on {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"workload: {sp.workload.num_requests} requests, concurrency {sp.workload.concurrency}")
    for name, over in CONFIGS.items():
        flags = {**sp.fixed_flags(), **over}
        times, res = [], None
        for s in range(args.repeats):
            t0 = time.perf_counter()
            res = simulate_trial(sp.engine.model, sp.engine.gpu, flags, sp.workload, seed=s)
            times.append(time.perf_counter() - t0)
        assert res is not None
        print(f"  {name:50s} median {statistics.median(times) * 1000:6.1f} ms  max {max(times) * 1000:6.1f} ms  "
              f"({res.extra.get('steps', 0)} engine steps, {res.extra.get('decode_runs', 0)} batched decode runs)")
    flags = {**sp.fixed_flags(), "gpu_memory_utilization": 0.9}
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        predict_startup(sp.engine.model, sp.engine.gpu, flags)
    print(f"  predict_startup: {(time.perf_counter() - t0) / n * 1e6:.0f} us per call")


if __name__ == "__main__":
    main()

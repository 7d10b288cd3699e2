"""CPU time of simulated trials (simulator speed, not GPU performance).

    .venv/bin/python experiments/sim_speed/bench.py [--repeats 10] [--json OUT]

Times ``simulate_trial`` on the qwen72b space's 1000-request benchmark for a few configs
(median of --repeats runs each), one 10,000-request benchmark at concurrency 256, and
``predict_startup`` alone. Only the five-argument ``simulate_trial`` call is used, so the
same script times an older checkout too (``PYTHONPATH=/tmp/before``, see the README).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from autotune.sim import predict_startup, simulate_trial
from autotune.space import load_space

SPACE = Path(__file__).resolve().parents[2] / "search_spaces" / "qwen72b.yaml"
CONFIGS = {
    "vLLM defaults (gmu 0.92, prefix caching)": {},
    "report defaults (gmu 0.9, no prefix caching)": {"gpu_memory_utilization": 0.9, "enable_prefix_caching": False},
    "gmu 0.975, no prefix caching (near the edge)": {"gpu_memory_utilization": 0.975,
                                                      "enable_prefix_caching": False},
    "eager, max_num_seqs 64, block 32": {"gpu_memory_utilization": 0.93, "enforce_eager": True, "max_num_seqs": 64,
                                         "block_size": 32},
}
BIG = {"num_requests": 10_000, "concurrency": 256}  # the 10,000-request benchmark, vLLM defaults
BIG_FLAGS = {"gpu_memory_utilization": 0.95, "kv_cache_dtype": "fp8"}  # room for 256 in flight


def _time(sp, flags, workload, seeds) -> tuple[list[float], object]:
    times, res = [], None
    for s in seeds:
        t0 = time.perf_counter()
        res = simulate_trial(sp.engine.model, sp.engine.gpu, flags, workload, seed=s)
        times.append(time.perf_counter() - t0)
    return times, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--big-repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    sp = load_space(SPACE)
    out: dict[str, dict[str, float]] = {}
    print(f"simulator CPU timings on {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"workload: {sp.workload.num_requests} requests, concurrency {sp.workload.concurrency}")
    for name, over in CONFIGS.items():
        times, res = _time(sp, {**sp.fixed_flags(), **over}, sp.workload, range(args.repeats))
        m = res.metrics()
        out[name] = {"median_s": statistics.median(times), "max_s": max(times), "steps": res.extra.get("steps", 0),
                     "decode_runs": res.extra.get("decode_runs", 0), "oom_per_1k": m["oom_per_1k"]}
        print(f"  {name:48s} median {statistics.median(times) * 1000:6.1f} ms  max {max(times) * 1000:6.1f} ms  "
              f"({res.extra.get('steps', 0)} steps, {res.extra.get('decode_runs', 0)} decode runs, "
              f"{m['oom_per_1k']:.0f} OOM/1k)")
    big = sp.workload.model_copy(update=BIG)
    times, res = _time(sp, {**sp.fixed_flags(), **BIG_FLAGS}, big, range(args.big_repeats))
    name = f"{BIG['num_requests']} requests, concurrency {BIG['concurrency']} ({BIG_FLAGS})"
    out[name] = {"median_s": statistics.median(times), "max_s": max(times), "steps": res.extra.get("steps", 0),
                 "decode_runs": res.extra.get("decode_runs", 0), "oom_per_1k": res.metrics()["oom_per_1k"]}
    print(f"  {name}: median {statistics.median(times):.2f} s  max {max(times):.2f} s  "
          f"({res.extra.get('steps', 0)} steps, {res.extra.get('decode_runs', 0)} decode runs)")
    flags = {**sp.fixed_flags(), "gpu_memory_utilization": 0.92}
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        predict_startup(sp.engine.model, sp.engine.gpu, flags)
    per_call = (time.perf_counter() - t0) / n
    out["predict_startup"] = {"median_s": per_call}
    print(f"  predict_startup: {per_call * 1e6:.0f} us per call")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

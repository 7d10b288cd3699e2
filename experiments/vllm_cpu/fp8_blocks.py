"""Is fp8 KV's excess time the dtype, or the twice-as-large cache it buys? Four configs, two starts each.

CPU measurements of a toy model on vLLM's CPU build (experiments/vllm_cpu): never GPU figures.

The table's fp8 configs measure about 20 % above the simulator's CPU host in TTFT, and the fp8 kernels
(fp8_kernel.py) explain little of it. In the table an fp8 config always holds twice the tokens (and
blocks) of the bf16 config with the same ``kv_cache_memory_bytes``, so the dtype and the cache size move
together. This separates them: the table's best config (``c42``: fp8, 6000 bf16 tokens' bytes, 48
sequences, 2,048-token budget, block 128, prefix caching and chunked prefill) and three variants,

* ``fp8-12k``: c42 itself (11,904 tokens);
* ``bf16-12k``: bf16 with twice the bytes: the same tokens and blocks, the other dtype;
* ``bf16-6k``: bf16 with c42's bytes (half the tokens);
* ``fp8-6k``: fp8 with half c42's bytes: bf16-6k's tokens, the other dtype.

Same tokens, other dtype: the dtype's cost. Same dtype, other size: the cache size's. Each run is
``measure.run_one`` (autotune's own vllm backend, the space's benchmark, the engine pinned off the load
generator's core), appended to ``results/fp8_blocks.jsonl``; ``--summary`` prints each variant's mean
TTFT, TPOT and p99 over its starts.

    .venv/bin/python -m experiments.vllm_cpu.fp8_blocks [--starts 2]
    .venv/bin/python -m experiments.vllm_cpu.fp8_blocks --summary
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from experiments.vllm_cpu.measure import RESULTS, current_key, measure, read_rows

OUT = RESULTS / "fp8_blocks.jsonl"
C42 = {"block_size": 128, "enable_chunked_prefill": True, "enable_prefix_caching": True,
       "max_num_batched_tokens": 2048, "max_num_seqs": 48}
BYTES = 49152000  # 6000 tokens of the toy model's bf16 KV (8192 bytes a token)
VARIANTS: dict[str, dict[str, Any]] = {
    "fp8-12k": {**C42, "kv_cache_dtype": "fp8", "kv_cache_memory_bytes": BYTES},
    "bf16-12k": {**C42, "kv_cache_dtype": "auto", "kv_cache_memory_bytes": 2 * BYTES},
    "bf16-6k": {**C42, "kv_cache_dtype": "auto", "kv_cache_memory_bytes": BYTES},
    "fp8-6k": {**C42, "kv_cache_dtype": "fp8", "kv_cache_memory_bytes": BYTES // 2},
}
PREDICTED = ("mean_ttft_s", "mean_tpot_s", "p99_e2e_s")
FIGURES = ("mean_ttft_s", "p99_ttft_s", "mean_tpot_s", "p99_e2e_s", "preemptions", "kv_cache_tokens",
           "prefix_cache_hit_rate")


def predictions() -> dict[str, dict[str, float]]:
    """The nominal simulator's CPU host (autotune's model before any calibration, noise off) for each variant."""
    from autotune.calibrate.model import simulate
    from autotune.space import load_space
    from experiments.vllm_cpu.measure import SPACE
    from experiments.vllm_cpu.replay import model_space

    space = model_space(load_space(SPACE))
    profile = space.study.strategy.base_profile
    return {name: simulate(space, {**space.fixed_flags(), **flags}, profile) or {} for name, flags in VARIANTS.items()}


def summary() -> dict[str, dict[str, Any]]:
    """Each variant's means over its starts, the model's prediction, and measured / predicted."""
    rows = [r for r in read_rows(OUT) if r.get("landscape") == current_key() and r.get("failure_class") == "none"]
    preds = predictions()
    out = {}
    for name in VARIANTS:
        mine = [r for r in rows if r["config"] == name]
        if not mine:
            continue
        means = {k: statistics.fmean(r[k] for r in mine) for k in FIGURES if all(r.get(k) is not None for r in mine)}
        p = preds.get(name, {})
        out[name] = {"runs": len(mine), **{k: round(v, 4) for k, v in means.items()},
                     "predicted": {k: round(p[k], 4) for k in PREDICTED if k in p},
                     "measured_over_predicted": {k: round(means[k] / p[k], 3) for k in PREDICTED
                                                 if k in means and p.get(k)}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args(argv)
    if args.summary:
        print(json.dumps({"note": "CPU measurements of a toy model, not GPU figures", **summary()}, indent=1))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    measure(OUT, list(VARIANTS.items()), args.starts, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

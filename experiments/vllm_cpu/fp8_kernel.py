"""What an fp8 KV cache costs vLLM's CPU attention kernel, measured on the kernel itself.

    .vllm-cpu-venv/bin/python experiments/vllm_cpu/fp8_kernel.py [--json]

CPU measurements of vLLM's own attention op (``torch.ops._C.cpu_attention_with_kv_cache``, the call
``vllm/v1/attention/backends/cpu_attn.py`` makes) with the toy model's attention shapes (16 query heads,
4 KV heads, head size 64: experiments/vllm_cpu/model.py), one thread, one layer: never GPU figures.

Why: the table's fp8 configs measure slower than the simulator's CPU host predicts, in prefill most
(experiments/vllm_cpu/README.md, "What is missing"). vLLM's source says where the time goes. On a CPU
with AMX but without AMX-FP8 units (Sapphire Rapids: ``amx_bf16``, no ``amx_fp8``), the attention tile
GEMM for an fp8 cache, ``TileGemm224<BFloat16, fp8>`` in ``csrc/cpu/cpu_attn_amx.hpp``, dequantises each
K and V tile of the cache into a bf16 scratch tile (``deq_tile``) inside its loop, for every tile of
query rows (up to 32 rows: query tokens x the 4 query heads that share a KV head). So a prefill chunk
of ``n`` new tokens dequantises its whole context ``ceil(4 n / 32)`` times, a decode step once: a cost
that grows with new tokens x context, where quantising what is written (the term tried and not kept)
grows with new tokens alone.

This script times the op for bf16 and fp8 caches at several (new tokens, context) shapes and reports
the fp8 excess per dequantised element under that count, and per element written: if the excess is the
tile loop's dequantisation, the first is about constant over the prefill shapes and the second grows with
the context. It also times the cache write itself (``cpu_attn_reshape_and_cache``, a scalar quantise per
element for fp8): its excess per element written. The first median is the CPU host's ``kv_fp8_dequant_ns``
(autotune/deploy/profile.py). The second was ``kv_fp8_quant_ns`` until fp8_engine.py profiled the engine: on
these N(0, 1) values the quantiser is fast, on the toy model's tiny K/V values 13x slower. It needs vLLM's CPU build (scripts/install_vllm_cpu.sh) and runs in its venv, not autotune's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

HEADS, KV_HEADS, HEAD_DIM = 16, 4, 64  # experiments/vllm_cpu/model.py
BLOCK = 128  # vLLM's CPU default block size, the table's most common
TILE_ROWS = 32  # TileGemm224: a tile of up to 32 query rows (csrc/cpu/cpu_attn_amx.hpp)
# (new tokens, context before them): prefill chunks (one sequence) and a decode step (16 sequences).
SHAPES = [(64, 256), (256, 256), (256, 1024), (512, 512), (1024, 0), (1024, 1024)]
DECODE = (16, 512)  # sequences, context each


def dequantised_tokens(new: int, context: int) -> float:
    """Cache tokens the fp8 path dequantises for one sequence: every query tile (rows = new x heads per
    KV head, 32 a tile) reads the context before it plus, causally, the chunk up to its own rows."""
    rows = new * HEADS // KV_HEADS
    tiles = math.ceil(rows / TILE_ROWS)
    per_tile_tokens = TILE_ROWS * KV_HEADS // HEADS
    return sum(context + min(new, (t + 1) * per_tile_tokens) for t in range(tiles))


def run(torch, ops, dtype: str, seqs: int, new: int, context: int, repeats: int) -> float:
    """Median seconds of one attention call over ``seqs`` sequences of ``new`` tokens after ``context``."""
    total = context + new
    blocks_per_seq = math.ceil(total / BLOCK)
    cache_dtype = torch.uint8 if dtype == "fp8" else torch.bfloat16
    kv = torch.zeros((seqs * blocks_per_seq, KV_HEADS, BLOCK, 2 * HEAD_DIM), dtype=cache_dtype)
    kv = kv.view((seqs * blocks_per_seq, KV_HEADS, BLOCK * 2, HEAD_DIM))
    k_cache, v_cache = kv.chunk(2, dim=2)
    g = torch.Generator().manual_seed(0)
    n_tok = seqs * total
    key = torch.randn((n_tok, KV_HEADS, HEAD_DIM), generator=g).to(torch.bfloat16)
    value = torch.randn((n_tok, KV_HEADS, HEAD_DIM), generator=g).to(torch.bfloat16)
    slots = torch.cat([torch.arange(total) + s * blocks_per_seq * BLOCK for s in range(seqs)]).to(torch.int64)
    isa = "amx"
    kv_dtype = "fp8" if dtype == "fp8" else "auto"
    ops.cpu_attn_reshape_and_cache(key, value, k_cache, v_cache, slots, isa, kv_cache_dtype=kv_dtype)
    query = torch.randn((seqs * new, HEADS, HEAD_DIM), generator=g).to(torch.bfloat16)
    out = torch.empty_like(query)
    qsl = torch.tensor([s * new for s in range(seqs + 1)], dtype=torch.int32)
    seq_lens = torch.full((seqs,), total, dtype=torch.int32)
    table = torch.arange(seqs * blocks_per_seq, dtype=torch.int32).view(seqs, blocks_per_seq)
    meta = ops.cpu_attn_get_scheduler_metadata(num_reqs=seqs, num_heads=HEADS, num_kv_heads=KV_HEADS,
                                               head_dim=HEAD_DIM, seq_lens=seq_lens, dtype=torch.bfloat16,
                                               query_start_loc=qsl, causal=True, sliding_window_size=-1, isa=isa,
                                               enable_kv_split=False, kv_cache_dtype=kv_dtype)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ops.cpu_attention_with_kv_cache(query=query, key_cache=k_cache, value_cache=v_cache, output=out,
                                        query_start_loc=qsl, seq_lens=seq_lens, scale=HEAD_DIM ** -0.5, causal=True,
                                        alibi_slopes=None, sliding_window=-1, block_table=table, softcap=0.0,
                                        scheduler_metadata=meta, s_aux=None, kv_cache_dtype=kv_dtype)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def write(torch, ops, dtype: str, new: int, repeats: int, scale: float = 1.0) -> float:
    """Median seconds to write ``new`` tokens' K and V, drawn N(0, ``scale``^2), into the cache
    (``cpu_attn_reshape_and_cache``; the fp8 quantiser's cost depends on the values: fp8_engine.py)."""
    blocks = math.ceil(new / BLOCK)
    kv = torch.zeros((blocks, KV_HEADS, BLOCK, 2 * HEAD_DIM), dtype=torch.uint8 if dtype == "fp8" else torch.bfloat16)
    k_cache, v_cache = kv.view((blocks, KV_HEADS, BLOCK * 2, HEAD_DIM)).chunk(2, dim=2)
    g = torch.Generator().manual_seed(1)
    key, value = ((scale * torch.randn((new, KV_HEADS, HEAD_DIM), generator=g)).to(torch.bfloat16) for _ in range(2))
    slots = torch.arange(new, dtype=torch.int64)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ops.cpu_attn_reshape_and_cache(key, value, k_cache, v_cache, slots, "amx",
                                       kv_cache_dtype="fp8" if dtype == "fp8" else "auto")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        import torch
        from vllm import _custom_ops as ops
    except ImportError as e:
        print(f"error: needs vLLM's CPU build ({e}); run it with .vllm-cpu-venv/bin/python", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    # Linux hands a process AMX tile state only on request (arch_prctl XCOMP_PERM); vLLM's worker gets it
    # through oneDNN's first AMX matmul, before any attention runs. Without it: SIGILL.
    if not torch.cpu._init_amx():
        print("error: this CPU or kernel gives no AMX tiles; the measurement is of the AMX path", file=sys.stderr)
        return 2
    elements = 2 * KV_HEADS * HEAD_DIM  # K and V of one token, one layer
    rows = []
    cases = [(1, n, c) for n, c in SHAPES] + [(DECODE[0], 1, DECODE[1])]
    for seqs, new, ctx in cases:
        bf16 = run(torch, ops, "auto", seqs, new, ctx, args.repeats)
        fp8 = run(torch, ops, "fp8", seqs, new, ctx, args.repeats)
        deq = seqs * dequantised_tokens(new, ctx) * elements
        written = seqs * new * elements
        rows.append({"seqs": seqs, "new": new, "context": ctx, "bf16_us": round(bf16 * 1e6, 1),
                     "fp8_us": round(fp8 * 1e6, 1), "fp8_over_bf16": round(fp8 / bf16, 3),
                     "excess_ns_per_dequantised_element": round((fp8 - bf16) * 1e9 / deq, 4),
                     "excess_ns_per_written_element": round((fp8 - bf16) * 1e9 / written, 3)})
    writes = []
    for new in (256, 1024):
        bf16, fp8 = write(torch, ops, "auto", new, args.repeats), write(torch, ops, "fp8", new, args.repeats)
        writes.append({"new": new, "bf16_us": round(bf16 * 1e6, 1), "fp8_us": round(fp8 * 1e6, 1),
                       "excess_ns_per_written_element": round((fp8 - bf16) * 1e9 / (new * elements), 3)})
    per_deq = [r["excess_ns_per_dequantised_element"] for r in rows if r["new"] > 1]
    out = {"note": "CPU measurements of vLLM's CPU attention op (one layer, one thread, toy model shapes); "
                   "not GPU figures", "threads": torch.get_num_threads(), "isa": "amx",
           "vllm_cpu": getattr(sys.modules.get("vllm"), "__version__", None), "shapes": rows, "writes": writes,
           "median_excess_ns_per_dequantised_element": round(statistics.median(per_deq), 4),
           "median_excess_ns_per_written_element": round(statistics.median(
               w["excess_ns_per_written_element"] for w in writes), 3)}
    if args.json:
        print(json.dumps(out))
    else:
        for r in rows + writes:
            print(r)
        print("median excess ns per dequantised element (prefill):", out["median_excess_ns_per_dequantised_element"])
        print("median excess ns per element written:", out["median_excess_ns_per_written_element"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

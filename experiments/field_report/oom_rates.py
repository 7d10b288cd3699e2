"""Runtime OOM rates the simulator gives on the qwen72b deployment, per vLLM model runner.

    .venv/bin/python experiments/field_report/oom_rates.py [--seeds 10] [--out experiments/field_report]

Two workloads on Qwen2.5-72B-Instruct (bf16, TP 2, 2x A100-80GB, max_model_len 8192),
1000 requests, closed loop at concurrency 16:

* ``chat``: the qwen72b space's own workload (no request options);
* ``mixed``: the same chat traffic with 20 % of the requests replaced by evaluation-style
  scoring requests: prompts uniform in [2000, 7000] tokens, 1-16 output tokens,
  ``prompt_logprobs: 1`` (lm-eval-harness style loglikelihood requests). Written as an
  autotune-format trace, ``mixed_chat_eval.jsonl`` (SYNTHETIC, made by this script, seed 0).

Each is run at vLLM 0.32.0's defaults (gmu 0.92, and A100's 2048-token budget), at a few
other gpu_memory_utilization / max_num_batched_tokens values, and on an H100-80GB pair at its
defaults (vLLM gives H100s an 8192-token budget), under the V2 model runner
(0.32.0's default) and the V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``). Every number is
SIMULATED (autotune.sim), not measured on a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from autotune.sim import simulate_trial
from autotune.space import load_space
from autotune.workload import SYSTEM_PROMPT_BLOCK, WorkloadSpec, generate_trace

REPO = Path(__file__).resolve().parents[2]
SPACE = REPO / "search_spaces" / "qwen72b.yaml"
TRACE = Path(__file__).parent / "mixed_chat_eval.jsonl"
EVAL_SHARE = 0.2
RUNNERS = {"V2 (0.32 default)": {}, "V1": {"VLLM_USE_V2_MODEL_RUNNER": "0"}}
CONFIGS = {  # flags over the space's; "gpu" swaps the GPU (vLLM's defaults follow it)
    "vLLM defaults (gmu 0.92, budget 2048)": {},
    "gmu 0.95": {"gpu_memory_utilization": 0.95},
    "gmu 0.97": {"gpu_memory_utilization": 0.97},
    "budget 8192": {"max_num_batched_tokens": 8192},
    "gmu 0.95, budget 8192": {"gpu_memory_utilization": 0.95, "max_num_batched_tokens": 8192},
    "H100-80GB pair, vLLM defaults (gmu 0.92, budget 8192, 1024 seqs)": {"gpu": "H100-80GB"},
    "H100-80GB pair, gmu 0.95 (budget 8192, 1024 seqs)": {"gpu": "H100-80GB", "gpu_memory_utilization": 0.95},
}


def write_mixed_trace(chat: WorkloadSpec, path: Path) -> None:
    """The chat trace with EVAL_SHARE of its requests swapped for scoring requests (seed 0).

    Chat requests keep their shared system prompt as one hash ID of ``shared_prefix_len``
    tokens (the trace's block_tokens), so prefix caching sees the same sharing as the chat run.
    """
    rng = np.random.default_rng(0)
    lines = []
    for tr in generate_trace(chat, 8192):
        if rng.random() < EVAL_SHARE:
            row: dict[str, Any] = {"prompt_tokens": int(rng.integers(2000, 7001)),
                                   "output_tokens": int(rng.integers(1, 17)), "prompt_logprobs": 1}
        else:
            row = {"prompt_tokens": tr.prompt_len, "output_tokens": tr.output_len}
            if tr.prefix_blocks:
                row["hash_ids"] = [SYSTEM_PROMPT_BLOCK]
        lines.append(json.dumps({"arrival_s": 0.0, **row}))
    path.write_text("\n".join(lines) + "\n")


def mixed_workload(chat: WorkloadSpec) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {"trace": {"path": TRACE.name, "block_tokens": chat.shared_prefix_len}, "arrivals": "closed",
         "num_requests": chat.num_requests, "concurrency": chat.concurrency, "max_restarts": chat.max_restarts},
    ).loaded(TRACE.parent)


def run(seeds: int) -> list[dict[str, Any]]:
    sp = load_space(SPACE)
    write_mixed_trace(sp.workload, TRACE)
    workloads = {"chat": sp.workload, "mixed": mixed_workload(sp.workload)}
    rows = []
    for wname, wl in workloads.items():
        for rname, env in RUNNERS.items():
            for cname, over in CONFIGS.items():
                flags = {**sp.fixed_flags(), **over}
                gpu = flags.pop("gpu", sp.engine.gpu)
                res = [simulate_trial(sp.engine.model, gpu, flags, wl, seed=s, env=env) for s in range(seeds)]
                ooms = [r.metrics()["oom_per_1k"] for r in res]
                p99 = [r.metrics()["p99_e2e_s"] for r in res]
                p99 = [v for v in p99 if v == v] or [float("nan")]  # trials that served nobody have none
                rows.append({"workload": wname, "runner": rname, "config": cname,
                             "oom_per_1k_mean": statistics.mean(ooms), "oom_per_1k_min": min(ooms),
                             "oom_per_1k_max": max(ooms), "crashes_mean": statistics.mean(r.crashes for r in res),
                             "p99_e2e_s_mean": statistics.mean(p99), "status": str(res[0].status),
                             "headroom_gib": res[0].extra.get("mem_gib", {}).get("headroom")})
                print(f"{wname:6s} {rname:18s} {cname:40s} OOM/1k {rows[-1]['oom_per_1k_mean']:7.1f} "
                      f"[{min(ooms):.0f}-{max(ooms):.0f}]  p99 {rows[-1]['p99_e2e_s_mean']:.1f} s")
    return rows


def write(rows: list[dict[str, Any]], out: Path, seeds: int) -> None:
    (out / "oom_rates.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [f"SIMULATED (autotune.sim), mean OOM-failed requests per 1000 over {seeds} trial seeds [min-max]; "
             "qwen72b deployment, 1000 requests, concurrency 16.", "",
             "| workload | runner | config | headroom GiB | OOM/1k | crashes | p99 e2e s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['workload']} | {r['runner']} | {r['config']} | — | cannot start (1000) | — | — |")
            continue
        p99 = "—" if r["p99_e2e_s_mean"] != r["p99_e2e_s_mean"] else f"{r['p99_e2e_s_mean']:.1f}"  # NaN: none served
        lines.append(f"| {r['workload']} | {r['runner']} | {r['config']} | {r['headroom_gib']:.2f} | "
                     f"{r['oom_per_1k_mean']:.1f} [{r['oom_per_1k_min']:.0f}-{r['oom_per_1k_max']:.0f}] | "
                     f"{r['crashes_mean']:.1f} | {p99} |")
    (out / "oom_rates.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = ap.parse_args()
    write(run(args.seeds), args.out, args.seeds)
    print(f"wrote {args.out / 'oom_rates.md'} and oom_rates.json")


if __name__ == "__main__":
    main()

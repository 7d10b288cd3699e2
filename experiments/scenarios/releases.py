"""Which vLLM release's defaults lose requests to OOMs on the flagship deployment, chat vs mixed.

    .venv/bin/python -m experiments.scenarios.releases [--seeds 30] [--jobs 2]   # writes releases.md / .json

The flagship deployment (Qwen2.5-72B-Instruct bf16, TP 2, 2x A100-80GB, max_model_len 8192)
at each vLLM release's OWN defaults for the flags and memory behaviour the simulator models,
on the chat workload of search_spaces/qwen72b.yaml and the chat + scoring mix of
search_spaces/qwen72b-mixed.yaml. The defaults, from vLLM's source and release history:

* 0.8.5 (the field report's release): V1 engine, V1 model runner, CUDA graphs outside the
  budget (no estimate), gmu 0.9, and on a GPU with >= 70 GiB (an A100-80GB included) the API
  server's max_num_batched_tokens 8192 and max_num_seqs 1024 (vllm/engine/arg_utils.py
  ``_set_default_args_v1`` in the 0.8.5 sdist; vllm#17073, undone for A100s by vllm#17885).
* 0.9.0-0.20.x: A100s back to 2048 / 256 (vllm#17885, in 0.9.0); otherwise as 0.8.5.
* 0.21-0.27: CUDA-graph memory estimated into the budget and gmu 0.92 (vllm#38284).
* 0.28-0.32: the V2 model runner (vllm#44443, v0.28.0).

Each row is run over ``--seeds`` trial seeds twice: noise off (the ground truth's
definition: only the OOM hazard draws) and noise on (what repeated benchmarks would see).
One difference the simulator cannot express: 0.8.5 captured CUDA graphs for every batch size
8..512 by 8 (67 sizes), where the simulator uses 0.32's rule (51 sizes here), so it gives
0.8.5 ~0.3 GiB less graph memory, i.e. more headroom, than it had. ALL SIMULATED.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autotune.sim import simulate_trial  # noqa: E402
from autotune.space import load_space  # noqa: E402
from experiments.scenarios.ground_truth import SPACES, Settings  # noqa: E402

HERE = Path(__file__).resolve().parent
V1_OFF = {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}
V1_ON = {"VLLM_USE_V2_MODEL_RUNNER": "0"}
# name -> (flags over the deployment's fixed flags, engine env)
RELEASES: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "0.8.5 defaults (gmu 0.9, budget 8192, 1024 seqs; V1, graphs outside)":
        ({"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 8192, "max_num_seqs": 1024}, V1_OFF),
    "0.8.5 with the field report's gmu 0.92 (budget 8192, 1024 seqs)":
        ({"gpu_memory_utilization": 0.92, "max_num_batched_tokens": 8192, "max_num_seqs": 1024}, V1_OFF),
    "0.9-0.20 defaults (gmu 0.9, budget 2048, 256 seqs; V1, graphs outside)":
        ({"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 2048, "max_num_seqs": 256}, V1_OFF),
    "0.21-0.27 defaults (gmu 0.92, 2048, 256; V1, graph estimate)":
        ({"gpu_memory_utilization": 0.92, "max_num_batched_tokens": 2048, "max_num_seqs": 256}, V1_ON),
    "0.28-0.32 defaults (gmu 0.92, 2048, 256; V2, graph estimate)":
        ({"gpu_memory_utilization": 0.92, "max_num_batched_tokens": 2048, "max_num_seqs": 256}, {}),
}
WORKLOADS = {"chat": "qwen72b.yaml", "mixed": "qwen72b-mixed.yaml"}


def _one(job: tuple[str, str, bool, int]) -> tuple[str, str, bool, dict[str, Any]]:
    release, wname, noise, seed = job
    sp = load_space(SPACES / WORKLOADS[wname])
    over, env = RELEASES[release]
    profile = sp.engine.profile if noise else sp.engine.profile.without_noise()
    res = simulate_trial(sp.engine.model, sp.engine.gpu, {**sp.fixed_flags(), **over}, sp.workload, seed=seed,
                         env=env, profile=profile)
    m = res.metrics()
    return release, wname, noise, {"ok": res.status.value == "ok", "oom": m["oom_per_1k"], "p99": m["p99_e2e_s"],
                                   "crashes": res.crashes, "reason": res.failure_reason.splitlines()[0][:120]
                                   if res.failure_reason else "",
                                   "headroom": res.extra.get("mem_gib", {}).get("headroom")}


def run(seeds: int, jobs: int) -> list[dict[str, Any]]:
    todo = [(r, w, n, Settings().seed(s)) for r in RELEASES for w in WORKLOADS for n in (False, True)
            for s in range(seeds)]
    got: dict[tuple[str, str, bool], list[dict[str, Any]]] = {}
    with mp.get_context("fork").Pool(jobs) as pool:
        for r, w, n, out in pool.imap_unordered(_one, todo, chunksize=2):
            got.setdefault((r, w, n), []).append(out)
    rows = []
    for (r, w, n), outs in sorted(got.items(), key=lambda kv: (list(RELEASES).index(kv[0][0]), kv[0][1], kv[0][2])):
        ok = [o for o in outs if o["ok"]]
        p99 = [o["p99"] for o in ok if o["p99"] == o["p99"]]
        rows.append({"release": r, "workload": w, "noise": n, "seeds": len(outs), "starts": bool(ok),
                     "oom_per_1k_mean": statistics.mean(o["oom"] for o in outs),
                     "runs_with_a_crash": sum(o["crashes"] > 0 for o in ok),
                     "crash_loops": sum(o["crashes"] > 3 for o in ok),
                     "p99_e2e_s_mean": statistics.mean(p99) if p99 else None,
                     "headroom_gib": outs[0]["headroom"], "why_not": "" if ok else outs[0]["reason"]})
    return rows


def markdown(rows: list[dict[str, Any]], seeds: int) -> str:
    out = [f"SIMULATED (autotune.sim). Qwen2.5-72B-Instruct bf16, TP 2, 2x A100-80GB, max_model_len 8192; "
           f"{seeds} trial seeds per cell (noise off = the ground truth's definition / noise on). "
           "OOM/1k = mean OOM-failed requests per 1000; crashed = runs with at least one engine death; "
           "loops = runs that died more than max_restarts (3) times.", "",
           "| vLLM release | workload | headroom GiB | OOM/1k (noise off) | crashed / loops | OOM/1k (noise on) | "
           "crashed / loops | p99 e2e s |", "|---|---|---|---|---|---|---|---|"]
    by = {(r["release"], r["workload"], r["noise"]): r for r in rows}
    for rel in RELEASES:
        for w in WORKLOADS:
            off, on = by[(rel, w, False)], by[(rel, w, True)]
            if not off["starts"]:
                out.append(f"| {rel} | {w} | — | cannot start: {off['why_not']} | | | | |")
                continue
            p99 = f"{off['p99_e2e_s_mean']:.1f}" if off["p99_e2e_s_mean"] is not None else "—"
            out.append(f"| {rel} | {w} | {off['headroom_gib']:.2f} | {off['oom_per_1k_mean']:.1f} | "
                       f"{off['runs_with_a_crash']}/{off['seeds']} / {off['crash_loops']} | {on['oom_per_1k_mean']:.1f} | "
                       f"{on['runs_with_a_crash']}/{on['seeds']} / {on['crash_loops']} | {p99} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    rows = run(args.seeds, args.jobs)
    (HERE / "releases.json").write_text(json.dumps(rows, indent=1) + "\n")
    md = markdown(rows, args.seeds)
    (HERE / "releases.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()

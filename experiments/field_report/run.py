"""Simulate the field report's configs (and a few others) on the qwen72b space's benchmark.

    .venv/bin/python experiments/field_report/run.py [--seeds 3] [--out experiments/field_report]

Writes results.csv, results.md and field_report.png. Every number it writes is SIMULATED
(autotune.sim), not measured on a GPU; the report's own figures are quoted beside them.
The report ran vLLM 0.8.5; its rows are simulated with the accounting closest to it that the
simulator has (CUDA graphs outside the memory budget, the V1 model runner), the other rows
with vLLM 0.32.0's (graph memory estimated into the budget, the V2 runner).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.sim import simulate_trial
from autotune.space import load_space

REPO = Path(__file__).resolve().parents[2]
SPACE = REPO / "search_spaces" / "qwen72b.yaml"

DEFAULTS_085 = {"gpu_memory_utilization": 0.9, "max_num_seqs": 256, "block_size": 16, "enforce_eager": False,
                "enable_prefix_caching": False}
TUNED = {"gpu_memory_utilization": 0.85, "max_num_seqs": 128, "block_size": 32, "enforce_eager": True,
         "enable_prefix_caching": False}
# vLLM before v0.21 (graphs outside the budget) with the V1 model runner: the closest to 0.8.5.
OLD = {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0", "VLLM_USE_V2_MODEL_RUNNER": "0"}


@dataclass(frozen=True)
class Config:
    name: str
    flags: dict[str, Any]
    model_suffix: str = ""
    reported: str = ""  # the field report's (avg, p99, OOM/1k), measured on GPUs by its author
    env: dict[str, str] | None = None  # vLLM variables; None: vLLM 0.32.0's behaviour


CONFIGS = [
    Config("report defaults (0.8.5)", DEFAULTS_085, reported="avg 4.2 s, p99 8.7 s, 156 OOM/1k", env=OLD),
    Config("report tuned", TUNED, reported="avg 3.8 s, p99 7.1 s, 12 OOM/1k", env=OLD),
    Config("report tuned + prefix caching", {**TUNED, "enable_prefix_caching": True},
           reported="avg 2.9 s, p99 5.3 s, 8 OOM/1k", env=OLD),
    Config("vLLM 0.32 defaults (gmu 0.92)", {}),
    Config("vLLM 0.32, gmu 0.9", {"gpu_memory_utilization": 0.9}),
    Config("tuned at gmu 0.93 + prefix caching", {**TUNED, "gpu_memory_utilization": 0.93, "enable_prefix_caching": True}),
    Config("gmu 0.95, graphs, prefix caching", {"gpu_memory_utilization": 0.95, "enable_prefix_caching": True}),
    Config("gmu 0.975, graphs, no prefix caching (0.8.5 accounting)",
           {"gpu_memory_utilization": 0.975, "enable_prefix_caching": False}, env=OLD),
    Config("gmu 0.975, eager, no prefix caching (0.8.5 accounting)",
           {"gpu_memory_utilization": 0.975, "enable_prefix_caching": False, "enforce_eager": True}, env=OLD),
    Config("gmu 0.975, graphs, no prefix caching", {"gpu_memory_utilization": 0.975, "enable_prefix_caching": False}),
    Config("AWQ-int4: report defaults", DEFAULTS_085, "-AWQ", env=OLD),
    Config("AWQ-int4: report tuned", TUNED, "-AWQ", env=OLD),
    Config("AWQ-int4: report tuned + prefix caching", {**TUNED, "enable_prefix_caching": True}, "-AWQ", env=OLD),
]


def _stat(vals: list[float]) -> tuple[float, float, float]:
    good = [v for v in vals if not math.isnan(v)]
    if not good:
        return math.nan, math.nan, math.nan
    return statistics.mean(good), min(good), max(good)


def run(seeds: int) -> list[dict[str, Any]]:
    space = load_space(SPACE)
    rows: list[dict[str, Any]] = []
    for cfg in CONFIGS:
        flags = {**space.fixed_flags(), **cfg.flags}
        model = space.engine.model + cfg.model_suffix
        results = [simulate_trial(model, space.engine.gpu, flags, space.workload, seed=s, env=cfg.env)
                   for s in range(seeds)]
        ms = [r.metrics() for r in results]
        first = results[0]
        row: dict[str, Any] = {
            "config": cfg.name,
            "model": model.split("/")[-1],
            "flags": " ".join(f"{k}={v}" for k, v in cfg.flags.items()),
            "status": str(first.status),
            "failure": first.failure_reason.split(". ")[0][:80],
            "kv_cache_tokens": first.kv_cache_tokens,
            "headroom_gib": first.extra.get("mem_gib", {}).get("headroom", math.nan) if first.status == "ok" else math.nan,
            "reported_on_gpu": cfg.reported,
        }
        for key in ("mean_e2e_s", "p99_e2e_s", "p99_ttft_s", "mean_tpot_s", "oom_per_1k", "crashes", "preemptions"):
            mean, lo, hi = _stat([m[key] for m in ms])
            row[key], row[key + "_min"], row[key + "_max"] = mean, lo, hi
        rows.append(row)
        print(f"{cfg.name:42s} {row['status']:15s} p99={row['p99_e2e_s']:.2f}s oom/1k={row['oom_per_1k']:.0f}")
    return rows


def _f(v: Any, nd: int = 2) -> str:
    if isinstance(v, float):
        return "—" if math.isnan(v) else f"{v:.{nd}f}"
    return str(v)


def write_table(rows: list[dict[str, Any]], out: Path, seeds: int) -> None:
    with (out / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = [
        f"SIMULATED with autotune.sim (mean over {seeds} trial seeds; p99 range in brackets). "
        "The last column is the field report's own GPU measurement, quoted.",
        "",
        "| config | model | status | KV tokens | headroom GiB | mean e2e s | p99 e2e s | p99 TTFT s | mean TPOT ms "
        "| OOM/1k | crashes | preemptions | reported (GPU) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        status = r["status"] if r["status"] == "ok" else f"startup_failed: {r['failure']}"
        p99 = _f(r["p99_e2e_s"]) + (f" [{_f(r['p99_e2e_s_min'])}–{_f(r['p99_e2e_s_max'])}]"
                                    if not math.isnan(r["p99_e2e_s"]) else "")
        tpot = _f(r["mean_tpot_s"] * 1000, 1) if not math.isnan(r["mean_tpot_s"]) else "—"
        lines.append(
            f"| {r['config']} | {r['model']} | {status} | {r['kv_cache_tokens']} | {_f(r['headroom_gib'])} "
            f"| {_f(r['mean_e2e_s'])} | {p99} | {_f(r['p99_ttft_s'])} | {tpot} | {_f(r['oom_per_1k'], 0)} "
            f"| {_f(r['crashes'], 1)} | {_f(r['preemptions'], 0)} | {r['reported_on_gpu'] or ''} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    reported = {"report defaults (0.8.5)": (8.7, 156), "report tuned": (7.1, 12), "report tuned + prefix caching": (5.3, 8)}
    for name, (p99, oom) in reported.items():
        ax.scatter(p99, oom, marker="*", s=160, color="black")
        ax.annotate(f"{name}\n(reported, GPU)", (p99, oom), fontsize=7, xytext=(4, 4), textcoords="offset points")
    failed, keys = [], []
    for i, r in enumerate(rows, 1):
        if r["status"] != "ok":
            failed.append(f"{i}. {r['config']} [{r['model']}]: {r['failure']}")
            continue
        keys.append(f"{i}. {r['config']}")
        color = "tab:orange" if r["model"].endswith("AWQ") else "tab:blue"
        ax.errorbar(r["p99_e2e_s"], r["oom_per_1k"],
                    xerr=[[r["p99_e2e_s"] - r["p99_e2e_s_min"]], [r["p99_e2e_s_max"] - r["p99_e2e_s"]]],
                    fmt="o", color=color, capsize=3)
        # Numbers, staggered, so points at the same height stay readable; names in the key.
        ax.annotate(str(i), (r["p99_e2e_s"], r["oom_per_1k"]), fontsize=8, xytext=(-3, 8 + 10 * (i % 3)),
                    textcoords="offset points", color=color)
    ax.set_xlabel("p99 end-to-end latency, s")
    ax.set_ylabel("OOM-failed requests per 1000")
    ax.set_yscale("symlog", linthresh=1)
    ax.set_title("Qwen2.5-72B on 2x A100-80GB, concurrency 16: SIMULATED (blue bf16, orange AWQ) vs reported (stars)",
                 fontsize=9)
    ax.text(0.99, 0.55, "simulated configs:\n" + "\n".join(keys), transform=ax.transAxes, fontsize=6,
            va="top", ha="right", family="monospace")
    if failed:
        ax.text(0.01, 0.99, "cannot start (simulated):\n" + "\n".join(failed), transform=ax.transAxes, fontsize=6,
                va="top", family="monospace")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "field_report.png", dpi=130)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent)
    args = ap.parse_args()
    rows = run(args.seeds)
    write_table(rows, args.out, args.seeds)
    plot(rows, args.out)
    print(f"wrote {args.out / 'results.md'}, results.csv, field_report.png")


if __name__ == "__main__":
    main()

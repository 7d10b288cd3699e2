"""Measure the vllm_cpu landscape: a space-filling design of configs, each with several server starts.

CPU measurements of a toy model (experiments/vllm_cpu/model.py) on vLLM's CPU build: never GPU figures.

    .venv/bin/python -m experiments.vllm_cpu.measure                 # the table, in the foreground
    .venv/bin/python -m experiments.vllm_cpu.measure --detach        # the same, detached (setsid); log in results/
    .venv/bin/python -m experiments.vllm_cpu.measure --pilot         # defaults + contrasting configs -> pilot.jsonl
    .venv/bin/python -m experiments.vllm_cpu.measure --summary       # per-config mean, CV of p99, done/total

Each run is one trial of autotune's own vllm backend (``autotune.backends.vllm.VllmBackend``, a
``TrialRequest`` in, a ``TrialResult`` out): a fresh server start, the space's fixed benchmark, the
aggregates ``TrialResult.metrics()`` computes (what autotune reports), one JSON line appended to
``results/runs.jsonl`` with the machine's description and load beside it. Resumable: a (config,
start) already in the file is skipped, so the same command continues where the last one stopped.
Runs go in rounds (start 0 of every config, then start 1, ...) in a shuffled order per round, so
slow drift of the shared machine's load is spread over the configs instead of landing on a few.

One trial at a time (a lock file). On a machine with two or more cores the load generator (this
process) is pinned to the first allowed core and the server's whole process group (API server,
EngineCore, worker) to the others, with ``os.sched_setaffinity`` on every thread.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import hashlib
import json
import math
import os
import platform
import random
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np

from autotune.backends.base import ServerSpec, TrialRequest
from autotune.backends.vllm import VllmBackend
from autotune.results import RequestStatus, TrialResult
from autotune.space import SearchSpace, load_space
from experiments.vllm_cpu.model import build_model, model_digest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SPACE = HERE / "space.yaml"
RESULTS = HERE / "results"
RUNS = RESULTS / "runs.jsonl"
PILOT = RESULTS / "pilot.jsonl"
DESIGN = RESULTS / "design.json"
LOCK = RESULTS / ".lock"
LOG = RESULTS / "measure.log"

N_CONFIGS = 48
STARTS = 3
DESIGN_SEED = 19

# The pilot's contrasting configs (beside vLLM's defaults): searched flags only; unset = vLLM's default.
PILOT_CONFIGS: dict[str, dict[str, Any]] = {
    "few-seqs": {"max_num_seqs": 6, "max_num_batched_tokens": 512, "block_size": 32},
    "no-prefix-cache": {"enable_prefix_caching": False, "max_num_batched_tokens": 4096, "block_size": 128,
                        "max_num_seqs": 128},
    "fp8-big-kv": {"kv_cache_dtype": "fp8", "kv_cache_memory_bytes": 49152000, "max_num_seqs": 16,
                   "max_num_batched_tokens": 1024, "block_size": 64},
    # vLLM's defaults with the largest KV budget: is what the defaults lose their preemptions?
    "defaults-kv6000": {"kv_cache_memory_bytes": 49152000},
}
# The KV budget "vLLM's defaults" run with: the deployment's, not a tuning flag (space.yaml explains).
DEFAULT_KV_BYTES = 32768000


# -- the machine -------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def vllm_version(python: str) -> str:
    try:
        r = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],  # noqa: S603
                           capture_output=True, text=True, timeout=60)
        return r.stdout.strip() or r.stderr.strip().splitlines()[-1][:200]
    except (OSError, subprocess.TimeoutExpired, IndexError) as e:
        return f"unknown ({type(e).__name__})"


def machine(python: str) -> dict[str, Any]:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu_model": cpu_model(), "nproc": os.cpu_count(), "allowed_cpus": sorted(os.sched_getaffinity(0)),
            "mem_gib": round(mem_gib, 1), "vllm_cpu": vllm_version(python), "python": platform.python_version(),
            "kernel": platform.release()}


# -- pinning -----------------------------------------------------------------------------------

def split_cpus() -> tuple[set[int], set[int]]:
    """(load generator's cores, engine's cores); both all allowed cores on a one-core machine."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return set(cpus), set(cpus)
    return {cpus[0]}, set(cpus[1:])


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d.name))
    return kids


def pin_tree(pid: int, cpus: set[int]) -> list[dict[str, Any]]:
    """Pin every thread of ``pid`` and its descendants to ``cpus``; what was pinned (pid, name, threads)."""
    kids = _children()
    seen: list[dict[str, Any]] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        todo.extend(kids.get(p, []))
        try:
            name = Path(f"/proc/{p}/comm").read_text().strip()
            tids = [int(t.name) for t in Path(f"/proc/{p}/task").iterdir()]
        except OSError:
            continue
        n = 0
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
                n += 1
            except OSError:
                pass
        seen.append({"pid": p, "name": name, "threads": n})
    return seen


def _cpu_s(pid: int) -> float:
    """utime + stime of one process (all its threads), seconds."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def psi_cpu_some_s() -> float | None:
    """/proc/pressure/cpu "some" total: seconds during which some task waited for a CPU (None: no PSI)."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return None


def machine_busy() -> tuple[float, float] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    try:
        v = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return float(sum(v) - idle), float(sum(v))


class Pinner:
    """The backend's event hook: the server's process group onto the engine's cores, at spawn and when
    ready; and the CPU seconds the server's processes spent between ready and the last answer (on a
    shared machine, engine CPU seconds over benchmark seconds says how much of its core it got)."""

    def __init__(self, engine_cpus: set[int], total: int):
        self.engine_cpus = engine_cpus
        self.total = total
        self.pinned: list[dict[str, Any]] = []
        self._pid: int | None = None
        self._t0 = 0.0
        self._cpu0: dict[int, float] = {}
        self.cpu: dict[str, Any] = {}

    def _tree_cpu(self) -> dict[int, float]:
        return {p["pid"]: _cpu_s(p["pid"]) for p in self.pinned}

    def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name == "server_started" and info.get("pid"):
            self._pid = int(info["pid"])
            pin_tree(self._pid, self.engine_cpus)
        elif name == "server_ready" and self._pid and info.get("start") == 0:
            self.pinned = pin_tree(self._pid, self.engine_cpus)
            self._t0, self._cpu0 = time.monotonic(), self._tree_cpu()
        elif name == "request_done" and info.get("done") == self.total and self._cpu0 and not self.cpu:
            wall = time.monotonic() - self._t0
            now = self._tree_cpu()
            names = {p["pid"]: p["name"] for p in self.pinned}
            by: dict[str, float] = {}
            for pid, c in now.items():
                by[names[pid]] = by.get(names[pid], 0.0) + c - self._cpu0.get(pid, 0.0)
            worker = sum(v for k, v in by.items() if "Worker" in k)
            self.cpu = {"benchmark_wall_s": round(wall, 3), "server_cpu_s": {k: round(v, 3) for k, v in by.items()},
                        "worker_cpu_share": round(worker / wall, 4) if wall > 0 else None}


# -- the design --------------------------------------------------------------------------------

def _value(spec: Any, u: float) -> Any:
    if spec.type == "bool":
        return u >= 0.5
    if spec.type == "categorical":
        return spec.choices[min(int(u * len(spec.choices)), len(spec.choices) - 1)]
    lo, hi = float(spec.low), float(spec.high)
    x = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))) if spec.log else lo + u * (hi - lo)
    return int(round(x)) if spec.type == "int" else x


def _ok(space: SearchSpace, flags: dict[str, Any]) -> bool:
    """Whether ``flags`` pass the space's reject constraints (a ``when`` that does not hold passes)."""
    fixed = space.fixed_flags()

    def get(name: str) -> Any:
        return flags.get(name, fixed.get(name))

    for c in space.constraints:
        if c.action != "reject" or any(get(k) != v for k, v in c.when.items()):
            continue
        left = get(c.left)
        right = get(c.right) if isinstance(c.right, str) else c.right
        if left is None or right is None:
            continue
        ok = {"<=": left <= right, "<": left < right, ">=": left >= right, ">": left > right,
              "==": left == right, "!=": left != right}[c.op]
        if not ok:
            return False
    return True


def config_id(flags: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(flags, sort_keys=True).encode()).hexdigest()[:12]


def make_design(space: SearchSpace, n: int, seed: int = DESIGN_SEED) -> list[dict[str, Any]]:
    """vLLM's defaults (at the deployment's KV budget), then ``n - 1`` scrambled-Sobol points that pass
    the space's constraints, each a dict of searched flags (unset = absent)."""
    from scipy.stats import qmc

    names = list(space.params)
    out: list[dict[str, Any]] = [{"kv_cache_memory_bytes": DEFAULT_KV_BYTES}]
    seen = {config_id(out[0])}
    sampler = qmc.Sobol(d=len(names), scramble=True, seed=seed)
    while len(out) < n:
        for row in sampler.random(64):
            flags = {k: _value(space.params[k], float(u)) for k, u in zip(names, row, strict=True)}
            cid = config_id(flags)
            if _ok(space, flags) and cid not in seen:
                seen.add(cid)
                out.append(flags)
                if len(out) == n:
                    break
    return out


def load_design(space: SearchSpace, n: int) -> list[dict[str, Any]]:
    """The design, written once to results/design.json and read back ever after (so a resumed table
    keeps its configs whatever scipy's Sobol does in a later release)."""
    if DESIGN.is_file():
        data = json.loads(DESIGN.read_text())
        configs = data["configs"]
        if len(configs) >= n:
            return configs[:n]
        extra = [c for c in make_design(space, n) if config_id(c) not in {config_id(x) for x in configs}]
        configs = configs + extra[: n - len(configs)]
    else:
        configs = make_design(space, n)
    DESIGN.write_text(json.dumps({"seed": DESIGN_SEED, "note": "config 0 is vLLM's defaults at the deployment's "
                                  "KV budget; the rest scrambled Sobol over space.yaml's params",
                                  "configs": configs}, indent=1) + "\n")
    return configs


# -- one run -----------------------------------------------------------------------------------

def landscape_key(space: SearchSpace, model_dir: Path) -> str:
    """What makes two runs comparable: the engine section (fixed flags, env), the workload and the
    model's config. Params, constraints and comments of space.yaml can change without it."""
    blob = json.dumps({"engine": space.engine.model_dump(mode="json"),
                       "workload": space.workload.model_dump(mode="json"),
                       "model": model_digest(model_dir)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def server_spec(space: SearchSpace) -> ServerSpec:
    e = space.engine
    model = Path(e.model) if Path(e.model).is_absolute() else REPO / e.model
    python = e.python if e.python is None or Path(e.python).is_absolute() else str(REPO / e.python)
    return ServerSpec(model=str(model), gpu=e.gpu, env=dict(e.env), host=e.host,
                      startup_timeout_s=e.startup_timeout_s, python=python)


def aggregates(res: TrialResult) -> dict[str, Any]:
    """The run's per-run aggregates: autotune's own (``TrialResult.metrics``) plus mean TTFT and the
    prefix cache's hit rate from vLLM's /metrics."""
    m = res.metrics()
    ok = [r for r in res.records if r.status == RequestStatus.OK]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    sm = res.server_metrics
    q = sm.get("prefix_cache_queries", 0.0)
    keep = ("p50_e2e_s", "p90_e2e_s", "p99_e2e_s", "mean_e2e_s", "p50_ttft_s", "p99_ttft_s", "mean_tpot_s",
            "p99_tpot_s", "oom_per_1k", "error_per_1k", "preemptions", "requests", "requests_ok",
            "output_tok_per_s", "kv_cache_tokens", "startup_s", "duration_s", "gpu_time_s", "crashes")
    out: dict[str, Any] = {k: _num(m[k]) for k in keep}
    out["mean_ttft_s"] = _num(float(np.mean(ttft))) if ttft else None
    out["prefix_cache_hit_rate"] = _num(sm["prefix_cache_hits"] / q) if q else None
    out["prefix_cache_queries"] = _num(q)
    out["kv_cache_usage_max"] = _num(sm.get("kv_cache_usage_max", math.nan))
    return out


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 6)


def run_one(space: SearchSpace, spec: ServerSpec, searched: dict[str, Any], cpus: tuple[set[int], set[int]],
            trial_number: int) -> dict[str, Any]:
    flags = {**space.fixed_flags(), **searched}
    pinner = Pinner(cpus[1], space.workload.num_requests)
    backend = VllmBackend(events=pinner)
    load0 = os.getloadavg()
    psi0, busy0 = psi_cpu_some_s(), machine_busy()
    t0 = time.monotonic()
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    try:
        res = backend.run_trial(TrialRequest(trial_number, spec, flags, space.workload))
    finally:
        backend.close()
    wall = time.monotonic() - t0
    psi1, busy1 = psi_cpu_some_s(), machine_busy()
    contention = {"psi_cpu_some_frac": round((psi1 - psi0) / wall, 4) if psi0 is not None and psi1 is not None else None,
                  "machine_busy_frac": round((busy1[0] - busy0[0]) / (busy1[1] - busy0[1]), 4)
                  if busy0 and busy1 and busy1[1] > busy0[1] else None}
    return {
        "started_utc": started, "wall_s": round(wall, 2),
        "loadavg_before": [round(x, 2) for x in load0], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "nproc": os.cpu_count(), "loadgen_cpus": sorted(cpus[0]), "engine_cpus": sorted(cpus[1]),
        "pinned": pinner.pinned, "cpu": pinner.cpu, "contention": contention,
        "status": str(res.status), "failure_class": str(res.failure_class), "failure_reason": res.failure_reason[:300],
        "failure_evidence": [e[:300] for e in res.failure_evidence[:3]],
        **aggregates(res),
        "restarts": res.extra.get("restarts"), "output_token_mismatches": res.extra.get("output_token_mismatches"),
        "cache_config_info": res.extra.get("cache_config_info"),
    }


# -- the table ---------------------------------------------------------------------------------

def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line cut short by a kill: skipped, its run is redone
            continue
    return rows


def append(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def plan(configs: list[tuple[str, dict[str, Any]]], done: set[tuple[str, int]], starts: int,
         seed: int = DESIGN_SEED) -> list[tuple[str, dict[str, Any], int]]:
    """What is left, in rounds: every config's start 0, then start 1, ...; each round shuffled."""
    todo = []
    for rep in range(starts):
        rnd = [(name, flags, rep) for name, flags in configs if (name, rep) not in done]
        random.Random(seed * 1000 + rep).shuffle(rnd)
        todo += rnd
    return todo


def measure(out: Path, configs: list[tuple[str, dict[str, Any]]], starts: int, max_runs: int | None,
            stop_at: float | None) -> None:
    space = load_space(SPACE)
    spec = server_spec(space)
    model_dir = build_model(Path(spec.model))
    key = landscape_key(space, model_dir)
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)  # it would override kv_cache_memory_bytes (space.yaml)
    mach = machine(spec.python or "python")
    cpus = split_cpus()
    os.sched_setaffinity(0, cpus[0])  # this process (the load generator); the server is moved off it
    rows = [r for r in read_rows(out) if r.get("landscape") == key]
    done = {(r["config"], r["start"]) for r in rows}
    todo = plan(configs, done, starts)
    print(f"{len(done)} runs done, {len(todo)} to do; landscape {key}; machine {mach}", flush=True)
    for i, (name, searched, rep) in enumerate(todo):
        if max_runs is not None and i >= max_runs:
            break
        if stop_at is not None and time.time() > stop_at:
            print("stop time reached", flush=True)
            break
        row = run_one(space, spec, searched, cpus, trial_number=len(done) + i)
        row = {"landscape": key, "config": name, "start": rep, "flags": searched, "machine": mach, **row}
        append(out, row)
        print(f"[{i + 1}/{len(todo)}] {name} start {rep}: {row['failure_class']} p99 {row['p99_e2e_s']} "
              f"preempt {row['preemptions']} wall {row['wall_s']} s load {row['loadavg_before'][0]}", flush=True)


def summary(path: Path, key: str | None = None, starts: Collection[int] | None = None) -> list[dict[str, Any]]:
    """Per config (rows of landscape ``key`` only, when given; of the server starts ``starts`` only, when
    given): runs, mean and CV of p99 over the runs that served, failure classes, seconds per run. Sorted by
    mean p99, failed configs last."""
    rows = [r for r in read_rows(path) if (key is None or r.get("landscape") == key)
            and (starts is None or r.get("start") in starts)]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    out = []
    for name, rs in by.items():
        served = [r for r in rs if r.get("p99_e2e_s") is not None and r["failure_class"] == "none"]
        p99 = [r["p99_e2e_s"] for r in served]
        mean = float(np.mean(p99)) if p99 else math.nan
        cv = float(np.std(p99, ddof=1) / mean) if len(p99) > 1 else math.nan
        out.append({"config": name, "runs": len(rs), "ok_runs": len(p99), "p99_mean_s": round(mean, 3),
                    "p99_cv": round(cv, 4), "p99_runs_s": [round(x, 3) for x in p99],
                    "p99_starts": [r["start"] for r in served],
                    "failure": sorted({r["failure_class"] for r in rs}),
                    "preemptions": [r.get("preemptions") for r in rs],
                    "prefix_hit": [r.get("prefix_cache_hit_rate") for r in rs],
                    "wall_s": [r["wall_s"] for r in rs], "load1": [r["loadavg_before"][0] for r in rs],
                    "flags": rs[0]["flags"]})
    return sorted(out, key=lambda r: (math.isnan(r["p99_mean_s"]), r["p99_mean_s"]))


def spread(table: list[dict[str, Any]], defaults: str) -> dict[str, Any]:
    """The pilot's figures: best config against vLLM's defaults, all configs' range, and the run-to-run
    noise (CV of p99 over each config's starts)."""
    ok = [r for r in table if not math.isnan(r["p99_mean_s"])]
    d = next((r for r in ok if r["config"] == defaults or (defaults == "c00" and r["config"].startswith("c00-"))),
             None)
    if not ok or d is None:
        return {}
    best, worst = ok[0], ok[-1]
    cvs = [r["p99_cv"] for r in ok if not math.isnan(r["p99_cv"])]
    return {"configs_served": len(ok), "configs_failed": len(table) - len(ok), "defaults_p99_s": d["p99_mean_s"],
            "defaults_cv": d["p99_cv"], "best": best["config"], "best_p99_s": best["p99_mean_s"],
            "best_vs_defaults": round(1 - best["p99_mean_s"] / d["p99_mean_s"], 4),
            "worst": worst["config"], "worst_over_best": round(worst["p99_mean_s"] / best["p99_mean_s"], 3),
            "cv_median": round(float(np.median(cvs)), 4) if cvs else None,
            "cv_max": round(max(cvs), 4) if cvs else None,
            "defaults_worse_welch_p": _defaults_worse_p(d, best)}


def speed_by_start(table: list[dict[str, Any]]) -> dict[int, float]:
    """Per server start (round): the median over configs of that start's p99 over the config's mean p99.
    A round that ran on a slower or busier machine stands above 1 in every config alike (the engine's work
    is the same in every start): the machine's speed, per round, beside the run-to-run noise."""
    ratios: dict[int, list[float]] = {}
    for r in table:
        if len(r["p99_runs_s"]) > 1:
            for start, v in zip(r["p99_starts"], r["p99_runs_s"], strict=True):
                ratios.setdefault(start, []).append(v / r["p99_mean_s"])
    return {s: round(float(np.median(v)), 3) for s, v in sorted(ratios.items())}


def _defaults_worse_p(defaults: dict[str, Any], best: dict[str, Any]) -> float | None:
    """replay.welch_greater_p of the defaults' p99 runs over the best's (None when they are one config)."""
    from experiments.vllm_cpu.replay import welch_greater_p

    p = None if defaults is best else welch_greater_p(defaults["p99_runs_s"], best["p99_runs_s"])
    return None if p is None else round(p, 4)


def current_key() -> str:
    space = load_space(SPACE)
    return landscape_key(space, build_model(Path(server_spec(space).model)))


def detach(argv: list[str]) -> None:
    """Start this command again in its own session (setsid), output to results/measure.log, and return."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with LOG.open("ab") as log:
        p = subprocess.Popen([sys.executable, "-m", "experiments.vllm_cpu.measure", *argv],  # noqa: S603
                             cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, close_fds=True)
    print(f"measuring in the background: pid {p.pid}, log {LOG}, rows {RUNS}")


def next_utc(hhmm: str, now: dt.datetime) -> float:
    """The next time ``hhmm`` (UTC) comes after ``now``: 00:55 said at 22:58 is tomorrow's, not
    today's, which had passed (a stop time past midnight stopped the table before its first run)."""
    h, m = map(int, hhmm.split(":"))
    at = now.replace(hour=h, minute=m, second=0, microsecond=0)
    return (at if at > now else at + dt.timedelta(days=1)).timestamp()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int, default=N_CONFIGS, help="design size (config 0: vLLM's defaults)")
    ap.add_argument("--starts", type=int, default=STARTS, help="independent server starts per config")
    ap.add_argument("--pilot", action="store_true", help="defaults + PILOT_CONFIGS into results/pilot.jsonl")
    ap.add_argument("--only", default=None, help="comma-separated config names to run (others skipped)")
    ap.add_argument("--max-runs", type=int, default=None)
    ap.add_argument("--stop-at", default=None, help="UTC time HH:MM after which no new run starts")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--scenario", default=None, choices=("vllm-cpu", "vllm-cpu-quiet"),
                    help="with --summary: only that replay scenario's starts (default: every start)")
    ap.add_argument("--detach", action="store_true")
    args = ap.parse_args(argv)
    raw = list(sys.argv[1:] if argv is None else argv)
    if args.detach:
        detach([a for a in raw if a != "--detach"])
        return
    out = PILOT if args.pilot else RUNS
    if args.summary:
        from experiments.vllm_cpu.replay import SCENARIO_STARTS

        table = summary(out, current_key(), SCENARIO_STARTS.get(args.scenario or ""))
        for r in table:
            print(json.dumps(r))
        runs = sum(r["runs"] for r in table)
        print(json.dumps({"runs_done": runs, "configs_started": len(table),
                          "spread": spread(table, "defaults" if args.pilot else "c00"),
                          "speed_by_start": speed_by_start(table)}))
        return
    stop_at = next_utc(args.stop_at, dt.datetime.now(dt.UTC)) if args.stop_at else None
    RESULTS.mkdir(parents=True, exist_ok=True)
    space = load_space(SPACE)
    if args.pilot:
        configs = [("defaults", {"kv_cache_memory_bytes": DEFAULT_KV_BYTES})]
        configs += [(k, {"kv_cache_memory_bytes": DEFAULT_KV_BYTES, **v}) for k, v in PILOT_CONFIGS.items()]
    else:
        configs = [(f"c{i:02d}-{config_id(f)}", f) for i, f in enumerate(load_design(space, args.configs))]
    if args.only:
        wanted = set(args.only.split(","))
        configs = [c for c in configs if c[0] in wanted]
    # SIGTERM (kill PID) ends the run in progress through the backend's cleanup: its server is stopped
    # and the run is not recorded, so a resumed table redoes it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with LOCK.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.exit(f"another measure holds {LOCK}: one trial at a time")
        measure(out, configs, args.starts, args.max_runs, stop_at)


if __name__ == "__main__":
    main()

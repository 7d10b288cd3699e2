"""`autotune simulate`: one simulated trial of a space's fixed engine and workload."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli.app import app
from autotune.deploy import SimProfile, VllmEnv
from autotune.engine import FLAG_SPECS, unmodelled_flags
from autotune.errors import UserError
from autotune.formatting import number
from autotune.results import TrialResult
from autotune.space import SearchSpace, load_space, unmodelled_flag_error

JSON_KEYS = (
    "p50_e2e_s", "p90_e2e_s", "p99_e2e_s", "mean_e2e_s", "p50_ttft_s", "p99_ttft_s", "mean_tpot_s",
    "p99_tpot_s", "oom_per_1k", "crashes", "preemptions", "output_tok_per_s", "requests", "requests_ok",
    "requests_oom", "kv_cache_tokens", "startup_s", "duration_s", "gpu_time_s", "goodput_rps_per_gpu",
    "slo_attainment",
)


def parse_set(items: list[str]) -> dict[str, Any]:
    """``flag=value`` pairs typed by the flag's vLLM type; ``flag=none`` means vLLM's default."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name:
            raise UserError(f"--set {item!r}: expected flag=value, e.g. --set gpu_memory_utilization=0.85")
        spec = FLAG_SPECS.get(name)
        if spec is None:
            raise UserError(f"--set {item!r}: unknown vLLM flag {name!r}; use vLLM's EngineArgs name (e.g. max_num_seqs)")
        try:
            out[name] = spec.parse(raw)
        except ValueError as e:
            raise UserError(f"--set {item!r}: {e}") from None
    return out


def refuse_unmodelled(sp: SearchSpace, fixed: dict[str, Any], overrides: dict[str, Any]) -> None:
    """One line naming a flag the simulator would ignore, unless the space accepts that."""
    if sp.engine.allow_unmodelled_flags:
        return
    unset_fixed = {k: v for k, v in fixed.items() if k not in overrides}
    found = [(f"--set {n}", n) for n in unmodelled_flags(overrides)]
    found += [(f"engine.flags.{n}", n) for n in unmodelled_flags(unset_fixed)]
    if found:
        raise unmodelled_flag_error(*found[0])


def _clean(v: float) -> float | None:
    return None if isinstance(v, float) and math.isnan(v) else v


def summary(result: TrialResult) -> dict[str, Any]:
    m = result.metrics()
    out: dict[str, Any] = {
        "simulated": True,
        "status": str(result.status),
        "failure_class": str(result.failure_class),
        "failure_reason": result.failure_reason,
    }
    out.update({k: _clean(m[k]) for k in JSON_KEYS})
    for k in ("crashes", "preemptions", "requests", "requests_ok", "requests_oom", "kv_cache_tokens"):
        out[k] = int(m[k])
    out["peak_mem_gib"] = result.peak_mem_gib
    out["early_stopped"] = result.early_stopped
    out["mem_gib"] = result.extra.get("mem_gib", {})
    for k in ("model_runner", "cudagraph_estimate", "oom_causes", "max_unprofiled_gib"):
        if k in result.extra:
            out[k] = result.extra[k]
    for k in ("prefix_cache_hit_rate", "prefix_cache_hits", "prefix_cache_queries"):
        out[k] = _clean(result.server_metrics.get(k, math.nan))
    out["warnings"] = list(result.warnings)
    return out


@app.command()
def simulate(
    space: Annotated[Path, typer.Option("--space", help="search-space YAML (engine and workload are used)")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="flag=value (vLLM name); repeatable")] = None,
    seed: Annotated[int, typer.Option(help="trial seed: simulator noise")] = 0,
    profile: Annotated[Path | None, typer.Option(
        "--profile", help="SimProfile file (YAML/JSON) of the simulator's constants; default: engine.sim_profile, "
        "else nominal")] = None,
    noise: Annotated[bool, typer.Option("--noise/--no-noise", help="run-to-run noise (off: a ground truth)")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Run one SIMULATED trial: the space's fixed flags, --set overrides, vLLM defaults for the rest."""
    from autotune.sim import simulate_trial

    sp = load_space(space)
    overrides = parse_set(set_ or [])
    refuse_unmodelled(sp, sp.fixed_flags(), overrides)
    flags = {**sp.fixed_flags(), **overrides}
    prof = SimProfile.load(profile) if profile is not None else sp.engine.profile
    if not noise:
        prof = prof.without_noise()
    result = simulate_trial(sp.engine.model, sp.engine.gpu, flags, sp.workload, seed=seed, env=sp.engine.env,
                            profile=prof)
    out = summary(result)
    if as_json:
        typer.echo(json.dumps(out, sort_keys=True))
        return
    venv = VllmEnv.from_env(sp.engine.env)
    typer.echo(f"SIMULATED trial (not a GPU measurement): {sp.engine.model} on {sp.engine.gpu}, vLLM 0.32 model "
               f"runner {venv.model_runner}, CUDA-graph memory estimate {'on' if venv.estimate_cudagraphs else 'off'}")
    typer.echo(f"  flags: {json.dumps({k: v for k, v in flags.items() if v is not None}, sort_keys=True)}")
    typer.echo(f"  status: {out['status']}" + (f" ({out['failure_reason']})" if out["failure_reason"] else ""))
    for k in ("kv_cache_tokens", "p50_e2e_s", "p99_e2e_s", "p99_ttft_s", "mean_tpot_s", "oom_per_1k", "crashes",
              "preemptions", "output_tok_per_s", "requests", "peak_mem_gib", "prefix_cache_hit_rate",
              "goodput_rps_per_gpu", "slo_attainment"):
        typer.echo(f"  {k}: {number(out[k], 4)}")
    mem = out["mem_gib"]
    if mem:
        typer.echo("  memory per GPU (GiB): " + ", ".join(f"{k} {v:.2f}" for k, v in mem.items()))
    for w in out["warnings"]:
        typer.echo(f"  warning: {w}")

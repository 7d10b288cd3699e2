"""`autotune export`: the chosen config as a YAML for `vllm serve --config`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.app import app
from autotune.cli.common import find_run_dir, open_study, saved_space
from autotune.errors import UserError
from autotune.export.vllm_config import header, serve_command, write_config
from autotune.space.loader import parse_space
from autotune.study.pareto import choose_for_export


@app.command()
def export(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="YAML to write (default <run dir>/vllm_config.yaml)")] = None,
    max_oom_per_1k: Annotated[float, typer.Option(help="OOM limit the chosen config must meet")] = 1.0,
    study: Annotated[str | None, typer.Option(help="study name, if the storage holds several")] = None,
    storage: Annotated[str | None, typer.Option(help="storage URL, if not the run directory's")] = None,
) -> None:
    """Pick one Pareto config (lowest p99 within the OOM limit) and write it for vLLM."""
    if max_oom_per_1k < 0:
        raise UserError(f"--max-oom-per-1k {max_oom_per_1k}: must be >= 0")
    run_dir = find_run_dir(out)
    space = parse_space(saved_space(run_dir), run_dir.space_copy)
    st = open_study(run_dir, study, storage)
    choice = choose_for_export(st, space, max_oom_per_1k)
    if choice is None:
        raise UserError(f"study {st.study_name}: no feasible completed trial to export yet; run more trials")
    t = choice.trial
    flags = t.flags or {**space.fixed_flags(), **t.params}
    names = space.objective_names
    shown = {m: t.metric(m, names) for m in ("oom_per_1k", "p99_e2e_s", "p50_e2e_s", "p99_ttft_s", "output_tok_per_s")}
    path = output or run_dir.root / "vllm_config.yaml"
    head = header(st.study_name, t.number, space.engine.backend, shown, choice.rule)
    write_config(path, space.engine.model, flags, head)
    typer.echo(f"trial {t.number}: {choice.rule}")
    typer.echo(f"wrote {path}")
    typer.echo(serve_command(space.engine.model, flags))

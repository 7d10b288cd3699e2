"""`autotune export`: the chosen config as a YAML for `vllm serve --config`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.app import app
from autotune.cli.common import find_run_dir, open_study, saved_space
from autotune.errors import UserError
from autotune.export.header import evidence_lines, latency_summary, oom_line
from autotune.export.vllm_config import header, serve_command, write_config
from autotune.space.loader import parse_space
from autotune.study.evidence import SHOWN_METRICS
from autotune.study.export_rule import DEFAULT_MAX_OOM_PER_1K, SHOWN, choose, study_evidence


@app.command()
def export(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="YAML to write (default <run dir>/vllm_config.yaml)")] = None,
    max_oom_per_1k: Annotated[float, typer.Option(help="OOM limit the chosen config must meet")] = DEFAULT_MAX_OOM_PER_1K,
    study: Annotated[str | None, typer.Option(help="study name, if the storage holds several")] = None,
    storage: Annotated[str | None, typer.Option(help="storage URL, if not the run directory's")] = None,
) -> None:
    """Pick the config the measurements support best (docs/export.md) and write it for vLLM.

    The config is written even when its OOM rate is not shown within the limit with 95 %
    confidence; the header and the output then say so, and how many more requests would.
    """
    if max_oom_per_1k < 0:
        raise UserError(f"--max-oom-per-1k {max_oom_per_1k}: must be >= 0")
    run_dir = find_run_dir(out)
    space = parse_space(saved_space(run_dir), run_dir.space_copy)
    st = open_study(run_dir, study, storage)
    evidence = study_evidence(st, space)
    margin = space.export.min_headroom_gib
    choice = choose(evidence.configs, max_oom_per_1k, margin)
    if choice is None:
        raise UserError(f"study {st.study_name}: no feasible completed trial to export yet; run more trials")
    c = choice.config
    shown = {"oom_per_1k": c.oom.rate_per_1k, **{m: c.interval(m).mean for m in SHOWN_METRICS if m in c.intervals}}
    path = output or run_dir.root / "vllm_config.yaml"
    head = header(st.study_name, choice.trial.number, space.engine.backend, shown, choice.rule,
                  evidence_lines(choice, evidence, max_oom_per_1k, margin))
    write_config(path, space.engine.model, c.flags, head)
    typer.echo(f"trial {choice.trial.number}: {choice.rule}")
    typer.echo(f"  {latency_summary(c)}")
    typer.echo(f"  {oom_line(c, max_oom_per_1k, choice.tier == SHOWN)}")
    for note in choice.notes:
        typer.echo(f"  note: {note}")
    typer.echo(f"wrote {path}")
    typer.echo(serve_command(space.engine.model, c.flags))

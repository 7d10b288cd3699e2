"""`autotune run`: the study, from a search-space file, on the simulator or real vLLM."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from autotune.backend_kinds import BACKEND_KINDS, BACKEND_NAMES, backend_choices
from autotune.cli.app import app
from autotune.errors import UserError
from autotune.rundir import RunDir, study_name_problem
from autotune.space import SearchSpace, load_space
from autotune.study.search import SAMPLERS


@app.command()
def run(
    space: Annotated[Path, typer.Option("--space", help="search-space YAML")],
    backend: Annotated[str | None, typer.Option(
        help=f"{', '.join(BACKEND_NAMES)}; overrides engine.backend")] = None,
    trials: Annotated[int | None, typer.Option(help="launched trials to reach (study.trials)")] = None,
    workers: Annotated[int | None, typer.Option(help="Ray workers (default: what the cluster holds)")] = None,
    study: Annotated[str | None, typer.Option(help="study name (default: study.name or the file's stem)")] = None,
    out: Annotated[Path | None, typer.Option(help="run directory (default runs/<study>)")] = None,
    seed: Annotated[int | None, typer.Option(help="sampler seed (study.seed)")] = None,
    address: Annotated[str | None, typer.Option(
        help="Ray cluster address; default: $RAY_ADDRESS (set for a Ray job), else start a local Ray")] = None,
    sampler: Annotated[str | None, typer.Option(help=f"{', '.join(SAMPLERS)} (default: autotune)")] = None,
    progress: Annotated[str | None, typer.Option(
        help="rich (running trials updated in place), plain (lines, for logs) or none; "
             "default: rich on a terminal, plain otherwise")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="the same as --progress none")] = False,
) -> None:
    """Run (or resume) a multi-objective study: minimise OOMs per 1000 requests and p99 latency."""
    from autotune.service import RunOptions, run_study, study_name_for
    from autotune.study.search import budget_note

    if trials is not None and trials <= 0:
        raise UserError(f"--trials {trials}: must be at least 1")
    if quiet and progress not in (None, "none"):
        raise UserError(f"--progress {progress} and --quiet: pass one of them (--quiet is --progress none)")
    if workers is not None and workers <= 0:
        raise UserError(f"--workers {workers}: must be at least 1")
    sp = load_space(space)
    if backend is not None:
        if backend not in BACKEND_KINDS:
            raise UserError(f"--backend {backend!r}: use {backend_choices()}")
        sp = sp.model_copy(update={"engine": sp.engine.model_copy(update={"backend": backend})})
    if sampler is not None:
        sp = sp.model_copy(update={"study": sp.study.model_copy(update={"sampler": sampler})})
    _check_study_name(study_name_for(sp, space, study), study, sp, space)
    from autotune.study.loop import validate_for_backend

    validate_for_backend(sp)
    opts = RunOptions(out=out, study_name=study, trials=trials, workers=workers, seed=seed, address=address,
                      progress="none" if quiet else progress or "auto")
    # Said at the start by the progress header (service.py) and here with the summary; never on
    # stderr before the run, where a refusal must stand alone on its one line.
    note = budget_note(sp, trials or sp.study.trials)
    summary = run_study(sp, space, opts)
    typer.echo(
        f"study {summary.study}: {summary.n_complete} complete, {summary.n_failed} failed, "
        f"{summary.n_rejected} rejected without launch; Pareto trials {summary.pareto}; "
        f"{summary.wall_s:.1f}s on {summary.workers} worker(s)"
    )
    if note:
        typer.echo(f"note: {note}")
    typer.echo(f"next: {next_command('status', summary.run_dir, summary.study)}   |   "
               f"{next_command('export', summary.run_dir, summary.study)}")


def _check_study_name(name: str, given: str | None, sp: SearchSpace, space: Path) -> None:
    """The study name names the default run directory runs/<name>: refuse one that is a path."""
    problem = study_name_problem(name)
    if problem:
        where = "--study" if given else "study.name" if sp.study.name else f"--space {space} (the file's stem)"
        raise UserError(f"{where}: {problem}")


def next_command(command: str, run_dir: Path, study: str) -> str:
    """``autotune COMMAND`` for the study just run, complete enough to work as printed: it names
    the study unless the run directory's saved space does (status/export look there)."""
    from autotune.cli.common import saved_space

    args = ["autotune", command, "--out", str(run_dir)]
    if (saved_space(RunDir(run_dir)).get("study") or {}).get("name") != study:
        args += ["--study", study]
    return shlex.join(args)

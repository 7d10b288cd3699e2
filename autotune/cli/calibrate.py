"""`autotune calibrate`: fit the simulator's constants to a study's measured trials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.app import app
from autotune.cli.common import find_run_dir, open_study, saved_space
from autotune.deploy import SimProfile
from autotune.errors import UserError
from autotune.space.loader import parse_space
from autotune.study.trials import records

PROFILE_FILE = "sim_profile.yaml"
REPORT_FILE = "calibration.json"


@app.command()
def calibrate(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    study: Annotated[str | None, typer.Option(help="study name, if the storage holds several")] = None,
    storage: Annotated[str | None, typer.Option(help="storage URL, if not the run directory's")] = None,
    holdout_every: Annotated[int, typer.Option(help="hold out every n-th config (with all its runs) from the fit")] = 3,
    requests: Annotated[int, typer.Option(help="requests per simulated benchmark while fitting latencies")] = 300,
    base: Annotated[Path | None, typer.Option(
        help="SimProfile to start from (default: study.strategy.model_profile's file, else nominal)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Fit the SIMULATOR's uncertain constants to the trials the study measured (any backend).

    Writes <run dir>/sim_profile.yaml (for `autotune simulate --profile` and engine.sim_profile)
    and <run dir>/calibration.json, and prints the prediction error on held-out trials
    before and after.
    """
    from autotune.calibrate import calibrate as fit

    run_dir = find_run_dir(out)
    saved = saved_space(run_dir)
    if not saved:
        raise UserError(f"--out {run_dir.root}: no space.yaml; calibrate needs the run directory of an 'autotune run'")
    space = parse_space(saved, run_dir.space_copy)
    st = open_study(run_dir, study, storage)
    start = SimProfile.load(base) if base is not None else space.study.strategy.base_profile
    try:
        cal = fit(records(st.get_trials(deepcopy=False)), space, base=start, holdout_every=holdout_every,
                  requests=requests)
    except UserError as e:
        raise UserError(f"study {st.study_name} in {run_dir.root}: {e}") from None
    profile_path = run_dir.root / PROFILE_FILE
    cal.profile.save(profile_path)
    report = {"study": st.study_name, "profile_path": str(profile_path), **cal.to_dict()}
    (run_dir.root / REPORT_FILE).write_text(json.dumps(report, indent=1) + "\n")
    if as_json:
        typer.echo(json.dumps(report, sort_keys=True))
        return
    typer.echo(f"calibrated the SIMULATOR's profile to study {st.study_name}: {len(cal.fitted_trials)} trials fitted, "
               f"{len(cal.held_out_trials)} held out ({report['held_out_rule']})")
    for s in cal.stages:
        pinned = ", ".join(s.determined) or "none"
        typer.echo(f"  {s.name}: {s.observations} trials, {s.seconds:.1f} s; determined: {pinned}")
        if s.note:
            typer.echo(f"    {s.note}")
    typer.echo("held-out prediction error (median |predicted / measured - 1|), before (starting profile) -> after:")
    for err in cal.errors:
        typer.echo(f"  {err.metric:<16} {err.trials:>3} trials  {100 * err.before:6.2f} % -> {100 * err.after:6.2f} %")
    if not cal.errors:
        typer.echo("  none: no held-out trial measured a comparable metric")
    typer.echo(f"wrote {profile_path} (autotune simulate --profile {profile_path}, or engine.sim_profile)")

"""`autotune export`: the chosen config for deployment: a `vllm serve --config` YAML (default)
or Kubernetes manifests (a Deployment and a Service running `vllm serve` with the same flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli.app import app
from autotune.cli.common import find_run_dir, open_study, saved_space
from autotune.errors import UserError
from autotune.export.header import evidence_lines, oom_line, predicted_oom_line, ranked_summary
from autotune.export.k8s import VLLM_IMAGE, k8s_manifests
from autotune.export.vllm_config import header, serve_command, write_config
from autotune.files import write_atomic
from autotune.space.loader import parse_space
from autotune.study.analysis import SHOWN_METRICS, summarize
from autotune.study.analysis.export_rule import (
    DEFAULT_MAX_OOM_PER_1K,
    Ranking,
    choose_in_records,
)
from autotune.study.search import budget_note
from autotune.study.trials import records

FORMATS = ("vllm", "k8s")
DEFAULT_FILE = {"vllm": "vllm_config.yaml", "k8s": "k8s.yaml"}


@app.command()
def export(
    out: Annotated[Path | None, typer.Option(help="run directory (default: the only one under ./runs)")] = None,
    output: Annotated[Path | None, typer.Option("-o", "--output",
                                                help="file to write (default <run dir>/vllm_config.yaml or k8s.yaml)")] = None,
    format_: Annotated[str, typer.Option("--format", help="vllm (a `vllm serve --config` YAML) or k8s "
                                                          "(Deployment + Service running vllm serve)")] = "vllm",
    name: Annotated[str, typer.Option(help="k8s: name of the Deployment and Service")] = "vllm-autotuned",
    image: Annotated[str, typer.Option(help="k8s: the vLLM container image")] = VLLM_IMAGE,
    secret_name: Annotated[str, typer.Option(help="k8s: the Secret that holds engine.env's secrets")] = "autotune-secrets",
    cache_claim: Annotated[str, typer.Option(help="k8s: the PersistentVolumeClaim for the model cache")] = "vllm-model-cache",
    model_cache: Annotated[str, typer.Option(help="k8s: pvc (created), pvc:NAME, emptydir or hostpath:PATH")] = "pvc",
    gpu_product: Annotated[str | None, typer.Option(
        help="k8s: the nvidia.com/gpu.product to pin pods to (default: from engine.gpu; '' for none)")] = None,
    max_oom_per_1k: Annotated[float, typer.Option(help="OOM limit the chosen config must meet")] = DEFAULT_MAX_OOM_PER_1K,
    study: Annotated[str | None, typer.Option(help="study name, if the storage holds several")] = None,
    storage: Annotated[str | None, typer.Option(help="storage URL, if not the run directory's")] = None,
) -> None:
    """Pick the config the measurements support best (docs/export.md) and write it for vLLM.

    The config is written even when its OOM rate is not shown within the limit with 95 %
    confidence; the header and the output then say so, and how many more requests would.
    """
    if format_ not in FORMATS:
        raise UserError(f"--format {format_!r}: use one of {', '.join(FORMATS)}")
    if max_oom_per_1k < 0:
        raise UserError(f"--max-oom-per-1k {max_oom_per_1k}: must be >= 0")
    run_dir = find_run_dir(out)
    space = parse_space(saved_space(run_dir), run_dir.space_copy)
    st = open_study(run_dir, study, storage)
    recs = records(st.get_trials(deepcopy=False))
    evidence = summarize(recs, space)
    margin = space.export.min_headroom_gib
    rank = Ranking.for_space(space)
    choice = choose_in_records(recs, space, max_oom_per_1k, evidence)
    if choice is None:
        raise UserError(f"study {st.study_name}: no feasible completed trial to export yet; run more trials")
    c = choice.config
    shown = {"oom_per_1k": c.oom.rate_per_1k,
             **{m: c.interval(m).mean for m in dict.fromkeys([rank.metric, *SHOWN_METRICS]) if m in c.intervals}}
    path = output or run_dir.root / DEFAULT_FILE[format_]
    budget = budget_note(space, sum(r.launched for r in recs))
    head = header(st.study_name, choice.trial.number, space.engine.backend, shown, choice.rule,
                  [*evidence_lines(choice, evidence, max_oom_per_1k, margin), *([budget] if budget else [])])
    try:
        if format_ == "k8s":
            write_atomic(path, k8s_manifests(space.engine.model, c.flags, space.engine.env, head, name=name,
                                             image=image, secret_name=secret_name, cache_claim=cache_claim,
                                             startup_timeout_s=space.engine.startup_timeout_s,
                                             model_cache=model_cache, gpu=space.engine.gpu, gpu_product=gpu_product))
        else:
            write_config(path, space.engine.model, c.flags, head)
    except OSError as e:
        option = "-o " if output is not None else ""
        raise UserError(f"{option}{path}: cannot write the config ({e.strerror}); give a writable file path") from None
    typer.echo(f"trial {choice.trial.number}: {choice.rule}")
    typer.echo(f"  {ranked_summary(c, rank.metric)}")
    typer.echo(f"  {oom_line(c, max_oom_per_1k)}")
    if (predicted := predicted_oom_line(c, max_oom_per_1k)) is not None:
        typer.echo(f"  {predicted}")
    for note in choice.notes:
        typer.echo(f"  note: {note}")
    if budget:
        typer.echo(f"  note: {budget}")
    typer.echo(f"wrote {path}")
    typer.echo(f"kubectl apply -f {path}" if format_ == "k8s" else serve_command(space.engine.model, c.flags))

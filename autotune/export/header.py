"""The evidence lines of an exported config's header: what was measured, how often, how sure.

Written for a reader who is not a statistician (docs/export.md explains each line): how
many runs and requests stand behind the figures, each figure with its 95 % interval, what
the OOM count shows about the limit (and, when it shows nothing, how many more requests
would), the memory headroom per GPU against the required margin, and anything the data
does not support.
"""

from __future__ import annotations

import math

from autotune.metrics import display
from autotune.study.analysis import ConfigEvidence, StudyEvidence
from autotune.study.analysis.export_rule import DEFAULT_MAX_OOM_PER_1K, LATENCY, Choice


def evidence_lines(choice: Choice, study: StudyEvidence, max_oom_per_1k: float, min_headroom_gib: float) -> list[str]:
    """Comment lines (without '# ') for the header of the config ``choice`` picked."""
    c = choice.config
    runs = "run" if c.n == 1 else "runs"
    lines = [recommended_line(choice, max_oom_per_1k)]
    lines += [f"evidence: {c.n} {runs} of this config (trials {', '.join(map(str, c.numbers))}), each a fresh "
             f"server start on the same benchmark; {_requests(c)}"]
    for metric, i in c.intervals.items():
        if not i.known:
            lines.append(f"{metric}: {_fmt(i.mean, metric)} (one run: no interval)")
            continue
        what = f"{c.center_word} of the runs" if c.n > 1 else "one run"
        lines.append(f"{metric}: {_fmt(i.mean, metric)} ({what}; 95 % interval {_fmt(i.low, metric)} to "
                     f"{_fmt(i.high, metric)}{_spread(study, metric)})")
    lines.append(oom_line(c, max_oom_per_1k))
    if (predicted := predicted_oom_line(c, max_oom_per_1k)) is not None:
        lines.append(predicted)
    if (deaths := engine_death_line(c)) is not None:
        lines.append(deaths)
    h = c.headroom
    gib = f"{h.gib:.2f} GiB" if h.known else "unknown"
    lines.append(f"memory headroom per GPU: {gib} ({h.detail}); required margin {min_headroom_gib:g} GiB")
    lines += [f"NOTE: {n}" for n in choice.notes]
    return lines


def recommended_line(choice: Choice, max_oom_per_1k: float) -> str:
    """Whether this is the study's recommended config, the one `autotune status` marks R and
    MLflow tags ``autotune.recommended_trial`` (the same rule at the default OOM limit)."""
    n = choice.trial.number
    if max_oom_per_1k == DEFAULT_MAX_OOM_PER_1K:
        return (f"recommended trial: {n} (the config `autotune status` marks R and MLflow tags "
                "autotune.recommended_trial)")
    return (f"chosen trial: {n}, with --max-oom-per-1k {max_oom_per_1k:g}; the study's recommendation "
            f"(`autotune status`, MLflow) uses the default limit of {DEFAULT_MAX_OOM_PER_1K:g}")


def oom_line(c: ConfigEvidence, limit: float) -> str:
    """What the OOM count shows about ``limit``; how many more requests when it shows nothing. The
    config's own runs only: a prediction (export.oom_model) has a line of its own."""
    o = c.oom
    shown = o.shown_within(limit)
    if not o.requests:
        return (f"oom_per_1k: {o.rate_per_1k:g} measured; the runs did not record their request counts, so nothing "
                f"is shown about the limit of {limit:g}")
    head = f"oom_per_1k: {o.events} OOMs in {o.requests} requests ({o.rate_per_1k:.3g} per 1000); with 95 % " \
           f"confidence at most {o.upper_per_1k:.3g} per 1000"
    if shown:
        return f"{head}, within the limit of {limit:g}"
    need = o.requests_to_show(limit)
    if need is None or o.rate_per_1k > limit:
        return f"{head}: NOT shown within the limit of {limit:g}"
    return (f"{head}: NOT shown within the limit of {limit:g}; showing it needs {need - o.requests} more requests "
            f"with no OOM ({need} in all; e.g. more confirmation runs, study.confirm.repeats)")


def engine_death_line(c: ConfigEvidence) -> str | None:
    """Engine deaths per run: the OOM bound above counts requests as independent, but one
    death fails every request in flight at once, so a few clean runs show less than their
    request count suggests. None when the runs did not record their crashes."""
    o = c.oom
    if math.isnan(o.death_chance_upper):
        return None
    runs = "run" if o.runs == 1 else "runs"
    return (f"engine deaths: in {o.runs_with_death} of {o.runs} {runs}; with 95 % confidence one run's chance of an "
            f"engine death is at most {100 * o.death_chance_upper:.0f} % (a death fails every request in flight at "
            "once, so the OOM bound above, which counts requests as independent, is optimistic when OOMs come "
            "from deaths; more runs narrow this, e.g. study.confirm.repeats)")


def predicted_oom_line(c: ConfigEvidence, limit: float) -> str | None:
    """The OOM rate the hazard refitted to the study's engine deaths predicts (export.oom_model);
    None when nothing was predicted."""
    p = c.oom.predicted_per_1k
    if math.isnan(p):
        return None
    side = "over" if p > limit else "within"
    return (f"predicted oom_per_1k: {p:.2g}, {side} the limit of {limit:g} (the runtime-OOM hazard refitted to the "
            "engine deaths this study saw; a model's estimate, not a measurement)")


def _requests(c: ConfigEvidence) -> str:
    return f"{c.oom.requests} requests in all" if c.oom.requests else "request counts not recorded"


def _spread(study: StudyEvidence, metric: str) -> str:
    sd, df = study.spread.get(metric, (math.nan, 0))
    if not df:
        return ""
    pooled = study.pooled()
    return f"; run-to-run spread {100 * sd:.1f} % from {sum(c.n for c in pooled)} runs of {len(pooled)} configs"


def _fmt(v: float, metric: str) -> str:
    """The figure with the unit the metric registry declares (the one status and MLflow show)."""
    return display(metric, v)


def ranked_summary(c: ConfigEvidence, metric: str = LATENCY) -> str:
    """The metric the export ranked by, in one phrase, for the command's output."""
    i = c.interval(metric)
    if not i.known:
        return f"{metric} {_fmt(i.mean, metric)} (one run)"
    return f"{metric} {_fmt(i.mean, metric)} (95 % interval {_fmt(i.low, metric)} to {_fmt(i.high, metric)}, {c.n} runs)"

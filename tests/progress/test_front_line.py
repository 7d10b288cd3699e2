"""Plain progress prints the Pareto front when it changes, not after every trial, and a trial
that never served as failed, with its whole reason."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from autotune.study.display.progress import Progress
from autotune.study.trials.record import Role, State, TrialRecord
from tests.progress.test_progress import slow_noop_space

REASON = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
          "the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")


def _progress() -> tuple[Progress, io.StringIO, list[TrialRecord]]:
    buf = io.StringIO()
    p = Progress(mode="plain", console=Console(file=buf, width=400, highlight=False, soft_wrap=True))
    front: list[TrialRecord] = []
    p.ctx = SimpleNamespace(tally=SimpleNamespace(complete=0, running=0, failed=0, rejected=0), target=4,
                            space=slow_noop_space(), front=SimpleNamespace(trials=lambda: front))
    return p, buf, front


def _rec(n: int, p99: float, **kw) -> TrialRecord:
    return TrialRecord(n, State.COMPLETE, Role.SEARCH, values=[0.0, p99], **kw)


def test_the_front_is_printed_when_it_changes():
    p, buf, front = _progress()
    for r, on_front in ((_rec(0, 30.0), True), (_rec(1, 35.0), False), (_rec(2, 25.0), True), (_rec(3, 40.0), False)):
        if on_front:
            front[:] = [r]
        p.on_trial_end(r, None)
    lines = buf.getvalue().splitlines()
    assert [line.strip() for line in lines if "Pareto front" in line] == [
        "Pareto front (oom_per_1k, p99_e2e_s): #0 (0, 30)", "Pareto front (oom_per_1k, p99_e2e_s): #2 (0, 25)"]


def test_a_trial_that_never_served_is_printed_failed_with_its_whole_reason():
    p, buf, _ = _progress()
    r = TrialRecord(1, State.COMPLETE, Role.REFERENCE, "field-report-tuned", values=[1000.0, 600.0], started=False,
                    failure_class="startup_oom", failure_reason=REASON)
    p.on_trial_end(r, None)
    (line,) = [x for x in buf.getvalue().splitlines() if "trial 1" in x]
    assert " failed " in line and "1000" not in line and "600" not in line
    assert REASON in line

"""A hand-made study in a run directory where the lowest single p99 is a lucky run.

Trial 2's config measured 24.9 s once, then 27.4 and 27.8 in its two confirmation runs:
its first run was luck. Trial 3's config measured 25.8, 26.0, 25.9: the one the export rule
recommends. Trial 4 (25.5 s, 1 OOM in 1000 requests) was measured once. Trial 1, a
reference, never started; Optuna holds it as complete with the penalty values 1000 and 600.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import yaml
from optuna.distributions import IntDistribution

from autotune.rundir import RunDir
from autotune.study.storages.storage import storage_from_url
from autotune.study.trials.record import BASELINE_NAME, Role, State, TrialRecord

STUDY = "lucky"
SPACE = {
    "version": 1,
    "engine": {"backend": "noop", "model": "m"},
    "params": {"max_num_seqs": {"type": "int", "low": 1, "high": 512}},
    "study": {"name": STUDY},
}
# A vLLM startup failure's reason, long enough that a table cell would cut it.
STARTUP_FAILURE = ("ValueError: To serve at least one request with the models's max seq len (32768), 10.00 GiB KV "
                   "cache is needed, which is larger than the available KV cache memory (2.25 GiB). Based on the "
                   "available memory, the estimated maximum model length is 7360. Try increasing "
                   "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
LUCKY, RECOMMENDED, SINGLE, NEVER_SERVED = 2, 3, 4, 1


def _add(study: optuna.Study, p99: float, seqs: int, role: Role = Role.SEARCH, ooms: int = 0, reference: str = "",
         repeat_of: int | None = None, started: bool = True, reason: str = "") -> None:
    values = [1000.0 * ooms / 1000, p99] if started else [1000.0, 600.0]
    metrics = {"oom_per_1k": values[0], "p99_e2e_s": p99, "requests": 1000.0, "requests_oom": float(ooms)}
    r = TrialRecord(len(study.trials), State.COMPLETE, role, reference, params={"max_num_seqs": seqs},
                    flags={"max_num_seqs": seqs}, metrics=metrics if started else {}, values=values,
                    started=started, repeat_of=repeat_of, failure_reason=reason,
                    failure_class="startup_failed" if not started else "none")
    study.add_trial(optuna.trial.create_trial(params=r.params, distributions={"max_num_seqs": IntDistribution(1, 512)},
                                              values=r.values, user_attrs=r.user_attrs()))


def lucky_study(root: Path) -> RunDir:
    rd = RunDir(root).ensure()
    rd.space_copy.write_text(yaml.safe_dump(SPACE, sort_keys=False))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=storage_from_url(rd.optuna_url), study_name=STUDY,
                                directions=["minimize", "minimize"])
    _add(study, 26.69, 256, Role.BASELINE, reference=BASELINE_NAME)  # 0: vLLM's defaults
    _add(study, 0.0, 512, Role.REFERENCE, reference="field-report-tuned", started=False,
         reason=STARTUP_FAILURE)  # 1
    _add(study, 24.9, 64)  # 2: the lucky single run
    _add(study, 25.8, 128)  # 3
    _add(study, 25.5, 32, ooms=1)  # 4: measured once
    for p99, of in ((27.4, LUCKY), (27.8, LUCKY), (26.0, RECOMMENDED), (25.9, RECOMMENDED)):  # 5-8
        _add(study, p99, 64 if of == LUCKY else 128, Role.CONFIRM, repeat_of=of)
    return rd

"""Confirmation through the vllm backend: each repeat is a new server start; same evidence code.

The trial loop runs in-process with a pool that calls VllmBackend.run_trial at once, on the
fake vLLM server (tests/fakes: fake because this needs no GPU and no model, and the backend's
real launch, HTTP and shutdown path is what runs). The per-config aggregation and the
export rule are the ones every backend uses: nothing here is vllm-specific but the backend.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

import optuna

from autotune.backends.vllm import VllmBackend
from autotune.space.schema import SearchSpace
from autotune.study.analysis.export_rule import MEASURED, choose_for_export
from autotune.study.loop.driver import TrialLoop
from autotune.study.loop.opening import open_study
from autotune.study.search.samplers import make_sampler
from autotune.study.trials.record import Role, State, records
from tests.fakes.helpers import SHIM, fake_starts
from tests.fakes.pools import InlinePool

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_confirmation_restarts_the_vllm_server_for_each_repeat(tmp_path):
    space = SearchSpace.model_validate({
        "version": 1,
        "engine": {"backend": "vllm", "model": "fake/tiny-model", "python": sys.executable,
                   "env": {"PYTHONPATH": str(SHIM), "FAKE_VLLM": json.dumps({"state_dir": str(tmp_path / "fake-state")})},
                   "flags": {"max_model_len": 2048}, "startup_timeout_s": 60},
        "params": {"max_num_seqs": {"type": "int", "low": 4, "high": 16}},
        "workload": {"num_requests": 12, "concurrency": 4, "request_timeout_s": 30,
                     "prompt_len": {"dist": "uniform", "mean": 24, "min": 8, "max": 40},
                     "output_len": {"dist": "uniform", "mean": 12, "min": 4, "max": 20}, "token_id_high": 1000},
        "study": {"sampler": "random", "strategy": {"warm_start": False}, "confirm": {"finalists": 1, "repeats": 2}},
    })
    backend = VllmBackend(hang_timeout_s=10.0, stop_grace_s=5.0, watch_interval_s=0.2, metrics_interval_s=0.2)
    study = open_study(space, "v", None, make_sampler("random", space, 0)).study
    try:
        # 8 trials: confirmation takes a quarter of the budget, the 2 repeats asked for.
        TrialLoop(study, space, InlinePool(backend.run_trial, size=1), target=8, seed=0).run()
    finally:
        backend.close()
    recs = records(study.trials)
    assert [r.state for r in recs] == [State.COMPLETE] * 8 and all(r.started for r in recs)
    assert [r.role for r in recs] == [Role.SEARCH] * 6 + [Role.CONFIRM] * 2
    (finalist,) = Counter(r.repeat_of for r in recs[6:])
    assert Counter(r.repeat_of for r in recs[6:])[finalist] == 2
    assert fake_starts(tmp_path) == 8  # one server start per trial: every repeat restarted vLLM
    choice = choose_for_export(study, space, 1.0)
    runs = sum(r.flags == recs[finalist].flags for r in recs)  # the random search may have drawn it twice
    assert choice is not None and choice.trial.number == finalist and choice.config.n == runs >= 3
    assert choice.tier == MEASURED  # 0 OOMs in a few dozen requests cannot show <= 1 per 1000
    assert choice.config.interval("p99_e2e_s").known  # three runs or more: an interval
    assert choice.config.oom.requests == 12 * runs and not choice.config.headroom.known  # no memory model for a fake model

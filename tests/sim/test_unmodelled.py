"""Flags the simulator does not model: refused in one line, or accepted with a warning on every trial."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.backends import ServerSpec, TrialRequest, get_backend
from autotune.errors import UserError
from autotune.results import TrialStatus
from autotune.space import load_space
from autotune.study.loop.validate import validate_for_backend
from tests.conftest import with_setting
from tests.sim.conftest import A100, QWEN72B, chat_workload, qwen_flags
from tests.sim.test_cli import SPACE, cli

BASE = yaml.safe_load(Path(SPACE).read_text())


def _space(tmp_path: Path, **settings) -> Path:
    data = BASE
    for dotted, value in settings.items():
        data = with_setting(data, dotted.replace("__", "."), value)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_simulate_set_of_an_unmodelled_flag_is_one_line_exit_2():
    p = cli("--space", SPACE, "--set", "async_scheduling=true")
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert lines[0].startswith("error: --set async_scheduling: the simulator does not model async_scheduling")
    assert "engine.allow_unmodelled_flags: true" in lines[0]


def test_simulate_refuses_an_unmodelled_fixed_flag_but_not_one_at_vllms_default(tmp_path):
    p = cli("--space", str(_space(tmp_path, engine__flags__scheduling_policy="priority")), "--json")
    assert p.returncode == 2 and p.stderr.startswith("error: engine.flags.scheduling_policy: the simulator does not")
    # fcfs is vLLM's default, which is what the simulator models.
    p = cli("--space", SPACE, "--json", "--set", "scheduling_policy=fcfs")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["warnings"] == []


def test_simulate_with_the_opt_in_runs_and_warns(tmp_path):
    space = _space(tmp_path, engine__allow_unmodelled_flags=True)
    p = cli("--space", str(space), "--json", "--set", "async_scheduling=true")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["status"] == "ok" and len(out["warnings"]) == 1 and "async_scheduling" in out["warnings"][0]
    human = cli("--space", str(space), "--set", "async_scheduling=true")
    assert "warning: the simulator does not model async_scheduling" in human.stdout


@pytest.mark.parametrize(("setting", "value", "where"), [
    ("engine.flags.async_scheduling", True, "engine.flags.async_scheduling"),
    ("params.scheduling_policy", {"type": "categorical", "choices": ["fcfs", "priority"]}, "params.scheduling_policy"),
    ("references", [{"name": "offload", "flags": {"cpu_offload_gb": 8.0}}], "references[0].flags.cpu_offload_gb"),
])
def test_a_sim_study_touching_an_unmodelled_flag_is_refused_naming_it(tmp_path, setting, value, where):
    sp = load_space(_space(tmp_path, **{setting.replace(".", "__"): value}))
    with pytest.raises(UserError) as e:
        validate_for_backend(sp)
    flag = where.rsplit(".", 1)[1]
    assert str(e.value).startswith(f"{where}: the simulator does not model {flag};")
    assert "\n" not in str(e.value)
    # Opted in, or on real vLLM, the same space is fine.
    validate_for_backend(sp.model_copy(update={"engine": sp.engine.model_copy(update={"allow_unmodelled_flags": True})}))
    validate_for_backend(sp.model_copy(update={"engine": sp.engine.model_copy(update={"backend": "vllm"})}))


def test_flags_with_no_effect_are_accepted(tmp_path):
    sp = load_space(_space(tmp_path, engine__flags__served_model_name="chat", engine__flags__seed=7))
    validate_for_backend(sp)


def test_every_sim_backend_trial_carries_the_warning():
    backend = get_backend("sim")
    wl = chat_workload(30)
    ran = backend.run_trial(TrialRequest(0, ServerSpec(model=QWEN72B, gpu=A100),
                                         qwen_flags(gpu_memory_utilization=0.92, async_scheduling=True), wl))
    failed = backend.run_trial(TrialRequest(1, ServerSpec(model=QWEN72B, gpu=A100),
                                            qwen_flags(gpu_memory_utilization=0.85, async_scheduling=True), wl))
    plain = backend.run_trial(TrialRequest(2, ServerSpec(model=QWEN72B, gpu=A100),
                                           qwen_flags(gpu_memory_utilization=0.92), wl))
    assert ran.status == TrialStatus.OK and failed.status == TrialStatus.STARTUP_FAILED
    for res in (ran, failed):
        assert len(res.warnings) == 1 and "async_scheduling" in res.warnings[0]
    assert plain.warnings == []


@pytest.mark.parametrize("gpu", ["H100", "NVIDIA A100-SXM4-80GB", "h100-80gb"])
def test_a_gpu_alias_the_simulator_accepts_keeps_the_screen_and_the_sweep(tmp_path, gpu):
    """The simulator reads "H100" as H100-80GB; a study on it must not lose the screen and the
    sweep (which used to compare the name with the table's exact keys and quietly turned off,
    leaving plain TPE) nor be refused by the sim backend's check."""
    from autotune.calibrate.screen import screen_wrapper, simulator_models, unaided_note
    from autotune.study.search import SweepSampler

    sp = load_space(_space(tmp_path, engine__gpu=gpu))
    assert simulator_models(sp)
    validate_for_backend(sp)
    assert isinstance(screen_wrapper(optuna.samplers.TPESampler(seed=0), sp, 0), SweepSampler)
    assert unaided_note(sp) is None
    unknown = load_space(_space(tmp_path, engine__gpu="TPU-v5e"))
    assert not simulator_models(unknown)
    tpe = optuna.samplers.TPESampler(seed=0)
    assert screen_wrapper(tpe, unknown, 0) is tpe  # the search runs unaided, and the run's start says why
    assert unaided_note(unknown).startswith(
        "the sweep and the screen are off, the study samples unaided: unknown GPU 'TPU-v5e'")
    grid = unknown.model_copy(update={"study": unknown.study.model_copy(update={"sampler": "grid"})})
    assert unaided_note(grid) is None  # a grid is never screened: nothing is lost
    with pytest.raises(UserError, match="engine.gpu 'TPU-v5e': unknown to the simulator"):
        validate_for_backend(unknown)

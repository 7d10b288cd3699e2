"""The neutral deploy package: GPU table lookups, vLLM's defaults by device, who may import it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotune.deploy import find_gpu, get_gpu, gpu_memory_gib, predict_startup
from autotune.engine import resolve_defaults
from autotune.errors import UserError
from autotune.space import load_space
from autotune.study.search.pruning import StartupPredictor
from tests.conftest import with_setting

REPO = Path(__file__).resolve().parents[2]
QWEN = REPO / "search_spaces" / "qwen72b.yaml"
TINY_CPU = REPO / "search_spaces" / "tiny-cpu.yaml"


def test_gpu_lookup_by_alias_and_memory():
    assert find_gpu("NVIDIA H100 80GB HBM3") is get_gpu("H100-80GB")
    assert gpu_memory_gib("A100-80GB") == get_gpu("A100-80GB").mem_total_gib
    with pytest.raises(UserError, match="unknown GPU 'V100'"):
        get_gpu("V100")


@pytest.mark.parametrize("name", ["cpu", "B200", "MI300X"])
def test_an_unknown_gpu_has_no_memory_figure_instead_of_a_guessed_one(name):
    assert find_gpu(name) is None and gpu_memory_gib(name) is None


def test_tiny_cpu_space_gets_vllms_cpu_defaults():
    """`gpu: cpu` is vLLM's CPU build: its batch and block defaults, not a GPU's."""
    sp = load_space(TINY_CPU)
    out = resolve_defaults(sp.fixed_flags(), sp.engine.gpu, gpu_memory_gib(sp.engine.gpu))
    assert (out["max_num_batched_tokens"], out["max_num_seqs"], out["block_size"]) == (2048, 128, 128)
    # An unknown GPU gets the class vLLM falls back to when it cannot read the device.
    gpu = resolve_defaults(sp.fixed_flags(), "MI300X", gpu_memory_gib("MI300X"))
    assert (gpu["max_num_batched_tokens"], gpu["max_num_seqs"], gpu["block_size"]) == (2048, 256, 16)


def test_pruning_uses_the_memory_model_when_it_knows_model_and_gpu():
    sp = load_space(QWEN)
    predictor = StartupPredictor.for_space(sp)
    assert predictor is not None
    bad = {**sp.fixed_flags(), "gpu_memory_utilization": 0.85}
    verdict = predictor.failure(bad)
    # The verdict names the shortfall beyond the model's uncertainty, then vLLM's own message.
    assert verdict.startswith("predicted startup failure")
    assert verdict.endswith(": " + predict_startup(sp.engine.model, sp.engine.gpu, bad).failure_reason)
    assert predictor.failure({**sp.fixed_flags(), "gpu_memory_utilization": 0.92}) == ""
    # A flag the memory model ignores could make the config start (cpu_offload_gb): no verdict.
    assert predictor.failure({**bad, "cpu_offload_gb": 30.0}) == ""


def test_pruning_is_off_without_a_memory_model():
    assert StartupPredictor.for_space(load_space(TINY_CPU)) is None  # gpu: cpu
    sp = load_space(QWEN)
    other = sp.model_validate(with_setting(sp.model_dump(), "engine.model", "nope/Model"))
    assert StartupPredictor.for_space(other) is None


_FORBIDDEN = ("optuna", "ray", "mlflow", "autotune.backends", "autotune.study", "autotune.workers",
              "autotune.tracking", "autotune.cli", "autotune.loadgen")


@pytest.mark.parametrize(("module", "also_forbidden"), [("autotune.deploy", ("autotune.sim",)), ("autotune.sim", ())])
def test_deploy_and_sim_import_nothing_above_them(module, also_forbidden):
    forbidden = _FORBIDDEN + also_forbidden
    code = (f"import sys, {module}; bad = [m for m in sys.modules if m.split('.')[0] in {forbidden!r} "
            f"or any(m == f or m.startswith(f + '.') for f in {forbidden!r})]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"

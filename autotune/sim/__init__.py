"""The serving simulator: vLLM V1 on GPUs, modelled from physics (see docs/simulator.md).

Public API: :func:`predict_startup` (startup memory model, no simulation),
:func:`simulate_trial` (one full trial), :func:`known_models`, :func:`known_gpus`,
:func:`resolve_model`. Nothing here imports optuna, ray or mlflow.
"""

from autotune.sim.hardware import GpuSpec, get_gpu, known_gpus
from autotune.sim.memory import MemBreakdown, StartupPrediction, predict_startup
from autotune.sim.model import ModelArch, known_models, resolve_model
from autotune.sim.trial import simulate_trial

__all__ = [
    "GpuSpec",
    "MemBreakdown",
    "ModelArch",
    "StartupPrediction",
    "get_gpu",
    "known_gpus",
    "known_models",
    "predict_startup",
    "resolve_model",
    "simulate_trial",
]

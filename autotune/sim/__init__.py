"""The serving simulator: vLLM V1 on GPUs, modelled from physics (see docs/simulator.md).

Public API: :func:`simulate_trial` (one full trial). The startup memory model and the GPU
and model tables live in :mod:`autotune.deploy` (the study uses them without the
simulator); :func:`predict_startup`, :func:`known_models`, :func:`known_gpus`,
:func:`get_gpu` and :func:`resolve_model` are re-exported here for callers that think of
them as the simulator's. Nothing here imports backends, the study, optuna, ray or mlflow.
"""

from autotune.deploy import (
    GpuSpec,
    MemBreakdown,
    ModelArch,
    StartupPrediction,
    get_gpu,
    known_gpus,
    known_models,
    predict_startup,
    resolve_model,
)
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

"""What a deployment is, independent of how it is run: GPUs, models, resolved flags, startup memory.

Shared by the simulator (which runs a deployment) and the study (which prunes configs the
memory model says cannot start), so neither has to import the other. Imports only the
neutral layer (engine, errors, results); no optuna, ray or mlflow.
"""

from autotune.deploy.deployment import Deployment, resolve_deployment
from autotune.deploy.hardware import GpuSpec, find_gpu, get_gpu, gpu_memory_gib, known_gpus
from autotune.deploy.memory import MemBreakdown, StartupPrediction, plan_startup, predict_startup
from autotune.deploy.model import ModelArch, known_models, resolve_model

__all__ = [
    "Deployment",
    "GpuSpec",
    "MemBreakdown",
    "ModelArch",
    "StartupPrediction",
    "find_gpu",
    "get_gpu",
    "gpu_memory_gib",
    "known_gpus",
    "known_models",
    "plan_startup",
    "predict_startup",
    "resolve_deployment",
    "resolve_model",
]

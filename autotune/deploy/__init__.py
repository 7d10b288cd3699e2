"""What a deployment is, independent of how it is run: devices, models, resolved flags, startup memory.

Shared by the simulator (which runs a deployment) and the study (which prunes configs the
memory model says cannot start), so neither has to import the other. Imports only the
neutral layer (engine, errors, results); no optuna, ray or mlflow. The simulator's
uncertain constants (:class:`SimProfile`) live here too: the startup model needs them.
"""

from autotune.deploy.deployment import Deployment, resolve_deployment
from autotune.deploy.hardware import (
    GpuSpec,
    device_kind,
    find_gpu,
    get_device,
    get_gpu,
    gpu_memory_gib,
    known_devices,
    known_gpus,
)
from autotune.deploy.memory import MemBreakdown, StartupPrediction, plan_startup, predict_startup
from autotune.deploy.model import ModelArch, known_models, resolve_model
from autotune.deploy.profile import NOMINAL, SimProfile
from autotune.deploy.vllm_env import VllmEnv

__all__ = [
    "Deployment",
    "GpuSpec",
    "MemBreakdown",
    "ModelArch",
    "NOMINAL",
    "SimProfile",
    "StartupPrediction",
    "VllmEnv",
    "device_kind",
    "find_gpu",
    "get_device",
    "get_gpu",
    "gpu_memory_gib",
    "known_devices",
    "known_gpus",
    "known_models",
    "plan_startup",
    "predict_startup",
    "resolve_deployment",
    "resolve_model",
]

"""Checks that need to know the backend: can the simulator model this model, GPU and flags?"""

from __future__ import annotations

from autotune.backend_kinds import is_simulated
from autotune.deploy import find_gpu, known_gpus, resolve_model
from autotune.errors import UserError
from autotune.metrics import get as get_metric
from autotune.space import SearchSpace, unmodelled_flag_error


def validate_for_backend(space: SearchSpace) -> None:
    if not is_simulated(space.engine.backend):
        return
    unreported = [m for m in [*space.objective_names, *space.slo] if not get_metric(m).simulated]
    if unreported:
        raise UserError(f"{unreported[0]}: the simulator does not report this vLLM server metric, so every trial "
                        "would score its penalty; use --backend vllm, or a metric `autotune metrics` marks as simulated")
    if find_gpu(space.engine.gpu) is None:  # the simulator's lookup, aliases included ("H100", "NVIDIA A100")
        raise UserError(f"engine.gpu {space.engine.gpu!r}: unknown to the simulator; use one of {', '.join(known_gpus())}")
    resolve_model(space.engine.model)  # raises UserError naming the model
    touched = space.unmodelled_flags()
    if touched and not space.engine.allow_unmodelled_flags:
        where, name = touched[0]
        raise unmodelled_flag_error(where, name)

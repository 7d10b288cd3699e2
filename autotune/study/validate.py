"""Checks that need to know the backend: is the model/GPU one the simulator can model?"""

from __future__ import annotations

from autotune.errors import UserError
from autotune.space import SearchSpace


def validate_for_backend(space: SearchSpace) -> None:
    if space.engine.backend != "sim":
        return
    from autotune.sim import known_gpus, resolve_model

    if space.engine.gpu not in known_gpus():
        raise UserError(f"engine.gpu {space.engine.gpu!r}: unknown to the simulator; use one of {', '.join(known_gpus())}")
    resolve_model(space.engine.model)  # raises UserError naming the model

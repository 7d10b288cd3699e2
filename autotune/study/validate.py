"""Checks that need to know the backend: can the simulator model this model, GPU and flags?"""

from __future__ import annotations

from autotune.backend_kinds import is_simulated
from autotune.deploy import known_gpus, resolve_model
from autotune.errors import UserError
from autotune.space import SearchSpace, unmodelled_flag_error


def validate_for_backend(space: SearchSpace) -> None:
    if not is_simulated(space.engine.backend):
        return
    if space.engine.gpu not in known_gpus():
        raise UserError(f"engine.gpu {space.engine.gpu!r}: unknown to the simulator; use one of {', '.join(known_gpus())}")
    resolve_model(space.engine.model)  # raises UserError naming the model
    touched = space.unmodelled_flags()
    if touched and not space.engine.allow_unmodelled_flags:
        where, name = touched[0]
        raise unmodelled_flag_error(where, name)

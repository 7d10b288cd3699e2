"""The search space: a versioned YAML validated by a pydantic schema."""

from autotune.space.loader import load_space, space_fingerprint
from autotune.space.schema import (
    ClusterSpec,
    Constraint,
    EngineSection,
    Objective,
    ParamSpec,
    Reference,
    SearchSpace,
    StudySection,
    unmodelled_flag_error,
)

__all__ = [
    "ClusterSpec",
    "Constraint",
    "EngineSection",
    "Objective",
    "ParamSpec",
    "Reference",
    "SearchSpace",
    "StudySection",
    "load_space",
    "space_fingerprint",
    "unmodelled_flag_error",
]

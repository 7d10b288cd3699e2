"""Creating or resuming a study: objectives and space must match, the warm start goes in once."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from autotune.errors import UserError
from autotune.space import SearchSpace, space_fingerprint
from autotune.space.loader import legacy_space_fingerprint
from autotune.study.search import seeding
from autotune.study.storages import with_retries

FINGERPRINT_ATTR = "autotune.space_fingerprint"


@dataclass(frozen=True)
class OpenedStudy:
    study: optuna.Study


def open_study(space: SearchSpace, name: str, storage: optuna.storages.BaseStorage | None,
               sampler: optuna.samplers.BaseSampler, target: int | None = None) -> OpenedStudy:
    """Create the study, or load it to resume; ``storage`` None keeps it in memory.

    ``target``: the trial budget, which sizes the warm start (the space's by default).
    Only the driver that creates the study seeds it: two drivers starting together on a
    shared storage must not both enqueue the warm-start trials (``create_study`` without
    ``load_if_exists`` makes the creation atomic).
    """
    directions = [o.direction for o in space.objectives]
    try:
        study = with_retries(lambda: optuna.create_study(storage=storage, study_name=name, directions=directions,
                                                         sampler=sampler), "create_study")
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        assert storage is not None  # an in-memory storage holds no study of that name yet
        study = with_retries(lambda: optuna.load_study(study_name=name, storage=storage, sampler=sampler),
                             "load_study")
        created = False
    if [d.name.lower() for d in study.directions] != directions:
        raise UserError(f"study {name!r} exists with other objectives; use --study NEW_NAME")
    _check_fingerprint(study, space, name, created, target)
    return OpenedStudy(study)


def _check_fingerprint(study: optuna.Study, space: SearchSpace, name: str, created: bool,
                       target: int | None = None) -> None:
    fp = space_fingerprint(space)
    attrs = study.user_attrs
    if FINGERPRINT_ATTR not in attrs:
        study.set_user_attr(FINGERPRINT_ATTR, fp)
        study.set_user_attr("autotune.backend", space.engine.backend)
        # A creator killed before seeding leaves an unseeded study: seed it then.
        if space.study.strategy.warm_start and (created or not study.trials):
            seeding.enqueue_warm_start(study, space, target)
        return
    stored = attrs[FINGERPRINT_ATTR]
    if stored == legacy_space_fingerprint(space) != fp:
        study.set_user_attr(FINGERPRINT_ATTR, fp)  # recorded before the fingerprint counted the CPU KV size
    elif stored != fp:
        raise UserError(
            f"study {name!r} was created from a different space (engine, params, constraints, workload "
            "or objectives changed); resume with the original file or pass --study NEW_NAME"
        )

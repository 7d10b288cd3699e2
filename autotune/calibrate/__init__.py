"""Calibrating autotune's simulator to measured trials, and using it in the search.

Imports the neutral layer, ``deploy``, ``sim``, ``space`` and ``study`` (the records it
fits and the pieces of the strategy it plugs into); nothing imports it but the commands and
the assembler. See docs/calibration.md.

Public API::

    calibrate(records, space, base=NOMINAL, holdout_every=3, requests=300) -> Calibration
    fit_profile(records, space, base=NOMINAL, requests=300) -> (SimProfile, [StageResult])
    screen_wrapper(base, space, seed) -> optuna sampler: ``base`` behind the screen and the sweep;
        make_sampler(space.study.sampler, space, seed, wrap=screen_wrapper) is a study's sampler
"""

from autotune.calibrate.calibration import Calibration, HeldOutError, calibrate, fit_profile
from autotune.calibrate.screen import SimModel, screen_wrapper
from autotune.calibrate.stages import StageResult

__all__ = ["Calibration", "HeldOutError", "SimModel", "StageResult", "calibrate", "fit_profile", "screen_wrapper"]

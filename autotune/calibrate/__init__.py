"""Calibrating autotune's simulator to measured trials, and using it in the search.

Imports the neutral layer, ``deploy``, ``sim``, ``space`` and ``study`` (the records it
fits and the pieces of the strategy it plugs into); nothing imports it but the commands and
the assembler. See docs/calibration.md.

Public API::

    calibrate(records, space, base=NOMINAL, holdout_every=3, requests=300) -> Calibration
    fit_profile(records, space, base=NOMINAL, requests=300) -> (SimProfile, [StageResult])
    screen_wrapper(base, space, seed) -> optuna sampler: ``base`` behind the screen and the sweep;
        make_sampler(space.study.sampler, space, seed, wrap=screen_wrapper) is a study's sampler
    predicted_ooms(groups, space) -> [float]: export.oom_model's OOM rates, the runtime-OOM hazard
        refitted to the study's engine deaths (handed to the evidence on import)
"""

from autotune.calibrate.calibration import Calibration, HeldOutError, calibrate, fit_profile
from autotune.calibrate.hazard import predicted_ooms
from autotune.calibrate.screen import SimModel, screen_wrapper
from autotune.calibrate.stages import StageResult
from autotune.study.analysis.evidence import use_oom_model

# export.oom_model's predictions come from here (the study layer may not import the simulator);
# handed in once, on import, so every command and the assembler rank configs alike.
use_oom_model(predicted_ooms)

__all__ = ["Calibration", "HeldOutError", "SimModel", "StageResult", "calibrate", "fit_profile", "predicted_ooms",
           "screen_wrapper"]

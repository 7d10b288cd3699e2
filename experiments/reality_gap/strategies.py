"""The strategies the reality-gap benchmark compares, as variants of a scenario's space.

Every strategy runs through autotune's own trial loop; a strategy is only what the space
tells that loop (``study.sampler``, ``study.strategy``, ``study.confirm``) plus, for the
vLLM grid, which flags are searched. The truth (the perturbed simulator) is never part of
a space: it goes to the pool's backend alone (:mod:`experiments.reality_gap.study`).

* ``random``, ``tpe``: a plain Optuna tuner. Optuna's ``RandomSampler(seed)`` and
  ``TPESampler(seed)`` with their defaults, every autotune part off (no pruning, no
  OOM/startup constraints: a startup failure is told as the penalty values, no early stop,
  no warm start, no screen, no confirmation runs). The space's declarative constraints
  (``max_num_batched_tokens >= max_num_seqs``) stay: they are part of the scenario.
* ``grid``: vLLM's ``benchmarks/auto_tune/auto_tune.sh`` lists, as experiments/search runs
  them: ``NUM_SEQS_LIST="128 256"``, ``NUM_BATCHED_TOKENS_LIST="512 1024 2048 4096"``, its
  gpu_memory_utilization probe 0.98 -> 0.90 by 0.01 and ``--enable-prefix-caching`` (the
  script always passes it); every other searched flag at vLLM's default. The Cartesian
  product (72 configs) is visited by Optuna's GridSampler in seeded random order, with the
  same budget and parts off as ``random``. (The script itself probes gmu downward with the
  largest config and then benchmarks the 8 combinations at the highest gmu that started;
  the product holds every config the script can run.)
* ``autotune``: the space as shipped (sampler ``autotune``, every part of
  ``study.strategy`` at its default: the sweep, the screen, pruning, early stop, warm start;
  the space's ``study.confirm``).
* ``tpe-confirm``: ``tpe`` with the space's confirmation runs and the same export rule:
  what confirmation adds, apart from what autotune's search adds.
* ``sim-best``: zero search. The nominal simulator's brute-force best config on the
  scenario's grid (the committed nominal ground truth, experiments/scenarios), measured
  once: what a user who trusts the simulator gets for one GPU trial.
* ``auto-tune-sh``: vLLM's ``benchmarks/auto_tune/auto_tune.sh`` procedure: start the server
  with the largest lists' values (max_num_seqs 256, max_num_batched_tokens 4096) at
  gpu_memory_utilization 0.98, then 0.97, ... down to 0.90, one start at a time, until one
  starts; then benchmark every max_num_seqs x max_num_batched_tokens of its lists at that
  gmu, prefix caching on (:mod:`experiments.reality_gap.auto_tune_sh`). The script's p99
  ceiling is the export rule's OOM-then-objective ranking here, as for every strategy.
* ablations: ``autotune`` with one part off, or the part left off on (:data:`ABLATIONS`).
* ``grid-all``: not a strategy a user could afford but a **ceiling**: every config of the
  scenario's brute-force grid measured once (seeded order, every part off), then the space's
  confirmation race and export rule, as ``tpe-confirm`` and ``autotune`` run them. A search
  cannot measure more than that, so where ``grid-all`` misses the 2 % band the miss is the
  race's and the export rule's under the run-to-run noise, not the search's. Its budget is the
  grid's size plus the space's confirmation runs (README, "The noise ceiling"). ``grid-all-race24``
  is the same with 8 repeats per finalist instead of the space's 2: what a longer race buys.
"""

from __future__ import annotations

from typing import Any

from autotune.space import SearchSpace
from autotune.space.schema import ParamSpec

# Every autotune part off: what a plain Optuna tuner does.
PLAIN = dict(prune_startup_failures=False, feasibility_constraints=False, early_stop=False, warm_start=False,
             screen=False, sweep=False)

# vLLM benchmarks/auto_tune/auto_tune.sh (NUM_SEQS_LIST, NUM_BATCHED_TOKENS_LIST, the gmu probe).
AUTO_TUNE_SEQS = [128, 256]
AUTO_TUNE_BATCHED_TOKENS = [512, 1024, 2048, 4096]
AUTO_TUNE_GMU = [round(0.98 - 0.01 * i, 2) for i in range(9)]

# name -> (study.strategy changes, study.confirm changes) on top of the shipped space.
ABLATIONS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "autotune-nosweep": ({"sweep": False}, {}),
    "autotune-noscreen": ({"screen": False}, {}),
    "autotune-nolearn": ({"prune_learns_error": False}, {}),
    "autotune-nominal": ({"model_profile": "nominal"}, {}),
    "autotune-noconfirm": ({}, {"finalists": 0}),
    # Not an ablation but the one part tried and left off (README, "Leader repeats"): 2 of the
    # confirmation runs repeat the search's leader while it runs.
    "autotune-leader": ({}, {"leader_repeats": 2}),
    # Not an ablation: the race given half as many runs again (3 finalists x 3, not x 2), taken from
    # the search; whether a race under the structural truths' noise is short of runs (README,
    # "Sweep changes tried on the flagship and not adopted").
    "autotune-race9": ({}, {"repeats": 3}),
    # Tried on the flagship's development truths (README, "Did the search measure a config within 2 %"):
    # the sweep's second half kept to a trust region around the measured leader.
    "autotune-local": ({"sweep_local_from": 0.5}, {}),
    # Tried on development truths (README, "The kriging believer"): the sweep's GP counts running trials as
    # measured at its prediction, so parallel asks spread out.
    "autotune-believer": ({"sweep_believer": True}, {}),
    # Tried on development truths (README, "A GP averaged over its hyperparameters"): the sweep's GP
    # averaged over its (length, scale) grid, so an unmeasured plane keeps some prior spread.
    "autotune-marginal": ({"sweep_marginal": True}, {}),
    # Tried on development truths (README, "A diverse top-k of planes"): the first 15 % of the trial budget's
    # sampled trials each go to a categorical plane no sampled trial has measured.
    "autotune-planes": ({"sweep_planes": 0.15}, {}),
}
# name -> export section changes on top of the shipped space. Tried on the development truths (README,
# "The median of a config's runs"): the export rule and the race rank configs by the median of their runs.
# "autotune-edge" (README, "An edge guard"): a config at gpu_memory_utilization >= 0.95 lacks the export's
# margin, as one short of min_headroom_gib does, so a config below it within the interval is exported instead.
# "autotune-hazard" (README, "A hazard refitted to the study's deaths"): a config the runtime-OOM hazard refitted
# to the study's engine deaths predicts over the OOM limit ranks after those it does not.
EXPORT_VARIANTS: dict[str, dict[str, Any]] = {"autotune-median": {"center": "median"},
                                              "autotune-edge": {"gmu_edge": 0.95},
                                              "autotune-hazard": {"oom_model": True}}
BASELINES = ("random", "tpe", "grid", "tpe-confirm", "sim-best", "auto-tune-sh")
# tpe-confirm with the part of an autotune variant on, so the variant's comparison with the baseline
# holds that part fixed; not baselines a user tries first. "tpe-confirm-leader": README, "Leader repeats";
# "tpe-confirm-hazard": the baseline's export rule is autotune-hazard's (the tpe-confirm has
# "the same export rule" as autotune, so a default export.oom_model would be the baseline's too).
CONFIRM_VARIANTS = {"tpe-confirm-leader": "autotune-leader", "tpe-confirm-hazard": "autotune-hazard"}
# Every grid config once, then confirmation: what the race and the export rule reach without a search's misses;
# name -> study.confirm changes. grid-all-race24 races the same finalists with 4x the runs (3 x 8 = 24).
CEILINGS: dict[str, dict[str, Any]] = {"grid-all": {}, "grid-all-race24": {"repeats": 8}}
STRATEGIES = (*BASELINES, "autotune", *ABLATIONS, *EXPORT_VARIANTS, *CONFIRM_VARIANTS, *CEILINGS)


def variant(space: SearchSpace, strategy: str) -> SearchSpace:
    """``space`` as ``strategy`` runs it."""
    if strategy == "autotune":
        return space
    if strategy in ABLATIONS:
        switches, confirm = ABLATIONS[strategy]
        return _with_study(space, space.study.sampler, switches, confirm)
    if strategy in EXPORT_VARIANTS:
        return _with_autotune_part(space, strategy)
    if strategy in ("random", "tpe"):
        return _with_study(space, strategy, PLAIN, {"finalists": 0})
    if strategy == "tpe-confirm":
        return _with_study(space, "tpe", PLAIN, {})
    if strategy in CONFIRM_VARIANTS:
        return _with_autotune_part(variant(space, "tpe-confirm"), CONFIRM_VARIANTS[strategy])
    if strategy in CEILINGS:  # its trials are enqueued (the grid), the sampler never asked; confirmation on
        return _with_study(space, "grid", PLAIN, CEILINGS[strategy])
    if strategy in ("grid", "auto-tune-sh"):
        # auto-tune-sh enqueues its own sequence (auto_tune_sh.py); the sampler is never asked.
        return _with_study(_auto_tune_lists(space), "grid", PLAIN, {"finalists": 0})
    if strategy == "sim-best":
        raise ValueError("sim-best is a config, not a space: use sim_best_space(space, params)")
    raise ValueError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")


def _with_autotune_part(space: SearchSpace, autotune_variant: str) -> SearchSpace:
    """``space`` with the confirmation or export change that makes ``autotune_variant`` of autotune."""
    if autotune_variant in EXPORT_VARIANTS:
        return space.model_copy(update={"export": space.export.model_copy(update=EXPORT_VARIANTS[autotune_variant])})
    switches, confirm = ABLATIONS[autotune_variant]
    # a search part would make the baseline another search, not tpe-confirm with autotune's confirmation
    assert not switches, f"{autotune_variant} changes the search ({switches}); only confirmation or export parts copy"
    return _with_study(space, space.study.sampler, {}, confirm)


def _with_study(space: SearchSpace, sampler: str, switches: dict[str, Any], confirm: dict[str, Any]) -> SearchSpace:
    s = space.study
    study = s.model_copy(update={"sampler": sampler, "strategy": s.strategy.model_copy(update=switches),
                                 "confirm": s.confirm.model_copy(update=confirm)})
    return space.model_copy(update={"study": study})


def _auto_tune_lists(space: SearchSpace) -> SearchSpace:
    """The space searched over auto_tune.sh's lists; prefix caching fixed on; the scenario's
    other searched flags left unset (vLLM's defaults)."""
    params = {
        "gpu_memory_utilization": ParamSpec(type="categorical", choices=AUTO_TUNE_GMU),
        "max_num_seqs": ParamSpec(type="categorical", choices=AUTO_TUNE_SEQS),
        "max_num_batched_tokens": ParamSpec(type="categorical", choices=AUTO_TUNE_BATCHED_TOKENS),
    }
    engine = space.engine.model_copy(update={"flags": {**space.engine.flags, "enable_prefix_caching": True}})
    return space.model_copy(update={"params": params, "engine": engine, "references": []})


def sim_best_space(space: SearchSpace, params: dict[str, Any]) -> SearchSpace:
    """The space with every searched param held at the nominal simulator's best ``params``
    (one categorical choice each), every part off: one trial measures exactly that config."""
    fixed = {n: ParamSpec(type="categorical", choices=[params[n]]) for n in space.params if n in params}
    return _with_study(space.model_copy(update={"params": fixed, "references": []}), "grid", PLAIN, {"finalists": 0})


def budget(strategy: str, space_budget: int) -> int:
    """Trials a strategy runs: the space's budget, except sim-best's single measurement
    (auto-tune-sh stops when its procedure ends)."""
    return 1 if strategy == "sim-best" else space_budget

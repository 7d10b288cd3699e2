"""Pydantic schema of a search-space file (``version: 1``).

Sections: engine (what is deployed, fixed flags), params (what is searched, by vLLM flag
name), constraints (known-invalid combinations, declarative), workload (the fixed
benchmark), objectives, slo, references (hand-tuned configs to measure), study, cluster,
export (what the exported config must satisfy).
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autotune.backend_kinds import BACKEND_KINDS, backend_choices
from autotune.deploy import NOMINAL, SimProfile, VllmEnv, device_kind
from autotune.deploy.profile import nominal
from autotune.engine import FLAG_SPECS, is_unmodelled, unknown_flags, unmodelled_flags
from autotune.errors import UserError
from autotune.rundir import study_name_problem
from autotune.workload import SPACE_DIR_CONTEXT, WorkloadSpec

Scalar = bool | int | float | str


def _check_flags(flags: dict[str, Scalar]) -> dict[str, Scalar]:
    """Known flag names, each with a value vLLM takes (type and choices from the registry)."""
    bad = unknown_flags(flags)
    if bad:
        hint = did_you_mean(bad[0], FLAG_SPECS, "use vLLM's EngineArgs name (e.g. max_num_seqs)")
        raise ValueError(f"unknown vLLM flag {bad[0]!r}; {hint}")
    for name, value in flags.items():
        FLAG_SPECS[name].check(value)
    return flags


def did_you_mean(name: str, known: Any, otherwise: str) -> str:
    """``did you mean 'x'?`` for the closest of ``known`` to a misspelt ``name``, else ``otherwise``."""
    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1)
    return f"did you mean {close[0]!r}?" if close else otherwise


def unmodelled_flag_error(where: str, name: str) -> UserError:
    """The one-line refusal of a simulation that would ignore ``name`` (set at ``where``)."""
    return UserError(
        f"{where}: the simulator does not model {name}; remove it, measure it with --backend vllm, or set "
        "engine.allow_unmodelled_flags: true to simulate without it (every trial then carries a warning)"
    )


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EngineSection(_Strict):
    backend: str = "sim"  # a name of autotune.backend_kinds (declared there once)
    model: str
    gpu: str = "A100-80GB"
    flags: dict[str, Scalar] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    download_dir: str | None = None
    startup_timeout_s: float = Field(default=1800.0, gt=0)
    python: str | None = None
    # Let a sim study set or search flags the simulator ignores (each trial is then warned).
    allow_unmodelled_flags: bool = False
    # A SimProfile file (the simulator's constants, e.g. from a calibration), relative to the
    # space file; made absolute on load so a saved copy of the space still finds it.
    sim_profile: str | None = None
    _profile: SimProfile = PrivateAttr(default=NOMINAL)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        if v not in BACKEND_KINDS:
            raise ValueError(f"unknown backend {v!r}; use {backend_choices()}")
        return v

    @field_validator("flags")
    @classmethod
    def _known_flags(cls, v: dict[str, Scalar]) -> dict[str, Scalar]:
        return _check_flags(v)

    @field_validator("env")
    @classmethod
    def _vllm_env(cls, v: dict[str, str]) -> dict[str, str]:
        try:
            VllmEnv.from_env(v)
        except UserError as e:
            raise ValueError(str(e).removeprefix("engine.env.")) from None
        return v

    @model_validator(mode="after")
    def _load_profile(self, info: ValidationInfo) -> EngineSection:
        if self.sim_profile is not None:
            path = Path(self.sim_profile).expanduser()
            if not path.is_absolute():
                path = Path((info.context or {}).get(SPACE_DIR_CONTEXT, ".")) / path
            path = Path(os.path.abspath(path))
            try:
                self._profile = SimProfile.load(path)
            except UserError as e:
                raise ValueError(str(e)) from None
            self.sim_profile = str(path)
        else:
            self._profile = nominal(device_kind(self.gpu))  # a CPU host has its own nominal values
        return self

    @property
    def profile(self) -> SimProfile:
        """The simulator's constants for this space: ``sim_profile``'s, else the device's nominal."""
        return self._profile


class ParamSpec(_Strict):
    """One searched flag. ``when`` makes it active only if other params have given values."""

    type: Literal["float", "int", "categorical", "bool"]
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: list[Scalar] | None = None
    when: dict[str, Scalar] | None = None

    @model_validator(mode="after")
    def _check(self) -> ParamSpec:
        if self.type in ("float", "int"):
            if self.low is None or self.high is None:
                raise ValueError(f"{self.type} params need low and high")
            if not (math.isfinite(self.low) and math.isfinite(self.high)):
                raise ValueError("low and high must be finite numbers")
            if self.low > self.high:
                raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
            self._check_step(self.low, self.high)
            if self.log and self.low <= 0:
                raise ValueError("log scale needs low > 0")
            if self.log and self.step is not None:
                raise ValueError("step and log cannot be combined (Optuna rejects it)")
            if self.choices is not None:
                raise ValueError(f"choices do not apply to {self.type} params; use low/high")
        elif self.type == "categorical":
            if not self.choices:
                raise ValueError("categorical params need a non-empty choices list")
            if len(set(map(repr, self.choices))) != len(self.choices):
                raise ValueError("choices contain duplicates")
        elif any(x is not None for x in (self.low, self.high, self.step, self.choices)):
            raise ValueError("bool params take no low/high/step/choices")
        return self

    def _check_step(self, low: float, high: float) -> None:
        """Optuna silently lowers ``high`` to the last multiple of ``step`` (0.98 -> 0.92 with
        step 0.04 from 0.80) and an int param silently truncates fractions: both refused."""
        if self.type == "int" and not all(v is None or float(v).is_integer() for v in (low, high, self.step)):
            raise ValueError("int params need whole-number low, high and step")
        if self.step is None:
            return
        if not (math.isfinite(self.step) and self.step > 0):
            raise ValueError(f"step ({self.step:g}) must be a number > 0")
        span = high - low
        if span == 0:
            return
        if self.step > span:
            raise ValueError(f"step ({self.step:g}) is larger than high - low ({_g(span)}); lower step or widen the range")
        n = span / self.step
        if abs(n - round(n)) > 1e-6 * max(1.0, n):
            below, above = _g(low + math.floor(n) * self.step), _g(low + math.ceil(n) * self.step)
            raise ValueError(f"step ({self.step:g}) does not divide high - low ({_g(span)}); "
                             f"set high to {below} or {above}")

    def grid_values(self, points: int = 4) -> list[Scalar]:
        """Values a grid search visits for this param."""
        if self.type == "bool":
            return [False, True]
        if self.type == "categorical":
            return list(self.choices or [])
        assert self.low is not None and self.high is not None
        if self.step is not None:
            n = int(round((self.high - self.low) / self.step)) + 1
            idx = sorted({round(i * (n - 1) / max(points - 1, 1)) for i in range(points)})
            vals = [self.low + i * self.step for i in idx]
        elif self.log:
            import math

            lo, hi = math.log(self.low), math.log(self.high)
            vals = [math.exp(lo + (hi - lo) * i / max(points - 1, 1)) for i in range(points)]
        else:
            vals = [self.low + (self.high - self.low) * i / max(points - 1, 1) for i in range(points)]
        if self.type == "int":
            return sorted({int(round(v)) for v in vals})
        return [round(v, 6) for v in vals]


def _g(x: float) -> str:
    """A float as a person would write it in the YAML (0.96, not 0.9600000000000001)."""
    return f"{x:.10g}"


class Constraint(_Strict):
    """``when`` (optional) params have these values => ``left op right`` must hold.

    ``left``/``right`` name a param or fixed flag, or ``right`` is a number. ``repair``
    moves ``left`` to the nearest value that satisfies the constraint (when left is a
    searched int/float param); ``reject`` marks the sample infeasible without launching.
    Nothing is evaluated as code.
    """

    name: str | None = None
    when: dict[str, Scalar] = Field(default_factory=dict)
    left: str
    op: Literal["<=", "<", ">=", ">", "==", "!="]
    right: str | float
    action: Literal["reject", "repair"] = "reject"
    message: str | None = None


def _check_metric(name: str) -> str:
    """Objectives and SLOs must name a metric trials report, or every trial would silently
    score the penalty value."""
    from autotune.metrics import check_name

    return check_name(name)


class Objective(_Strict):
    """A registered metric to optimise. Its direction is the registry's (latencies and failure
    rates are minimised, throughput and goodput maximised), so writing it is optional, and
    the opposite one is refused: maximising p99 is a slip, not a preference."""

    metric: str
    direction: Literal["minimize", "maximize"] = "minimize"

    @model_validator(mode="before")
    @classmethod
    def _registry_direction(cls, data: Any) -> Any:
        from autotune.metrics import get, is_registered

        if isinstance(data, dict) and "direction" not in data and is_registered(str(data.get("metric"))):
            return {**data, "direction": get(str(data["metric"])).direction}
        return data

    @field_validator("metric")
    @classmethod
    def _known(cls, v: str) -> str:
        return _check_metric(v)

    @model_validator(mode="after")
    def _direction_agrees(self) -> Objective:
        from autotune.metrics import get

        better = get(self.metric).direction
        if self.direction != better:
            raise ValueError(f"{self.metric} is to be {better}d (autotune metrics lists each metric's direction); "
                             f"remove `direction: {self.direction}` or name another metric")
        return self


class SloLimit(_Strict):
    max: float | None = None
    min: float | None = None

    @model_validator(mode="after")
    def _one(self) -> SloLimit:
        if (self.max is None) == (self.min is None):
            raise ValueError("give exactly one of max or min")
        return self


class Reference(_Strict):
    """A config to measure as-is (e.g. a hand-tuned one), enqueued before the search."""

    name: str
    flags: dict[str, Scalar]
    note: str = ""

    @field_validator("flags")
    @classmethod
    def _known(cls, v: dict[str, Scalar]) -> dict[str, Scalar]:
        return _check_flags(v)


class StrategySection(_Strict):
    """autotune's own search strategy; each part can be switched off to measure its effect."""

    prune_startup_failures: bool = True  # memory model rejects configs that cannot start
    feasibility_constraints: bool = True  # OOMs/startup failures feed Optuna constraints
    early_stop: bool = True  # stop benchmarks that are already dominated
    warm_start: bool = True  # baseline and reference configs measured first
    # --- autotune's own model and how far it is trusted (docs/search.md, docs/calibration.md)
    # The profile of autotune's own model (pruning, screen): nominal, nominal recalibrated
    # from this study's measured trials, or a SimProfile file (relative to the space file).
    # Never engine.sim_profile: that is the physics the sim backend runs.
    model_profile: str = "calibrated"
    prune_learns_error: bool = True  # pruning learns the memory model's error from each startup
    # The simulator ranks the sampler's candidates before one launches (samplers autotune,
    # tpe, random; grid, nsga2 and gp propose jointly and are not screened).
    screen: bool = True
    screen_candidates: int = Field(default=8, ge=2)  # candidates drawn per launch
    screen_requests: int = Field(default=300, ge=50)  # requests per screening simulation
    recalibrate_every: int = Field(default=10, ge=1)  # launched trials between recalibrations
    # The sweep (study/search/sweep.py): before each sampled trial the model ranks a pool of the
    # space's configs, a GP learns the model's error from the measurements, and the best
    # optimistic corrected config launches; the sampler (screened) takes over where the
    # model proves wrong. Samplers autotune, tpe and random, like the screen.
    sweep: bool = True
    sweep_pool: int = Field(default=600, ge=10)  # configs the sweep ranks (a seeded sample if more)
    # Off (0) by default: once this share of study.trials has been measured, the sweep proposes only
    # configs within two flags of the best measured one (a trust region, as TuRBO; docs/search.md).
    sweep_local_from: float = Field(default=0.0, ge=0.0, le=1.0)
    # Off by default: the sweep's GP takes each running trial's config as measured at its own
    # prediction (the kriging believer, Ginsbourger et al. 2010), so workers asking in parallel
    # spread out instead of launching the model's favourite corner four times over (docs/search.md).
    sweep_believer: bool = False
    # Off by default: the sweep's GP is averaged over its hyperparameter grid, weighted by marginal
    # likelihood (Snoek et al. 2012), instead of taking the most likely (length, scale): agreeing
    # residuals on one plane then do not claim to know the model's error on planes nothing
    # measured (docs/search.md).
    sweep_marginal: bool = False
    # Off (0) by default: over the first this share of study.trials, each sampled trial goes to a
    # categorical plane (the values of the space's bool and categorical flags) no sampled trial has
    # measured: a diverse top-k of planes instead of the model's favourite plane and its neighbours,
    # since a model that calls a flag flat (block_size) never ranks its other value first (docs/search.md).
    sweep_planes: float = Field(default=0.0, ge=0.0, le=1.0)
    _base_profile: SimProfile = PrivateAttr(default=NOMINAL)

    @model_validator(mode="after")
    def _load_model_profile(self, info: ValidationInfo) -> StrategySection:
        if self.model_profile not in ("nominal", "calibrated"):
            path = Path(self.model_profile).expanduser()
            if not path.is_absolute():
                path = Path((info.context or {}).get(SPACE_DIR_CONTEXT, ".")) / path
            path = Path(os.path.abspath(path))
            try:
                self._base_profile = SimProfile.load(path)
            except UserError as e:
                raise ValueError(f"model_profile is nominal, calibrated or a SimProfile file: {e}") from None
            self.model_profile = str(path)
        return self

    @property
    def base_profile(self) -> SimProfile:
        """The profile autotune's own model starts from (the file's, else nominal)."""
        return self._base_profile

    @property
    def recalibrates(self) -> bool:
        return self.model_profile == "calibrated"


class ConfirmSection(_Strict):
    """Confirmation runs (docs/export.md): the ``finalists`` best configs of the search are
    measured ``repeats`` more times each, with fresh server starts, out of ``study.trials``.
    Either 0 switches them off."""

    finalists: int = Field(default=3, ge=0)
    repeats: int = Field(default=2, ge=0)
    # Of those runs, how many may go to the search's leader while the search still runs
    # (confirm.leader_repeat): one run's spread is then measured before the early-stop margin
    # and the sweep's GP need it, and a lucky first run is caught before everything is
    # stopped against it. Off by default: on the reality-gap benchmark's evaluation truths it
    # did worse than keeping every run for the final race (experiments/reality_gap/README.md).
    leader_repeats: int = Field(default=0, ge=0)

    @property
    def trials(self) -> int:
        """Launched trials confirmation takes from the study's budget."""
        return self.finalists * self.repeats


class StudySection(_Strict):
    name: str | None = None
    sampler: Literal["autotune", "tpe", "nsga2", "gp", "random", "grid"] = "autotune"
    trials: int = Field(default=40, ge=1)
    seed: int = 0
    storage: str | None = None  # SQLAlchemy URL; default sqlite:///<run dir>/optuna.db
    mlflow_tracking_uri: str | None = None  # default sqlite:///<run dir>/mlflow.db
    strategy: StrategySection = StrategySection()
    grid_points: int = Field(default=4, ge=2)
    confirm: ConfirmSection = ConfirmSection()

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str | None) -> str | None:
        problem = None if v is None else study_name_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class ExportSection(_Strict):
    """What `autotune export` requires of the config it writes (docs/export.md)."""

    # Memory per GPU that may vanish (a bigger CUDA context, another process, a vLLM that
    # profiles more) before the config stops starting; configs with less are exported only
    # when no config with this margin is within the best one's confidence interval.
    min_headroom_gib: float = Field(default=1.0, ge=0)
    # How a config's runs are summarised where configs are ranked (the export, the race, status):
    # "median" from three runs up is robust to an outlier server start (docs/export.md).
    center: Literal["mean", "median"] = "mean"
    # gpu_memory_utilization from which a config counts as lacking the margin, like one short of
    # min_headroom_gib (off by default). vLLM leaves (1 - gmu) of the GPU for what its start-up
    # profile does not see (NCCL and CUDA-graph pools, fragmentation that grows with uptime); at
    # the edge an engine can die in one run of five, which three clean runs miss half the time.
    gmu_edge: float | None = Field(default=None, gt=0, le=1)
    # Rank a config the study's own engine deaths predict over the OOM limit after those they do
    # not (off by default): the runtime-OOM hazard refitted to the deaths the study saw nearer the
    # memory edge (autotune.calibrate.hazard), for configs whose few clean runs cannot show
    # the limit. Needs a space the simulator models; without a death in the study it changes nothing.
    oom_model: bool = False


class ClusterSpec(_Strict):
    address: str | None = None
    workers: int | None = Field(default=None, ge=1)
    gpus_per_worker: int = Field(default=2, ge=0)
    cpus_per_worker: float = Field(default=1.0, gt=0)


_GOODPUT_METRICS = ("goodput_rps_per_gpu", "slo_attainment")


def _default_objectives() -> list[Objective]:
    return [Objective(metric="oom_per_1k"), Objective(metric="p99_e2e_s")]


class SearchSpace(_Strict):
    version: Literal[1]
    engine: EngineSection
    params: dict[str, ParamSpec]
    constraints: list[Constraint] = Field(default_factory=list)
    workload: WorkloadSpec = WorkloadSpec()
    objectives: list[Objective] = Field(default_factory=_default_objectives)
    slo: dict[str, SloLimit] = Field(default_factory=dict)
    references: list[Reference] = Field(default_factory=list)
    study: StudySection = StudySection()
    cluster: ClusterSpec = ClusterSpec()
    export: ExportSection = ExportSection()

    @field_validator("slo")
    @classmethod
    def _slo_metrics(cls, v: dict[str, SloLimit]) -> dict[str, SloLimit]:
        for name in v:
            _check_metric(name)
        return v

    @field_validator("params")
    @classmethod
    def _param_names(cls, v: dict[str, ParamSpec]) -> dict[str, ParamSpec]:
        if not v:
            raise ValueError("at least one param must be searched")
        bad = unknown_flags(v)
        if bad:
            hint = did_you_mean(bad[0], FLAG_SPECS, "params are named by vLLM's EngineArgs names")
            raise ValueError(f"unknown vLLM flag {bad[0]!r}; {hint}")
        for name, p in v.items():
            spec = FLAG_SPECS[name]
            ok = {
                "bool": spec.type is bool,
                "int": spec.type is int,
                "float": spec.type in (float, int),
                "categorical": True,
            }[p.type]
            if not ok:
                raise ValueError(f"{name}: vLLM takes a {spec.type.__name__}, not a {p.type} param")
            for choice in p.choices or []:
                spec.check(choice)
        return v

    @model_validator(mode="after")
    def _device_profile(self) -> SearchSpace:
        """autotune's own model starts from the device's nominal profile (a CPU host has its own)
        unless ``study.strategy.model_profile`` names a file."""
        strategy = self.study.strategy
        if strategy.model_profile in ("nominal", "calibrated"):
            strategy._base_profile = nominal(device_kind(self.engine.gpu))
        return self

    @model_validator(mode="after")
    def _cross_check(self) -> SearchSpace:
        both = set(self.params) & set(self.engine.flags)
        if both:
            raise ValueError(f"{sorted(both)[0]!r} is both fixed in engine.flags and searched in params")
        for name, p in self.params.items():
            for dep in p.when or {}:
                if dep not in self.params:
                    raise ValueError(f"params.{name}.when names {dep!r}, which is not a searched param")
        for i, c in enumerate(self.constraints):
            names = [c.left, *c.when] + ([c.right] if isinstance(c.right, str) else [])
            for n in names:
                if n not in FLAG_SPECS:  # params and engine.flags are known flags too
                    raise ValueError(f"constraints[{i}] names unknown param {n!r}; "
                                     f"{did_you_mean(n, [*self.params, *self.engine.flags], 'check the spelling')}")
            for n in names:
                if n not in self.params and n not in self.engine.flags:
                    raise ValueError(f"constraints[{i}] names {n!r}, which is neither searched (params) nor fixed "
                                     "(engine.flags), so it would never be enforced; add it to one or remove the "
                                     "constraint")
            if c.action == "repair" and (c.left not in self.params or self.params[c.left].type not in ("int", "float")):
                raise ValueError(f"constraints[{i}]: repair needs left to be a searched int/float param")
        for i, ref in enumerate(self.references):
            for k, v in ref.flags.items():
                searched = self.params.get(k)
                if searched is not None and searched.type == "categorical" and v not in (searched.choices or []):
                    raise ValueError(f"references[{i}] ({ref.name}): {k}={v!r} is not among params.{k}.choices")
        if len(self.objectives) < 1:
            raise ValueError("objectives must name at least one metric")
        goodput = [m for m in [*self.objective_names, *self.slo] if m in _GOODPUT_METRICS]
        if goodput and self.workload.goodput_slo is None:
            raise ValueError(f"{goodput[0]} needs workload.goodput_slo (e.g. goodput_slo: {{ttft_s: 2.0, tpot_s: 0.1}}): "
                             "without it every trial reports NaN")
        return self

    def unmodelled_flags(self) -> list[tuple[str, str]]:
        """(field, flag) for each flag the simulator does not model that this space sets to
        other than vLLM's default (engine.flags, references) or searches (params)."""
        found = [(f"engine.flags.{n}", n) for n in unmodelled_flags(self.engine.flags)]
        found += [(f"params.{n}", n) for n in self.params if is_unmodelled(n)]
        for i, ref in enumerate(self.references):
            found += [(f"references[{i}].flags.{n}", n) for n in unmodelled_flags(ref.flags)]
        return found

    @property
    def objective_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    def fixed_flags(self) -> dict[str, Any]:
        return dict(self.engine.flags)

    def plane(self, flags: Mapping[str, Any]) -> tuple[Any, ...]:
        """The values of the space's bool and categorical flags in ``flags``: the config's
        plane, where a model is most often wrong in kind rather than degree (None for a flag
        ``flags`` lacks). The sweep's diverse top-k and the reality gap's refinement both
        group configs by it."""
        return tuple(flags.get(n) for n, p in self.params.items() if p.type in ("bool", "categorical"))

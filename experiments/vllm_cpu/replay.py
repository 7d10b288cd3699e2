"""Replay the measured table: answer a trial with one recorded run of its config (never the mean).

Every figure served here is a CPU measurement of a toy model (random weights) on vLLM's CPU build
(experiments/vllm_cpu/README.md), recorded by ``measure.py``: never a GPU figure, never simulated.

* :class:`Table`: the rows of ``results/runs.jsonl`` (or ``pilot.jsonl``, or any file in that format) of one
  landscape, grouped by config. A config is identified by its searched flags *as vLLM resolves them* (a flag
  left unset is vLLM's CPU default, :func:`autotune.engine.resolve_defaults`), so a study's explicit
  ``max_num_seqs: 128`` is the table's unset one. Only configs with at least ``min_runs`` recorded runs
  (independent server starts) are in the table.
* :class:`ReplayBackend`: a trial's config is looked up; one of its recorded runs is drawn (a seeded
  shuffle per config, so a config's repeats are different starts for as long as the table has them; a
  run served a second time says so in the result's warnings) and returned as a :class:`ReplayedResult`,
  whose ``metrics()`` are that run's recorded aggregates (what ``TrialResult.metrics()`` computed on the
  real engine). Aggregates the table did not record are NaN, never made up. A config not in the table is
  refused with :class:`NotInTable` (the study stops): nothing is invented for it.
* :class:`TableSampler`: an Optuna sampler in front of the strategy's own that makes every proposal one
  of the table's configs (the space's product is much larger than a space-filling design): ``random``
  draws a table config uniformly, ``grid`` visits the table in a seeded order, any other sampler's own
  proposal is moved to the nearest table config not measured yet in the study (L1 distance over the
  space's params, each scaled to [0, 1]; the nearest of all once every config is measured), which is
  then what the trial records, runs and learns from. Confirmation runs (enqueued) repeat measured
  configs as they would anywhere. For autotune (mode ``model``) the sweep ranks the table's configs
  (its candidate pool is the table) and its pick is taken as it is; a pick off the table (the sweep's
  fallback to the screened TPE) is moved to the nearest table config not measured yet.
* autotune's model of the deployment (screen, sweep, pruning; sim-best's nominal brute force over the
  table's configs, :func:`sim_best`) is the simulator's CPU host; autotune's study runs the space without
  its one unmodelled flag, ``load_format: dummy`` (:func:`model_space`), which reaches no engine here.

The reality-gap harness runs strategies against it (``--scenario vllm-cpu``, experiments/reality_gap/run.py):
its simulated-clock pool calls the backend in-process and advances its clock by the run's recorded
``gpu_time_s`` (on this build: the wall time the engine's CPU core was held, server start and benchmark).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from autotune.backends.base import TrialRequest
from autotune.engine import resolve_defaults
from autotune.metrics import LATENCY_SERIES, PERCENTILES, compute_metrics, percentile_name
from autotune.results import FailureClass, RequestRecord, RequestStatus, TrialResult, TrialStatus
from autotune.space import SearchSpace, load_space
from autotune.space.schema import ParamSpec
from autotune.study.search import Choice, WrappingSampler, as_choice
from autotune.study.trials.params import suggest_params
from experiments.scenarios import grids

HERE = Path(__file__).resolve().parent
SPACE = HERE / "space.yaml"
RUNS = HERE / "results" / "runs.jsonl"
PILOT = HERE / "results" / "pilot.jsonl"
MIN_RUNS = 3  # independent server starts a config needs to be in the table
NOTE = ("CPU measurements of a toy model (8-layer Qwen2, random weights) on vLLM's CPU build (vllm-cpu), "
        "replayed from experiments/vllm_cpu/results; not GPU figures, not simulated")

# The per-run aggregates measure.py records, by autotune's metric name (TrialResult.metrics()).
RECORDED_LATENCIES = ("p50_e2e_s", "p90_e2e_s", "p99_e2e_s", "mean_e2e_s", "p50_ttft_s", "p99_ttft_s",
                      "mean_ttft_s", "mean_tpot_s", "p99_tpot_s")
RECORDED_RATES = ("output_tok_per_s",)
SERVER_KEYS = ("prefix_cache_hit_rate", "kv_cache_usage_max")


class NotInTable(LookupError):
    """A trial asked for a config the table has no recorded run of."""


def _canon(v: Any) -> Any:
    """A value as a key: bools stay bools, whole numbers are ints, other numbers floats."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int | float):
        f = float(v)
        return int(f) if f.is_integer() else f
    return v


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path``; a line cut short (a killed writer) is skipped, as measure.py does."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


ROW_KEYS = ("landscape", "config", "start", "flags")  # what a recorded run needs to be replayed


def check_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """A ValueError naming the first row that is not a recorded run in measure.py's format."""
    for i, r in enumerate(rows, 1):
        missing = [k for k in ROW_KEYS if not isinstance(r, Mapping) or k not in r]
        if missing:
            raise ValueError(f"{path}: row {i} is not a recorded run of experiments/vllm_cpu/measure.py "
                             f"(it lacks {', '.join(missing)})")
        if not isinstance(r["flags"], Mapping):
            raise ValueError(f"{path}: row {i}: 'flags' must be a mapping of vLLM flags")


@dataclass(frozen=True)
class Config:
    """One measured config: its name in the table, its searched flags as recorded and as resolved, its runs."""

    name: str
    flags: dict[str, Any]  # as measure.py recorded them (unset = vLLM's default)
    params: dict[str, Any]  # every searched param at the value vLLM ran it with
    runs: tuple[dict[str, Any], ...]

    @property
    def served(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r.get("status") == "ok" and r.get("p99_e2e_s") is not None]

    def mean(self, metric: str) -> float:
        vals = [float(r[metric]) for r in self.served if r.get(metric) is not None]
        return statistics.fmean(vals) if vals else math.nan

    def interval(self, metric: str, level: float = 0.95) -> tuple[float, float]:
        """Student-t interval of the mean of ``metric`` over the served runs (NaN with fewer than 2)."""
        vals = [float(r[metric]) for r in self.served if r.get(metric) is not None]
        if len(vals) < 2:
            return math.nan, math.nan
        from scipy import stats

        m, sd = statistics.fmean(vals), statistics.stdev(vals)
        h = float(stats.t.ppf(0.5 + level / 2, len(vals) - 1)) * sd / math.sqrt(len(vals))
        return m - h, m + h

    def cv(self, metric: str = "p99_e2e_s") -> float:
        vals = [float(r[metric]) for r in self.served if r.get(metric) is not None]
        if len(vals) < 2:
            return math.nan
        return statistics.stdev(vals) / statistics.fmean(vals)

    @property
    def started(self) -> bool:
        """Every recorded start served (a config that sometimes fails to start is not one to deploy)."""
        return all(r.get("status") == "ok" for r in self.runs)

    @property
    def oom_per_1k(self) -> float:
        """Mean over all runs; a startup failure counts as 1000 (every request lost), as autotune counts it."""
        return statistics.fmean(float(r.get("oom_per_1k") or 0.0) if r.get("status") == "ok" else
                                (1000.0 if r.get("failure_class") == "startup_oom" else 0.0) for r in self.runs)


@dataclass
class Table:
    """The measured configs of one landscape, keyed by their resolved searched params."""

    path: Path
    space: SearchSpace
    landscape: str
    configs: dict[tuple, Config]
    skipped: dict[str, int] = field(default_factory=dict)  # config -> runs, with fewer than min_runs

    @classmethod
    def load(cls, path: Path = RUNS, space: SearchSpace | None = None, landscape: str | None = None,
             min_runs: int = MIN_RUNS, starts: Collection[int] | None = None) -> Table:
        """The table of ``path``: rows of ``landscape`` (default: the landscape most rows have), configs with
        at least ``min_runs`` runs; with ``starts``, only the runs of those server starts (rounds)."""
        space = space if space is not None else load_space(SPACE)
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such runs file (experiments/vllm_cpu/measure.py writes one)")
        rows = read_rows(path)
        if not rows:
            raise ValueError(f"{path}: no recorded runs")
        check_rows(path, rows)
        if starts is not None:
            rows = [r for r in rows if r["start"] in starts]
        if landscape is None:
            counts: dict[str, int] = {}
            for r in rows:
                counts[r["landscape"]] = counts.get(r["landscape"], 0) + 1
            landscape = max(counts, key=lambda k: (counts[k], k))
        rows = [r for r in rows if r.get("landscape") == landscape]
        by: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by.setdefault(r["config"], []).append(r)
        configs: dict[tuple, Config] = {}
        skipped: dict[str, int] = {}
        for name, rs in by.items():
            rs = sorted(rs, key=lambda r: r["start"])
            if len({r["start"] for r in rs}) < min_runs:
                skipped[name] = len(rs)
                continue
            try:
                params = resolve_params(space, rs[0]["flags"])
            except (TypeError, ValueError, KeyError) as e:
                raise ValueError(f"{path}: config {name}'s flags are not the space's ({type(e).__name__}: {e})") from None
            outside = [f"{k}={v!r}" for k, v in params.items() if not admits(k, space.params[k], v)]
            if outside:
                raise ValueError(f"{path}: config {name} runs {', '.join(outside)}, outside the replay's space "
                                 f"({SPACE.name}); a table must measure that space's values")
            key = params_key(params)
            if key in configs:
                raise ValueError(f"{path}: configs {configs[key].name} and {name} run the same flags")
            configs[key] = Config(name, dict(rs[0]["flags"]), params, tuple(rs))
        return cls(Path(path), space, landscape, configs, skipped)

    def __len__(self) -> int:
        return len(self.configs)

    @property
    def runs(self) -> int:
        return sum(len(c.runs) for c in self.configs.values())

    def key(self, flags: Mapping[str, Any]) -> tuple:
        return params_key(resolve_params(self.space, flags))

    def lookup(self, flags: Mapping[str, Any]) -> Config:
        """The measured config ``flags`` run as; :class:`NotInTable` when the table has none."""
        c = self.configs.get(self.key(flags))
        if c is None:
            raise NotInTable(f"config {resolve_params(self.space, flags)} is not in the measured table {self.path} "
                             f"(landscape {self.landscape}, {len(self)} configs): the replay has no recorded run of "
                             "it and answers nothing")
        return c

    def by_name(self, name: str) -> Config:
        for c in self.configs.values():
            if c.name == name:
                return c
        raise KeyError(name)


def resolve_params(space: SearchSpace, flags: Mapping[str, Any]) -> dict[str, Any]:
    """The space's searched params of a config as vLLM's CPU build resolves them (an unset flag: its default)."""
    full = resolve_defaults({**space.fixed_flags(), **{k: v for k, v in flags.items() if v is not None}},
                            space.engine.gpu, None)
    return {k: _canon(full.get(k)) for k in space.params}


def admits(name: str, spec: ParamSpec, value: Any) -> bool:
    """Whether ``value`` is one the param ``spec`` can take (a conditional param may be unset)."""
    if value is None:
        return spec.when is not None
    return grids.value_problem(name, spec, value) is None


def params_key(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, _canon(v)) for k, v in params.items()))


# -- the backend -------------------------------------------------------------------------------

@dataclass
class ReplayedResult(TrialResult):
    """A recorded run as a trial result: ``metrics()`` are the run's recorded aggregates.

    The per-request records carry each request's status only (how many succeeded, lost to an OOM, failed
    otherwise: the recorded counts); their latencies were not recorded, so every latency aggregate comes
    from ``recorded`` and one the table does not hold is NaN."""

    recorded: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        m = compute_metrics(self)
        for series in LATENCY_SERIES:
            for q in PERCENTILES:
                m[percentile_name(series, q)] = math.nan
            m[f"mean_{series}_s"] = math.nan
        m.update(self.recorded)
        return m


def _f(row: Mapping[str, Any], key: str, default: float = math.nan) -> float:
    v = row.get(key)
    return default if v is None else float(v)


def replayed_result(row: Mapping[str, Any], config: str) -> ReplayedResult:
    """One recorded run (a line of runs.jsonl) as the TrialResult autotune's loop reads."""
    ok = row.get("status") == "ok"
    requests = int(_f(row, "requests", 0.0))
    failure = FailureClass(row.get("failure_class") or "none")
    if ok:
        n_ok = int(_f(row, "requests_ok", 0.0))
        n_oom = int(round(_f(row, "oom_per_1k", 0.0) * requests / 1000.0))
        n_err = int(round(_f(row, "error_per_1k", 0.0) * requests / 1000.0))
    else:
        n_ok, n_oom, n_err = 0, requests if failure == FailureClass.STARTUP_OOM else 0, 0
        n_err = requests - n_oom
    statuses = ([RequestStatus.OK] * n_ok + [RequestStatus.OOM] * n_oom + [RequestStatus.ERROR] * n_err)
    statuses += [RequestStatus.NOT_RUN] * max(requests - len(statuses), 0)
    records = [RequestRecord(i, 0.0, None, None, 0, 0, s) for i, s in enumerate(statuses)]
    recorded = {k: float(row[k]) for k in (*RECORDED_LATENCIES, *RECORDED_RATES) if ok and row.get(k) is not None}
    server = {k: float(row[k]) for k in SERVER_KEYS if row.get(k) is not None}
    return ReplayedResult(
        status=TrialStatus.OK if ok else TrialStatus.STARTUP_FAILED, backend="replay", records=records,
        failure_class=failure, failure_reason=str(row.get("failure_reason") or ""),
        failure_evidence=list(row.get("failure_evidence") or []), requests_issued=requests,
        kv_cache_tokens=int(_f(row, "kv_cache_tokens", 0.0)), crashes=int(_f(row, "crashes", 0.0)),
        preemptions=int(_f(row, "preemptions", 0.0)), startup_s=_f(row, "startup_s", 0.0),
        duration_s=_f(row, "duration_s", 0.0), gpu_time_s=_f(row, "gpu_time_s", 0.0), gpus=1,
        server_metrics=server,
        extra={"replay": {"config": config, "start": row.get("start"), "started_utc": row.get("started_utc"),
                          "note": NOTE}},
        recorded=recorded,
    )


class ReplayBackend:
    """Answers each trial with one recorded run of its config (module docstring); ``seed`` seeds the draws.

    The harness's pool calls :meth:`run_on_worker`; the run's place and time do not change a recorded run.
    The early-stop rule a request carries is not applied: every recorded run is a whole benchmark."""

    name = "replay"

    def __init__(self, table: Table, seed: int) -> None:
        self.table, self.seed = table, seed
        self._order: dict[str, list[int]] = {}
        self._served: dict[str, int] = {}
        self.log: list[tuple[int, str, int]] = []  # (trial number, config, start) of every answer

    def draw(self, config: Config) -> tuple[dict[str, Any], bool]:
        """The next run of ``config`` (a seeded permutation of its runs), and whether it was served before."""
        if config.name not in self._order:
            order = list(range(len(config.runs)))
            random.Random(f"vllm-cpu-replay/{self.seed}/{config.name}").shuffle(order)
            self._order[config.name] = order
        k = self._served.get(config.name, 0)
        self._served[config.name] = k + 1
        order = self._order[config.name]
        return config.runs[order[k % len(order)]], k >= len(order)

    def run_trial(self, request: TrialRequest) -> ReplayedResult:
        config = self.table.lookup(request.flags)  # NotInTable: refused, nothing is made up
        row, reused = self.draw(config)
        res = replayed_result(row, config.name)
        if reused:
            res.warnings.append(f"replay: run {row['start']} of {config.name} served again (the table holds "
                                f"{len(config.runs)} runs of it): not an independent measurement")
        self.log.append((request.trial_number, config.name, int(row["start"])))
        return res

    def reused(self) -> int:
        """Answers that served a run already served (more trials of a config than it has runs)."""
        return sum(max(n - len(self.table.by_name(name).runs), 0) for name, n in self._served.items())

    def run_on_worker(self, request: TrialRequest, worker: int, now_s: float) -> ReplayedResult:
        return self.run_trial(request)

    def close(self) -> None:
        pass


# -- proposals restricted to the table ---------------------------------------------------------

class _Draw:
    """Optuna's suggest API answered by ``sampler.sample_independent``: the strategy's own proposal."""

    def __init__(self, sampler: optuna.samplers.BaseSampler, study: optuna.Study, trial: FrozenTrial) -> None:
        self.sampler, self.study, self.trial = sampler, study, trial

    def suggest_float(self, name: str, low: float, high: float, *, step: float | None = None,
                      log: bool = False) -> float:
        return self.sampler.sample_independent(self.study, self.trial, name,
                                               FloatDistribution(low, high, step=step, log=log))

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        return self.sampler.sample_independent(self.study, self.trial, name, IntDistribution(low, high, step=step,
                                                                                             log=log))

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self.sampler.sample_independent(self.study, self.trial, name, CategoricalDistribution(list(choices)))


def _position(p: ParamSpec, v: Any) -> float:
    """``v``'s place in param ``p``'s domain, in [0, 1]."""
    if p.type == "bool":
        return 1.0 if v else 0.0
    if p.type == "categorical":
        choices = [_canon(c) for c in p.choices or []]
        return choices.index(_canon(v)) / max(len(choices) - 1, 1) if _canon(v) in choices else 0.5
    lo, hi, x = float(p.low), float(p.high), float(v)  # type: ignore[arg-type]
    if p.log:
        lo, hi, x = math.log(lo), math.log(hi), math.log(max(x, 1e-12))
    return (x - lo) / (hi - lo) if hi > lo else 0.0


MODES = ("random", "grid", "nearest", "model")


class TableSampler(WrappingSampler):
    """Every sampled trial is one of the table's configs (module docstring). Enqueued trials (confirmation
    runs repeat a measured config) are left as enqueued; the backend refuses one that is not in the table.
    An enqueued trial that leaves a param to the sampler (autotune's warm start: vLLM has no default
    ``kv_cache_memory_bytes``) gets the value of the table config that agrees with every enqueued value and
    lies nearest the middle of the params left open (the table's "vLLM defaults" are at the middle KV budget).

    Mode ``model`` (autotune and its ablations): the strategy's own relative sample is taken as it is when it
    is a table config (the sweep ranks the table's configs: :func:`table_pool`); anything else (the sweep's
    fallback, the screen's pick among TPE's draws) is moved to the nearest table config not measured yet, as
    ``nearest`` moves TPE's proposals."""

    def __init__(self, base: optuna.samplers.BaseSampler, table: Table, mode: str, seed: int) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: use one of {', '.join(MODES)}")
        self.base, self.table, self.mode, self.seed = base, table, mode, seed
        self.space = table.space
        self._configs = list(table.configs.values())
        self._grid = list(range(len(self._configs)))
        random.Random(f"vllm-cpu-grid/{seed}").shuffle(self._grid)
        self._chosen: dict[int, Choice] = {}
        self._filled: dict[int, Config] = {}
        self.snapped = 0  # model mode: proposals that were not table configs and were moved to one

    def _nearest_fresh(self, study: optuna.Study, trial: FrozenTrial, proposal: Mapping[str, Any]) -> Config:
        done = {params_key(t.params) for t in study.get_trials(deepcopy=False) if t.number != trial.number
                and t.params}
        at = {n: _position(self.space.params[n], v) for n, v in proposal.items() if n in self.space.params}
        # The nearest config not measured yet (a sampler on the space's continuum almost never repeats a
        # config exactly; snapping must not turn its new proposals into repeats); all measured: the nearest.
        fresh = [c for c in self._configs if params_key(c.params) not in done] or self._configs
        return min(fresh, key=lambda c: sum(abs(_position(self.space.params[n], c.params[n]) - x)
                                            for n, x in at.items()))

    def _model_choice(self, study: optuna.Study, trial: FrozenTrial) -> Config:
        """The strategy's own relative sample, as a table config (class docstring)."""
        dists = self.base.infer_relative_search_space(study, trial)
        proposal = dict(self.base.sample_relative(study, trial, dists)) if dists else {}
        if set(proposal) >= set(self.space.params):
            c = self.table.configs.get(params_key({n: proposal[n] for n in self.space.params}))
            if c is not None:
                return c
        self.snapped += 1
        if not proposal:  # nothing relative: the strategy's own independent draws
            proposal = suggest_params(_Draw(self.base, study, trial), self.space)  # type: ignore[arg-type]
        return self._nearest_fresh(study, trial, proposal)

    def _choose(self, study: optuna.Study, trial: FrozenTrial) -> Config:
        if self.mode == "model":
            return self._model_choice(study, trial)
        if self.mode == "random":
            return random.Random(f"vllm-cpu-random/{self.seed}/{trial.number}").choice(self._configs)
        done = {params_key(t.params) for t in study.get_trials(deepcopy=False) if t.number != trial.number
                and t.params}
        if self.mode == "grid":
            left = [i for i in self._grid if params_key(self._configs[i].params) not in done]
            return self._configs[left[0] if left else self._grid[trial.number % len(self._grid)]]
        proposal = suggest_params(_Draw(self.base, study, trial), self.space)  # type: ignore[arg-type]
        return self._nearest_fresh(study, trial, proposal)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if trial.system_attrs.get("fixed_params"):  # enqueued: it measures a given config
            return {}
        choice = as_choice(self.space, self._choose(study, trial).params)
        self._chosen[trial.number] = choice
        return choice.distributions

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        chosen = self._chosen.pop(trial.number, None)
        return dict(chosen.params) if chosen is not None and search_space else {}

    def _fill(self, trial: FrozenTrial) -> Config | None:
        """The table config an enqueued trial that leaves params open measures (class docstring)."""
        if trial.number not in self._filled:
            given = {k: _canon(v) for k, v in trial.system_attrs["fixed_params"].items() if k in self.space.params}
            match = [c for c in self._configs if all(_canon(c.params[k]) == v for k, v in given.items())]
            if not match:
                return None
            open_ = [n for n in self.space.params if n not in given]
            self._filled[trial.number] = min(match, key=lambda c: (sum(
                abs(_position(self.space.params[n], c.params[n]) - 0.5) for n in open_), c.name))
        return self._filled[trial.number]

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        if trial.system_attrs.get("fixed_params"):
            c = self._fill(trial)
            if c is not None:
                return c.params[param_name]
        raise NotInTable(f"trial {trial.number} asked for {param_name} outside the table's configs: the replay "
                         "proposes table configs only")


# -- the reality-gap scenario ------------------------------------------------------------------

SCENARIOS = {"vllm-cpu": RUNS, "vllm-cpu-pilot": PILOT, "vllm-cpu-quiet": RUNS}
# The server starts (rounds) of results/runs.jsonl each scenario replays. vllm-cpu: the four rounds measured
# 2026-12-02/03, the table every committed vllm-cpu figure was computed on. vllm-cpu-quiet: the starts made on a
# quiet machine. Starts 0-2 ran while other agents' test suites shared the 2 cores, and in round 2 the VM's
# host slowed whole runs about 2x (experiments/vllm_cpu/README.md, "Speed, not structure"); start 3 ran the next
# morning on a quiet machine, and starts 4 and 5 on 2026-12-04 with no other agent on it. Chosen by when and how
# each round ran, declared before the quiet rounds' results were read against any model or search: never by a
# run's own value.
SCENARIO_STARTS: dict[str, tuple[int, ...]] = {"vllm-cpu": (0, 1, 2, 3), "vllm-cpu-quiet": (3, 4, 5)}
FAMILY = "measured-vllm-cpu"  # the JSON's truth_family: measured, not a simulator family
OOM_LIMIT = 1.0  # per 1000 requests, the export rule's (experiments/reality_gap/truth.py)
WITHIN = 0.02
# GPU-only procedures: refused here, with the reason.
REFUSED = {
    "auto-tune-sh": "vLLM's auto_tune.sh probes gpu_memory_utilization from 0.98 down with max_num_seqs 256 and "
                    "keeps the highest that starts: on the CPU build the KV cache is kv_cache_memory_bytes (the table "
                    "searches it; an explicit size makes gpu_memory_utilization size nothing), max_num_seqs 256 is "
                    "outside the space and none of its configs is in the table, so the procedure has nothing to "
                    "probe or measure here",
}
ABLATION_NAMES = ("autotune-nosweep", "autotune-noscreen", "autotune-nolearn", "autotune-nominal",
                  "autotune-noconfirm")
STRATEGY_MODES = {"random": "random", "tpe": "nearest", "tpe-confirm": "nearest", "grid": "grid",
                  "autotune": "model", **{a: "model" for a in ABLATION_NAMES},
                  # the ceilings: every table config in the grid's order, then confirmation
                  "grid-all": "grid", "grid-all-race24": "grid"}
RUNNABLE = (*STRATEGY_MODES, "sim-best")
# The one flag of the table's space the simulator does not model: --load-format dummy initialises the same
# weights at random (same shapes, memory and arithmetic; only the load differs, and the CPU host's startup
# constants are calibrated on these dummy-load startups). autotune's studies (and so its model: screen, sweep,
# pruning) and sim-best's nominal brute force run the space without it (:func:`model_space`); a replayed trial
# never reaches an engine, so the flag changes no answer.
MODEL_IGNORES = ("load_format",)


def is_replay(scenario: str) -> bool:
    """A named replay scenario, or the path of a runs file in measure.py's format (``*.jsonl``)."""
    return scenario in SCENARIOS or scenario.endswith(".jsonl")


def table_for(scenario: str, min_runs: int | None = None) -> Table:
    """The scenario's table: ``vllm-cpu`` is results/runs.jsonl's first four rounds (the full table as
    measured 2026-12-02/03) once it holds at least two configs with all their starts, else the pilot
    (results/pilot.jsonl), which the JSON then names; ``vllm-cpu-quiet`` is the same file's quiet-machine
    rounds (:data:`SCENARIO_STARTS`); a ``*.jsonl`` path is that file, every start. ``min_runs``: the starts
    a config needs to be in the table (default :data:`MIN_RUNS`; 1 admits the full table's configs measured
    once while its later rounds run)."""
    n = MIN_RUNS if min_runs is None else min_runs
    if scenario not in SCENARIOS:
        return Table.load(Path(scenario), min_runs=n)
    path, starts = SCENARIOS[scenario], SCENARIO_STARTS.get(scenario)
    if scenario == "vllm-cpu-pilot":
        return Table.load(path)
    try:
        t = Table.load(path, min_runs=n, starts=starts)
        if len(t) >= 2:
            return t
    except (OSError, ValueError):
        if scenario != "vllm-cpu":
            raise
    # vllm-cpu falls back to the pilot while the full table is measured, never for an explicit --min-runs:
    # the pilot, measured with its own starts, would not be what was asked.
    if scenario != "vllm-cpu" or min_runs is not None:
        raise ValueError(f"fewer than 2 configs of {path.name} have {n} recorded starts among starts {starts} "
                         f"({scenario}); lower --min-runs (the table's configs have {max_starts(path)} at most), "
                         "or measure them (experiments/vllm_cpu/measure.py)")
    return Table.load(PILOT)


def max_starts(path: Path) -> int:
    """The most distinct server starts any config of the runs file ``path`` has (0 without one)."""
    starts: dict[str, set] = {}
    for r in read_rows(path) if Path(path).is_file() else []:
        if isinstance(r, Mapping) and "config" in r:
            starts.setdefault(str(r["config"]), set()).add(r.get("start"))
    return max((len(v) for v in starts.values()), default=0)


def strategy_problem(strategy: str) -> str | None:
    """Why ``strategy`` cannot run against the replay (None: it can)."""
    if strategy in RUNNABLE:
        return None
    if strategy in REFUSED:
        return REFUSED[strategy]
    return f"unknown strategy {strategy!r}"


_MODEL_DIR: list[Path] = []


def model_space(space: SearchSpace) -> SearchSpace:
    """The space as autotune's model of the deployment sees it: the model directory made absolute (without the
    built model, a fresh clone, a directory holding model.py's config.json alone: what the simulator reads) and
    :data:`MODEL_IGNORES` left out of the engine flags."""
    import tempfile

    from experiments.vllm_cpu import model as model_mod

    path = Path(space.engine.model)
    path = path if path.is_absolute() else HERE.parents[1] / path
    if not (path / "config.json").is_file():
        if not _MODEL_DIR:
            d = Path(tempfile.mkdtemp(prefix="vllm-cpu-model-"))
            (d / "config.json").write_text(json.dumps({**model_mod.CONFIG, "vocab_size": model_mod.VOCAB_SIZE}))
            _MODEL_DIR.append(d)
        path = _MODEL_DIR[0]
    flags = {k: v for k, v in space.engine.flags.items() if k not in MODEL_IGNORES}
    return space.model_copy(update={"engine": space.engine.model_copy(update={"model": str(path), "flags": flags})})


def table_pool(table: Table) -> list[dict[str, Any]]:
    """The table's configs as the sweep's candidate pool (searched params only), in name order."""
    return [dict(c.params) for c in sorted(table.configs.values(), key=lambda c: c.name)]


_SIM_BEST: dict[tuple, tuple[Config, dict[str, float]]] = {}


def sim_best(table: Table) -> tuple[Config, dict[str, float]]:
    """The nominal simulator's best config among the table's (autotune's model profile, noise off, the space's
    whole benchmark; ranked as the screen ranks: predicted to start and meet the constraints, the OOM limit,
    then the main objective), with its prediction. Cached per table."""
    from autotune.calibrate.model import simulate
    from autotune.study.search.screening import score

    key = (str(table.path), table.landscape, tuple(sorted(table.configs)))
    if key not in _SIM_BEST:
        space = model_space(table.space)
        profile = space.study.strategy.base_profile
        preds = [(c, simulate(space, {**space.fixed_flags(), **c.params}, profile))
                 for c in sorted(table.configs.values(), key=lambda c: c.name)]
        ranked = [(score(m, space), c.name, c, m) for c, m in preds if m]
        if not ranked:
            raise ValueError(f"{table.path}: the nominal simulator predicts no table config to start")
        _, _, c, m = min(ranked, key=lambda r: (r[0], r[1]))
        _SIM_BEST[key] = (c, m)
    return _SIM_BEST[key]


@dataclass
class _Draw0:
    mechanisms: tuple[str, ...] = ()


def welch_greater_p(x: Sequence[float], y: Sequence[float]) -> float | None:
    """One-sided Welch t-test p-value that ``x``'s mean exceeds ``y``'s (None without two runs of each:
    no spread, no test)."""
    if len(x) < 2 or len(y) < 2:
        return None
    from scipy import stats

    return float(stats.ttest_ind(x, y, equal_var=False, alternative="greater").pvalue)


@dataclass
class ReplayTruth:
    """The truth of the replay scenario: the table. A config's true value is the mean of its recorded runs
    (with a 95 % interval); the best is the config with the lowest mean p99 within the OOM limit whose every
    start served. The same attributes as experiments.reality_gap.truth.Truth, so the harness scores it alike."""

    scenario: str
    seed: int  # seeds the draws of recorded runs
    table: Table
    brute_force_s: float = 0.0
    draw: _Draw0 = field(default_factory=_Draw0)
    note: str = NOTE
    hours_note: str = ("gpu_hours* fields are hours of one CPU core held by the engine on vLLM's CPU build (server "
                       "start + benchmark wall time, as recorded), not GPU hours")
    main: str = "p99_e2e_s"
    maximize: bool = False
    family: str = FAMILY

    @classmethod
    def load(cls, scenario: str, seed: int, min_runs: int | None = None) -> ReplayTruth:
        return cls(scenario, seed, table_for(scenario, min_runs))

    @property
    def space(self) -> SearchSpace:
        return self.table.space

    @property
    def name(self) -> str:
        return self.scenario

    def backend(self) -> ReplayBackend:
        return ReplayBackend(self.table, self.seed)

    def gpus(self, bench: Any = None) -> int:
        return 1  # one CPU core runs the engine (space.yaml: cpus_per_worker 1, measure.py pins it)

    def params(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        return resolve_params(self.space, flags)

    def row(self, c: Config) -> dict[str, Any]:
        lo, hi = c.interval(self.main)
        return {"config": c.name, **c.params, self.main: c.mean(self.main), "p99_e2e_s": c.mean("p99_e2e_s"),
                "oom_per_1k": c.oom_per_1k, "started": c.started, "gpu_time_s": statistics.fmean(
                    _f(r, "gpu_time_s", 0.0) for r in c.runs), "runs": len(c.runs), "served_runs": len(c.served),
                "interval_95": [lo, hi], "cv": c.cv(self.main)}

    def value(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """The config's row: NotInTable when it was not measured (no value is made up)."""
        return self.row(self.table.lookup(flags))

    @property
    def best(self) -> dict[str, Any]:
        rows = [self.row(c) for c in self.table.configs.values()]
        ok = [r for r in rows if r["started"] and r["oom_per_1k"] <= OOM_LIMIT and not math.isnan(r[self.main])]
        if not ok:
            raise ValueError(f"{self.table.path}: no config serves within the OOM limit in every start")
        return min(ok, key=lambda r: (r[self.main], r["config"]))

    def regret(self, row: Mapping[str, Any]) -> float:
        v, b = float(row[self.main]), float(self.best[self.main])
        return math.nan if math.isnan(v) else v / b - 1.0

    def within(self, row: Mapping[str, Any]) -> bool:
        r = self.regret(row)
        return bool(row["started"]) and float(row["oom_per_1k"]) <= OOM_LIMIT and not math.isnan(r) and r <= WITHIN

    def worse(self, flags: Mapping[str, Any], than: Mapping[str, Any], level: float = 0.05) -> bool | None:
        """Whether the config of ``flags`` is worse than that of ``than`` beyond the noise (:meth:`_worse`)."""
        return self._worse(self.table.lookup(flags), self.table.lookup(than), level)

    def _worse(self, c: Config, o: Config, level: float = 0.05) -> bool | None:
        """A one-sided Welch t-test of the two configs' runs' main metric at ``level`` (False for the same
        config; None when either has fewer than 2 served runs: no spread, no test)."""
        if c.name == o.name:
            return False
        x, y = ([float(r[self.main]) for r in k.served if r.get(self.main) is not None] for k in (c, o))
        p = welch_greater_p(y, x) if self.maximize else welch_greater_p(x, y)
        return None if p is None else p < level

    def tied(self, flags: Mapping[str, Any], level: float = 0.05) -> bool | None:
        """Whether the config of ``flags`` is statistically tied with the best: it serves within the OOM limit
        in every start and is not worse than the best (:meth:`_worse`). A mean inside the best's own 95 %
        interval is no such test: at this table's run-to-run CV (30-40 %) the interval of 3 runs reaches 60-90 %
        above the best, and every config would be "tied"."""
        c = self.table.lookup(flags)
        row = self.row(c)
        if not row["started"] or float(row["oom_per_1k"]) > OOM_LIMIT:
            return False
        w = self._worse(c, self.table.by_name(self.best["config"]), level)
        return None if w is None else not w

    def starts(self, flags: Mapping[str, Any]) -> bool:
        return bool(self.value(flags)["started"])

    def describe(self) -> dict[str, Any]:
        """What the JSON adds for this scenario: the table and the best with its interval."""
        b = self.best
        return {"table": str(self.table.path.relative_to(HERE.parents[1]) if self.table.path.is_relative_to(
            HERE.parents[1]) else self.table.path), "table_landscape": self.table.landscape,
            "table_configs": len(self.table), "table_runs": self.table.runs,
            "table_starts": sorted({r["start"] for c in self.table.configs.values() for r in c.runs}),
            "table_configs_skipped": self.table.skipped, "true_best_config": b["config"],
            "true_best_interval_95": b["interval_95"], "true_best_runs": b["served_runs"],
            "hours_note": self.hours_note}


def sweep_of(sampler: optuna.samplers.BaseSampler) -> Any:
    """The SweepSampler in a chain of wrapping samplers (``.base``), or None."""
    from autotune.study.search import SweepSampler

    s: Any = sampler
    while s is not None:
        if isinstance(s, SweepSampler):
            return s
        s = getattr(s, "base", None)
    return None


def sampler_wrapper(table: Table, strategy: str, seed: int):
    """The wrap the harness puts around the strategy's sampler: proposals are table configs. For autotune
    (mode ``model``) the sweep's candidate pool becomes the table's configs first."""
    mode = STRATEGY_MODES[strategy]

    def wrap(base: optuna.samplers.BaseSampler) -> TableSampler:
        sweep = sweep_of(base)
        if mode == "model" and sweep is not None:
            sweep.pool = table_pool(table)
        return TableSampler(base, table, mode, seed)

    return wrap

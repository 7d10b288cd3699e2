"""Issue 18's pieces of the reality-gap benchmark: the structural truth family and its seeds,
the baselines a user tries first (sim-best, auto-tune-sh, tpe-confirm), the regret area,
and ``--scenario`` given as a space file. Everything is SIMULATED.

Fast cases only: a tiny space written here (its brute force takes seconds) and a fake
backend for the auto_tune.sh procedure's probe order.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.results import FailureClass, startup_failure
from autotune.sim.quirks import NONE
from autotune.space import load_space
from experiments.reality_gap import auto_tune_sh, families, seeds
from experiments.reality_gap import score as S
from experiments.reality_gap import truth as T
from experiments.reality_gap.run import run_case
from experiments.reality_gap.strategies import AUTO_TUNE_GMU, BASELINES, variant
from experiments.scenarios.ground_truth import scenario_name, space_path

REPO = Path(__file__).resolve().parents[2]

TINY = """\
version: 1
engine:
  backend: sim
  model: Qwen/Qwen2.5-7B-Instruct
  gpu: L40S
  flags: {max_model_len: 8192, dtype: bfloat16}
params:
  gpu_memory_utilization: {type: float, low: 0.88, high: 0.92, step: 0.04}
  max_num_seqs: {type: categorical, choices: [64, 256]}
  max_num_batched_tokens: {type: categorical, choices: [512, 2048]}
workload:
  num_requests: 120
  concurrency: 64
  prompt_len: {dist: lognormal, mean: 400, sigma: 0.6, min: 16, max: 2000}
  output_len: {dist: lognormal, mean: 100, sigma: 0.5, min: 8, max: 400}
  seed: 0
objectives:
  - {metric: oom_per_1k, direction: minimize}
  - {metric: p99_e2e_s, direction: minimize}
study: {name: tiny, trials: 8, seed: 0}
cluster: {gpus_per_worker: 1}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("spaces") / "tiny-gap.yaml"
    path.write_text(TINY)
    return str(path)


# --- the truth family and its seeds ------------------------------------------------------------

def test_structural_truths_are_drawn_per_scenario_and_deterministic():
    base = load_space(space_path("small-highconc")).engine.profile
    a = families.draw(base, "structural", "small-highconc", 1000)
    assert a == families.draw(base, "structural", "small-highconc", 1000)
    assert a.quirks.active and a.mechanisms and "smooth_field" in a.mechanisms
    other = families.draw(base, "structural", "bursty-goodput", 1000)
    assert other.quirks != a.quirks and other.profile != a.profile  # the scenario's name enters the seed
    # issue 12's family is kept as it was: the perturbed constants alone
    c = families.draw(base, "constants", "small-highconc", 3)
    assert c.profile == base.perturbed(3) and c.quirks == NONE and c.node_sigma == 0


def test_dev_and_eval_seeds_are_declared_apart():
    assert not set(seeds.DEV_TRUTH_SEEDS) & set(seeds.EVAL_TRUTH_SEEDS)
    assert len(seeds.EVAL_TRUTH_SEEDS) >= 10 and len(seeds.STUDY_SEEDS) >= 3
    assert seeds.kind(0) == "dev" and seeds.kind(seeds.EVAL_TRUTH_SEEDS[0]) == "eval" and seeds.kind(-7) == "other"


def test_the_truth_backend_gives_each_node_its_own_persistent_speed():
    base = load_space(space_path("small-highconc")).engine.profile
    b = families.TruthBackend(families.draw(base, "structural", "small-highconc", 1001))
    speeds = {w: b.node_speed(w, 0.0) for w in range(4)}
    assert len(set(speeds.values())) == 4
    assert b.node_speed(2, 0.0) == speeds[2]  # persistent
    assert b.node_speed(2, 36000.0) != speeds[2]  # and drifting with the study's clock


# --- scoring ------------------------------------------------------------------------------------

def test_regret_area_is_normalised_by_the_budget():
    assert S.regret_auc([], 2.0) == pytest.approx(1.0)  # nothing exported: regret 100 % throughout
    assert S.regret_auc([(0.0, 0.0)], 2.0) == pytest.approx(0.0)
    # 100 % until 1 GPU-h, then 10 % to the end of a 2 GPU-h budget.
    assert S.regret_auc([(1.0, 0.1)], 2.0) == pytest.approx(0.55)
    # a study that overruns the budget is cut at it
    assert S.regret_auc([(1.0, 0.1), (3.0, 0.0)], 2.0) == pytest.approx(0.55)


# --- the baselines --------------------------------------------------------------------------------

def test_auto_tune_sh_probes_gmu_down_one_start_at_a_time_then_benchmarks_its_lists():
    """A fake backend (the test says so): every start above gmu 0.95 fails; the procedure
    must probe 0.98, 0.97, 0.96 one by one, start at 0.95, then run the other 7 combinations."""
    from autotune.backends.sim import SimBackend

    sp = variant(load_space(space_path("small-highconc")), "auto-tune-sh")
    sp = sp.model_copy(update={"workload": sp.workload.model_copy(update={"num_requests": 60})})

    class Fussy(SimBackend):
        def run_trial(self, request):
            if request.flags["gpu_memory_utilization"] > 0.95:
                return startup_failure("sim", FailureClass.STARTUP_OOM, "no room", [], 60)
            return super().run_trial(request)

    study, pool = auto_tune_sh.run(sp, Fussy(), seed=0, workers=4)
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    gmus = [t.params["gpu_memory_utilization"] for t in trials]
    assert gmus[:4] == AUTO_TUNE_GMU[:4] == [0.98, 0.97, 0.96, 0.95]
    assert set(gmus[4:]) == {0.95} and len(trials) == 4 + 7
    probes = sorted(pool.log, key=lambda d: d.order)[:4]
    assert all(a.end_s <= b.start_s for a, b in zip(probes, probes[1:], strict=False))  # one at a time
    combos = {(t.params["max_num_seqs"], t.params["max_num_batched_tokens"]) for t in trials[3:]}
    assert len(combos) == 8  # every combination of its lists, the starting probe included


def test_every_baseline_runs_on_a_space_given_by_path(tiny):
    out = {s: run_case(tiny, 0, s, jobs=1) for s in ("sim-best", "tpe-confirm")}
    sb, tc = out["sim-best"], out["tpe-confirm"]
    assert sb["launched"] == 1 and sb["truth_family"] == "structural" and sb["scenario"].startswith("tiny-gap-")
    nominal_best = json.loads(next(REPO.glob("runs/ground_truth/tiny-gap-*/target.json")).read_text())["target"]
    assert {k: nominal_best[k] for k in sb["exported_flags"]} == sb["exported_flags"]  # the model's own best
    assert tc["confirmation_runs"] > 0 and tc["launched"] == 8
    for o in out.values():
        assert 0.0 <= o["regret_auc"] <= 1.0 and o["budget_gpu_hours"] > 0
        assert "SIMULATED" in o["note"] and set(BASELINES) >= {o["strategy"]}


def test_the_cli_takes_a_path_and_refuses_a_missing_one(tiny):
    args = [sys.executable, "-m", "experiments.reality_gap.run", "--truth-seed", "0", "--strategy", "sim-best", "--json"]
    ok = subprocess.run([*args, "--scenario", tiny], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr
    row = json.loads(ok.stdout)
    for key in ("gpu_hours_to_2pct_stable", "regret_auc", "truth_family", "study_seed", "exported_flags"):
        assert key in row
    bad = subprocess.run([*args, "--scenario", "/no/such/space.yaml"], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    assert not math.isnan(yaml.safe_load(Path(tiny).read_text())["study"]["trials"])


def test_a_space_by_path_is_named_by_its_landscape_not_its_bytes(tmp_path):
    """A path scenario's name seeds its truths: a comment (a header's run command) or another
    folder keeps the name and so the truths; a changed param range makes a new scenario."""
    first = tmp_path / "a" / "tiny-name.yaml"
    first.parent.mkdir()
    first.write_text(TINY)
    moved = tmp_path / "b" / "tiny-name.yaml"
    moved.parent.mkdir()
    moved.write_text("# run: .venv/bin/python -m experiments.reality_gap.run --scenario tiny-name.yaml\n" + TINY)
    changed = tmp_path / "c" / "tiny-name.yaml"
    changed.parent.mkdir()
    changed.write_text(TINY.replace("choices: [64, 256]", "choices: [64, 128]"))
    name = scenario_name(str(first))
    assert name.startswith("tiny-name-") and name == scenario_name(str(moved))
    assert scenario_name(str(changed)) != name
    base = load_space(first).engine.profile
    assert families.draw(base, "structural", name, 0) == families.draw(base, "structural", scenario_name(str(moved)), 0)
    broken = tmp_path / "tiny-broken.yaml"
    broken.write_text("params: [")
    assert scenario_name(str(broken)).startswith("tiny-broken-")  # the load reports it later, in one line


@pytest.mark.parametrize("drop", ["oom_per_1k", "p99_e2e_s"])
def test_a_space_without_the_oom_limit_or_a_rank_metric_is_one_line(tmp_path, drop):
    """The benchmark scores an export by the true OOM rate and one metric; a space that lacks
    either was a worker's ValueError traceback in run and in bench."""
    path = tmp_path / "tiny-one-objective.yaml"
    path.write_text(TINY.replace(f"  - {{metric: {drop}, direction: minimize}}\n", ""))
    for cmd in (["experiments.reality_gap.run", "--scenario", str(path), "--truth-seed", "0", "--strategy", "tpe",
                 "--json"],
                ["experiments.reality_gap.bench", "--scenarios", str(path), "--truth-seeds", "0", "--study-seeds", "0",
                 "--strategies", "tpe", "--out", str(tmp_path / "rows.jsonl")]):
        r = subprocess.run([sys.executable, "-m", *cmd], cwd=REPO, capture_output=True, text=True, timeout=600)
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert "objectives" in r.stderr and "oom_per_1k" in r.stderr and r.stdout == ""
    assert not (tmp_path / "rows.jsonl").exists()


def test_a_space_by_path_may_rank_by_any_registry_metric(tmp_path):
    """A deployment's space may name an objective no built-in scenario uses (p95 TTFT here):
    its truth records that metric and the case is scored by it, not by p99 e2e."""
    path = tmp_path / "tiny-ttft.yaml"
    path.write_text(TINY.replace("metric: p99_e2e_s", "metric: p95_ttft_s"))
    out = run_case(str(path), 0, "tpe-confirm", jobs=1)
    truth = T.Truth.load(str(path), 0, jobs=1, log=lambda *_: None)
    assert truth.main == "p95_ttft_s" and "p95_ttft_s" in truth.grid.rows[0]
    feasible = [r for r in truth.grid.rows if r["started"] and r["oom_per_1k"] <= 1.0]
    assert out["true_best"] == pytest.approx(min(r["p95_ttft_s"] for r in feasible))
    assert out["true_main"] == pytest.approx(truth.value(out["exported_flags"])["p95_ttft_s"])
    assert out["true_main"] != pytest.approx(out["true_p99_s"])  # scored by TTFT, not by e2e


def test_the_ceiling_measures_every_grid_config_once_then_races_them(tiny):
    """grid-all (a ceiling, not a baseline): the brute force's every config once, then as many of the space's
    confirmation runs as the loop gives that budget (8 configs: 2 of 6), raced and exported by the same rule."""
    from autotune.study.analysis import config_key
    from autotune.study.trials import Role
    from experiments.reality_gap.run import run_strategy
    from experiments.reality_gap.truth import Truth

    truth = Truth.load(tiny, 0, jobs=1)
    grid = {config_key({p: r[p] for p in truth.grid.params}) for r in truth.grid.rows}
    recs = run_strategy(truth, "grid-all", 0, truth.space.study.trials).records()
    search = [r for r in recs if r.role == Role.SEARCH]
    confirm = [r for r in recs if r.role == Role.CONFIRM]
    assert len(search) == len(grid) == 8 and {config_key(truth.params(r.flags)) for r in search} == grid
    assert len(confirm) == 2 and all(r.repeat_of is not None for r in confirm)
    out = run_case(tiny, 0, "grid-all", jobs=1, seed=0)
    assert out["launched"] == 10 and out["confirmation_runs"] == 2 and out["exported_flags"] is not None


def test_the_median_variant_changes_only_how_runs_are_summarised(tiny):
    """autotune-median (tried on the development truths, README): the shipped space with ``export.center``
    median, nothing else; a study of it ranks by its configs' medians."""
    space = load_space(tiny)
    med = variant(space, "autotune-median")
    assert med.export.center == "median" and space.export.center == "mean"
    assert med.model_copy(update={"export": space.export}) == space


@pytest.mark.parametrize(("baseline_variant", "autotune_variant"),
                         [("tpe-confirm-hazard", "autotune-hazard"), ("tpe-confirm-leader", "autotune-leader")])
def test_a_tpe_confirm_variant_is_tpe_confirm_with_the_autotune_variants_part(tiny, baseline_variant,
                                                                              autotune_variant):
    """tpe-confirm shares autotune's confirmation runs and export rule; a variant of autotune that changes one
    of them has a tpe-confirm twin with the same change and nothing else (its sampler stays TPE, every part off)."""
    space = load_space(tiny)
    base, twin, auto = (variant(space, s) for s in ("tpe-confirm", baseline_variant, autotune_variant))
    assert twin.study.sampler == "tpe" and twin.study.strategy == base.study.strategy
    assert (twin.export, twin.study.confirm) == (auto.export, auto.study.confirm)
    assert (base.export, base.study.confirm) != (twin.export, twin.study.confirm)
    restored = twin.model_copy(update={"export": base.export,
                                       "study": twin.study.model_copy(update={"confirm": base.study.confirm})})
    assert restored == base

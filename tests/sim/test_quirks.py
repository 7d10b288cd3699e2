"""Structural departures of a benchmark truth (autotune.sim.quirks): each mechanism does what
its docstring says, and none acts unless asked (autotune's own model runs without them).
Everything is SIMULATED."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from autotune.deploy import NOMINAL, resolve_deployment
from autotune.sim import simulate_trial
from autotune.sim.perf import PerfModel
from autotune.sim.quirks import NONE, Quirks
from autotune.space import load_space
from experiments.scenarios.ground_truth import space_path

SPACE = load_space(space_path("small-highconc"))
FLAGS = {**SPACE.fixed_flags(), "gpu_memory_utilization": 0.92, "max_num_seqs": 128,
         "max_num_batched_tokens": 1024, "enable_prefix_caching": True, "kv_cache_dtype": "auto"}
WL = SPACE.workload.model_copy(update={"num_requests": 120})


QUIET = NOMINAL.without_noise()


def _p99(flags=FLAGS, quirks: Quirks = NONE, profile=QUIET, seed: int = 1) -> float:
    e = SPACE.engine
    return simulate_trial(e.model, e.gpu, flags, WL, seed=seed, env=e.env, profile=profile,
                          quirks=quirks).metrics()["p99_e2e_s"]


def test_no_quirks_is_the_model_itself():
    e = SPACE.engine
    a = simulate_trial(e.model, e.gpu, FLAGS, WL, seed=3, env=e.env, profile=NOMINAL)
    b = simulate_trial(e.model, e.gpu, FLAGS, WL, seed=3, env=e.env, profile=NOMINAL, quirks=Quirks())
    assert a.metrics() == b.metrics()
    assert not NONE.active and Quirks(gemm_tile=128, gemm_wave=1.0).active


def test_gemm_waves_and_graph_padding_pay_for_padded_rows():
    capture = (1, 2, 4, 8, 16, 24, 32)
    assert NONE.gemm_rows(17, True, capture) == 17
    assert Quirks(graph_padding=True).gemm_rows(17, True, capture) == 24  # the next captured size
    assert Quirks(graph_padding=True).gemm_rows(17, False, capture) == 17  # prefill is not padded
    assert Quirks(graph_padding=True).gemm_rows(40, True, capture) == 40  # beyond the largest graph
    assert Quirks(gemm_tile=128, gemm_wave=1.0).gemm_rows(129, False, ()) == 256
    assert Quirks(gemm_tile=128, gemm_wave=0.5).gemm_rows(129, False, ()) == pytest.approx(192.5)
    # A compute-bound prefill step of 1,000 tokens pays for 1,024 rows with 256-row tiles.
    dep = resolve_deployment(SPACE.engine.model, SPACE.engine.gpu, FLAGS, SPACE.engine.env)
    plain, tiled = PerfModel(dep, NOMINAL), PerfModel(dep, NOMINAL, Quirks(gemm_tile=256, gemm_wave=1.0))
    step = dict(tokens=1000, seqs=1, attn_work=1000 * 500.0, kv_read_tokens=0, decode_only=False)
    assert plain.cost(**step).flops < tiled.cost(**step).flops
    assert tiled.time(tiled.cost(**step)) > plain.time(plain.cost(**step))


def test_attention_curve_and_fp8_dequant_cost_only_where_they_should():
    q = Quirks(attn_ctx_exp=0.3, attn_ctx_ref=1000.0, fp8_kv_penalty=0.8)
    assert q.attention_scale(1000.0, False) == pytest.approx(1.0)
    assert q.attention_scale(8000.0, False) > 1.5 and q.attention_scale(125.0, False) < 0.6
    assert q.attention_scale(1000.0, True) == pytest.approx(1.8)
    assert q.kv_read_scale(True) == pytest.approx(1.8) and q.kv_read_scale(False) == 1.0
    # fp8 KV on an L40S (FP8 units): no penalty; on an A100 (none) it costs time.
    fp8 = {**FLAGS, "kv_cache_dtype": "fp8"}
    assert _p99(fp8, Quirks(fp8_kv_penalty=1.0)) == pytest.approx(_p99(fp8))


def test_cpu_cost_grows_faster_than_linearly_beyond_the_knee():
    q = Quirks(cpu_knee=64.0, cpu_power=2.0)
    assert NONE.cpu_seq_factor(512) == 1.0
    assert q.cpu_seq_factor(64) == pytest.approx(2.0) and q.cpu_seq_factor(256) == pytest.approx(17.0)
    assert _p99(quirks=q) > _p99()


def test_the_field_is_smooth_bounded_and_a_function_of_the_flags_alone():
    q = Quirks(field_amp=0.1, field_seed=7, field_scale=1.5)
    assert q.field_factor(FLAGS) == q.field_factor(dict(reversed(list(FLAGS.items()))))
    near = {**FLAGS, "gpu_memory_utilization": 0.921}
    far = [{**FLAGS, "max_num_seqs": s, "gpu_memory_utilization": g} for s in (32, 64, 256, 512)
           for g in (0.84, 0.88, 0.96)]
    assert abs(math.log(q.field_factor(near) / q.field_factor(FLAGS))) < 0.01
    logs = [math.log(q.field_factor(f)) for f in far]
    assert max(logs) - min(logs) > 0.02  # it does vary over the space ...
    assert all(abs(v) < 0.5 for v in logs)  # ... within a few amplitudes
    assert Quirks(field_amp=0.1, field_seed=8, field_scale=1.5).field_factor(FLAGS) != q.field_factor(FLAGS)


def test_fragmentation_grows_with_uptime_and_saturates():
    q = Quirks(frag_growth=0.5, frag_horizon_s=600.0)
    assert q.fragmentation(0.0) == 1.0
    assert q.fragmentation(300.0) == pytest.approx(1.25)
    assert q.fragmentation(6000.0) == pytest.approx(1.5)


def test_prefill_chunk_cap_is_a_scheduler_variant_that_moves_latency():
    assert _p99(quirks=Quirks(prefill_chunk_cap=64)) != _p99()


def test_start_draws_outliers_and_bimodal_kv():
    rng = random.Random(0)
    q = Quirks(outlier_chance=0.2, outlier_scale=0.5, kv_jitter=0.03, speed=1.02)
    draws = [q.start_draws(rng) for _ in range(2000)]
    speeds = [s for s, _ in draws]
    assert sum(s > 1.02 for s in speeds) == pytest.approx(400, rel=0.2)  # ~20 % outliers, all slower
    assert min(speeds) == pytest.approx(1.02)
    assert {round(k, 6) for _, k in draws} == {0.97, 1.03}  # two KV sizes: bimodal near a cliff
    assert NONE.start_draws(rng) == (1.0, 1.0)


def test_noise_quirks_act_only_with_noise_on():
    q = Quirks(outlier_chance=1.0, outlier_scale=0.5, kv_jitter=0.04, speed=1.3)
    quiet = NOMINAL.without_noise()
    assert _p99(quirks=q, profile=quiet) == _p99(profile=quiet)
    assert _p99(quirks=q, profile=NOMINAL) > _p99(quirks=replace(q, speed=1.0, outlier_chance=0.0), profile=NOMINAL)

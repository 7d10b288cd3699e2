"""Runtime memory per step: what vLLM's startup profile does not see, and the OOMs it causes.

The OOM rate is a mean over trial seeds: a single trial's count depends on which steps draw
a crash, and every draw is seeded, so the means are deterministic. The V1 model runner is
pinned where the physics needs it: V2 (vLLM 0.32.0's default) computes prompt logprobs in
1024-row chunks, so its transient does not grow with the prompt or the token budget.
"""

from __future__ import annotations

import statistics

import pytest

from autotune.deploy import NOMINAL, plan_startup, resolve_deployment
from autotune.results import GoodputSLO, RequestStatus
from autotune.sim import simulate_trial
from autotune.sim.step_memory import StepMemoryModel
from autotune.workload import LengthDist, OptionShare, OptionsSpec, WorkloadSpec, generate_trace
from tests.sim.conftest import A100, QWEN72B, V1_RUNNER, chat_workload, qwen_flags

GiB = 2**30
SEEDS = range(4)


def eval_workload(plp_fraction: float, n: int = 200) -> WorkloadSpec:
    """Evaluation-style traffic: long prompts, short answers, some with prompt_logprobs."""
    options = OptionsSpec(prompt_logprobs=OptionShare(fraction=plp_fraction, value=1)) if plp_fraction else OptionsSpec()
    return WorkloadSpec(num_requests=n, concurrency=8, options=options,
                        prompt_len=LengthDist(dist="uniform", mean=5000, min=3000, max=7000),
                        output_len=LengthDist(dist="uniform", mean=40, min=16, max=64))


def mean_oom(workload: WorkloadSpec, env=V1_RUNNER, **over) -> float:
    return statistics.mean(simulate_trial(QWEN72B, A100, qwen_flags(**over), workload, seed=s, env=env)
                           .metrics()["oom_per_1k"] for s in SEEDS)


def nondecreasing(xs: list[float]) -> bool:
    return all(a <= b for a, b in zip(xs, xs[1:], strict=False))


# --- the per-step formulas, against vLLM's code by hand ---------------------------------

def _model(env, **over) -> tuple[StepMemoryModel, int]:
    dep = resolve_deployment(QWEN72B, A100, qwen_flags(**over), env)
    return StepMemoryModel(dep, NOMINAL, max_graph_batch=512), dep.arch.vocab_size


def test_v1_prompt_logprobs_materialise_the_whole_chunk_in_bf16_and_fp32():
    """gpu_model_runner._get_prompt_logprobs_dict: [n, V] logits (bf16) + their fp32 log_softmax."""
    mem, vocab = _model(V1_RUNNER)
    one = mem.step(2048, 1, False, [2000])
    assert one.largest == 2000 * vocab * 4 and "prompt logprobs" in one.what
    two = mem.step(2048, 2, False, [1000, 1000])
    # The second request's tensors are made while the first one's scores are still bound.
    assert two.unprofiled > mem.step(2048, 2, False, [1000]).unprofiled
    # Nothing but the hidden states and the sampler rows sits beside it: the excess is exact.
    hidden = 2048 * 8192 * 2
    assert one.unprofiled == pytest.approx(hidden + 2000 * vocab * 6 - mem.profiled)


def test_v2_prompt_logprobs_stay_two_1024_row_chunks_whatever_the_budget():
    """gpu/sample/prompt_logprob.py: CHUNK_SIZE 1024 over every row of the step; at TP 2 the
    local shard (V/2) lives during the gather, and the previous chunk is still bound."""
    small, vocab = _model({}, max_num_batched_tokens=2048)
    big, _ = _model({}, max_num_batched_tokens=8192)
    peak = (1024 + 1024 * 1.5) * vocab * 2
    for mem, tokens in ((small, 2048), (big, 8192)):
        step = mem.step(tokens, 4, False, [tokens // 2])
        assert step.unprofiled == pytest.approx(max(0.0, tokens * 8192 * 2 + peak - mem.profiled))
        assert step.largest == 1024 * vocab * 2
    assert big.step(8192, 4, False, [4096]).unprofiled < small.step(2048, 4, False, [2048]).unprofiled + 1


def test_without_a_trigger_no_step_exceeds_the_profile():
    for env in ({}, V1_RUNNER):
        mem, _ = _model(env, max_num_batched_tokens=8192)
        for tokens, seqs, decode in ((8192, 256, False), (8192, 1, False), (256, 256, True), (16, 16, True)):
            assert mem.step(tokens, seqs, decode).unprofiled == 0


def test_sampled_logprobs_cost_one_fp32_copy_on_v1_only():
    v1, vocab = _model(V1_RUNNER, max_num_seqs=64, max_num_batched_tokens=64)
    v2, _ = _model({}, max_num_seqs=64, max_num_batched_tokens=64)
    assert v1.step(64, 64, True, None, logprobs=True).act - v1.step(64, 64, True).act == 64 * vocab * 4
    assert v2.step(64, 64, True, None, logprobs=True).act == v2.step(64, 64, True).act
    assert v1.step(64, 64, True, None, logprobs=True).unprofiled > 0  # a full batch beyond the profiled rows


# --- whole trials: the properties --------------------------------------------------------

@pytest.mark.parametrize("env", [{}, V1_RUNNER])
def test_no_ooms_when_no_request_carries_a_trigger_and_headroom_is_ample(env):
    for wl, over in ((chat_workload(300), {}), (eval_workload(0.0), {"max_num_batched_tokens": 8192})):
        for s in SEEDS:
            res = simulate_trial(QWEN72B, A100, qwen_flags(**over), wl, seed=s, env=env)
            assert res.crashes == 0 and res.metrics()["oom_per_1k"] == 0
            # Only the fragmentation hazard is left: under one in a million per step.
            assert res.extra["max_unprofiled_gib"] == 0 and res.extra["max_step_oom_p"] < 1e-6


def test_ooms_rise_with_the_prompt_logprobs_fraction():
    rates = [mean_oom(eval_workload(f), gpu_memory_utilization=0.95) for f in (0.0, 0.1, 0.4, 0.8)]
    assert rates[0] == 0 and nondecreasing(rates) and rates[-1] > rates[1], rates


def test_ooms_rise_with_gpu_memory_utilization():
    rates = [mean_oom(eval_workload(0.1), gpu_memory_utilization=g) for g in (0.91, 0.93, 0.95, 0.96, 0.97)]
    assert rates[0] == 0 and nondecreasing(rates) and rates[-1] > 100, rates


def test_ooms_rise_with_max_num_batched_tokens_on_the_v1_runner():
    """V1 computes a request's prompt logprobs over its whole chunk, and the chunk grows with
    the budget (while the prompts are longer than it) faster than the profiled peak does."""
    rates = [mean_oom(eval_workload(0.1), gpu_memory_utilization=0.95, max_num_batched_tokens=m)
             for m in (1024, 2048, 4096, 8192)]
    assert rates[0] == 0 and nondecreasing(rates) and rates[-1] > 100, rates
    # V2's 1024-row chunks keep the same load OOM-free at every budget.
    assert all(mean_oom(eval_workload(0.1), env={}, gpu_memory_utilization=0.95, max_num_batched_tokens=m) == 0
               for m in (2048, 8192))


def test_a_prompt_logprobs_oom_is_logged_as_vllm_logs_it():
    res = simulate_trial(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.95, max_num_batched_tokens=8192),
                         eval_workload(0.4), seed=0, env=V1_RUNNER)
    assert res.crashes >= 1 and res.extra["oom_causes"]["prompt logprobs"] >= 1
    fatal = res.failure_evidence.index("EngineCore encountered a fatal error.")
    oom_line = res.failure_evidence[fatal + 1]
    assert oom_line == res.failure_reason
    assert oom_line.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
    assert "prompt logprobs" in oom_line
    lost = [r for r in res.records if r.status == RequestStatus.OOM]
    assert lost and all(r.e2e_s is None for r in lost)


# --- request options in the records and the cache ----------------------------------------

def test_records_carry_the_options_and_prompt_logprobs_requests_do_not_stream():
    wl = chat_workload(120, options=OptionsSpec(prompt_logprobs=OptionShare(fraction=0.3, value=0),
                                                logprobs=OptionShare(fraction=0.3, value=2),
                                                n=OptionShare(fraction=0.2, value=3)))
    res = simulate_trial(QWEN72B, A100, qwen_flags(), wl, seed=0)
    trace = generate_trace(wl, 8192)
    assert res.status.value == "ok" and res.metrics()["requests_ok"] == 120
    for rec, tr in zip(res.records, trace, strict=True):
        o = tr.options
        assert (rec.prompt_logprobs, rec.logprobs, rec.n) == (o.prompt_logprobs, o.logprobs, o.n)
        assert rec.output_tokens == o.n * tr.output_len
        assert rec.streamed == o.streamable and (rec.ttft_s is None) == (not o.streamable)
    assert {r.n for r in res.records} == {1, 3} and all(r.streamed for r in res.records)
    # prompt_logprobs 0 streams (above); vLLM refuses k > 0 with stream=True: no TTFT then.
    k = chat_workload(40, options=OptionsSpec(prompt_logprobs=OptionShare(fraction=1.0, value=2)))
    assert all(not r.streamed and r.ttft_s is None for r in simulate_trial(QWEN72B, A100, qwen_flags(), k).records)


def test_prompt_logprobs_requests_neither_read_nor_count_in_the_prefix_cache():
    """vLLM: SamplingParams.skip_reading_prefix_cache for prompt logprobs; no lookup is recorded."""
    plain = chat_workload(60, concurrency=1)
    every = chat_workload(60, concurrency=1, options=OptionsSpec(prompt_logprobs=OptionShare(fraction=1.0, value=1)))
    a = simulate_trial(QWEN72B, A100, qwen_flags(), plain).server_metrics
    b = simulate_trial(QWEN72B, A100, qwen_flags(), every).server_metrics
    assert a["prefix_cache_hits"] > 0 and a["prefix_cache_queries"] > 0
    assert b["prefix_cache_hits"] == b["prefix_cache_queries"] == 0 and b["prefix_cache_hit_rate"] == 0.0


def test_the_sequences_of_an_n_request_share_its_prompt_blocks():
    """V1 fans n > 1 out into child requests with one prompt: the later children hit it."""
    wl = WorkloadSpec(num_requests=1, concurrency=1, prompt_len=LengthDist(dist="fixed", mean=1600),
                      output_len=LengthDist(dist="fixed", mean=20), options=OptionsSpec(n=OptionShare(fraction=1.0, value=4)))
    res = simulate_trial(QWEN72B, A100, qwen_flags(), wl)
    sm = res.server_metrics
    assert res.records[0].output_tokens == 80 and res.records[0].n == 4
    assert sm["prefix_cache_queries"] == 4 * 1600
    assert sm["prefix_cache_hits"] == 3 * (1599 // 16 * 16)  # all but the last token, in whole blocks


def test_gpus_and_goodput_slo_are_on_the_result():
    wl = chat_workload(80, goodput_slo=GoodputSLO(ttft_s=2.0, tpot_s=0.1))
    res = simulate_trial(QWEN72B, A100, qwen_flags(), wl)
    m = res.metrics()
    assert res.gpus == 2 and res.goodput_slo == wl.goodput_slo
    assert m["goodput_rps_per_gpu"] > 0 and 0 < m["slo_attainment"] <= 1
    failed = simulate_trial(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.85), wl)
    assert failed.gpus == 2 and failed.metrics()["goodput_rps_per_gpu"] == 0


def test_the_graph_estimate_moves_graphs_inside_the_budget():
    """VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (default): KV shrinks by the estimate, the
    headroom grows by it, and at the nominal ratio the capture cannot OOM."""
    off = plan_startup(resolve_deployment(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.95),
                                          {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}))
    on = plan_startup(resolve_deployment(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.95)))
    assert on.mem.cuda_graphs_estimate == pytest.approx(on.mem.cuda_graphs) and off.mem.cuda_graphs_estimate == 0
    assert on.mem.kv_cache == pytest.approx(off.mem.kv_cache - on.mem.cuda_graphs, abs=0.01)
    assert on.mem.headroom == pytest.approx(off.mem.headroom + on.mem.cuda_graphs, abs=0.01)
    assert any("CUDA graph memory profiling is enabled" in line for line in on.log)
    assert plan_startup(resolve_deployment(QWEN72B, A100, qwen_flags(gpu_memory_utilization=0.99))).ok

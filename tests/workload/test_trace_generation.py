"""The generated trace: determinism, arrivals, options, long tail and shared prefix blocks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autotune.workload import SYSTEM_PROMPT_BLOCK, LengthDist, WorkloadSpec, generate_trace


def chat(**kw) -> WorkloadSpec:
    base = dict(num_requests=400, prompt_len=LengthDist(dist="lognormal", mean=300, sigma=0.8, min=16, max=3000),
                output_len=LengthDist(dist="lognormal", mean=100, sigma=0.6, min=8, max=1024),
                shared_prefix_fraction=0.5, shared_prefix_len=256)
    base.update(kw)
    return WorkloadSpec(**base)


def shape(trace) -> list[tuple]:
    return [(t.prompt_len, t.output_len, t.prefix_blocks, t.token_seed, t.arrival_s) for t in trace]


def test_same_seed_same_trace_other_seed_other_trace():
    opts = {"prompt_logprobs": {"fraction": 0.2, "value": 1}, "n": {"fraction": 0.1, "value": 3}}
    a = generate_trace(chat(seed=5, request_rate=4.0, options=opts))
    b = generate_trace(chat(seed=5, request_rate=4.0, options=opts))
    c = generate_trace(chat(seed=6, request_rate=4.0, options=opts))
    assert a == b and a != c
    spec = chat(seed=5)
    assert [t.prompt_token_ids(spec) for t in generate_trace(spec)] == [t.prompt_token_ids(spec) for t in
                                                                        generate_trace(chat(seed=5))]


def test_new_features_draw_from_their_own_streams():
    """Options and a long tail leave every other draw of the trace where it was."""
    plain = generate_trace(chat())
    with_options = generate_trace(chat(options={"logprobs": {"fraction": 0.5, "value": 2}}))
    assert shape(with_options) == shape(plain)
    tail = generate_trace(chat(long_tail={"fraction": 0.1, "prompt_len": {"dist": "uniform", "mean": 6000,
                                                                          "min": 4000, "max": 8000}}))
    changed = [i for i, (p, t) in enumerate(zip(plain, tail, strict=True)) if p.prompt_len != t.prompt_len]
    assert 15 <= len(changed) <= 70  # about 10 % of 400
    for i in changed:
        assert 4000 + tail[i].prefix_len <= tail[i].prompt_len <= 8000 + tail[i].prefix_len
    assert [(t.output_len, t.token_seed) for t in tail] == [(t.output_len, t.token_seed) for t in plain]


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_gamma_arrivals_have_vllm_bench_burstiness(burstiness):
    """Gamma gaps of shape b: coefficient of variation 1/sqrt(b), so 1 is Poisson and lower is burstier."""
    rate, n = 5.0, 20_000
    spec = WorkloadSpec(num_requests=n, request_rate=rate, burstiness=burstiness, concurrency=None)
    t = np.array([r.arrival_s for r in generate_trace(spec)])
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert np.all(gaps >= 0)
    assert t[-1] == pytest.approx(n / rate)  # rescaled to the target duration, as vLLM does
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)


def test_option_fractions_and_values():
    n = 4000
    spec = chat(num_requests=n, options={"prompt_logprobs": {"fraction": 0.1, "value": 5},
                                         "logprobs": {"fraction": 0.3, "value": 1},
                                         "n": {"fraction": 0.05, "value": 4}})
    trace = generate_trace(spec)
    for get, frac, value, unset in [(lambda o: o.prompt_logprobs, 0.1, 5, None), (lambda o: o.logprobs, 0.3, 1, None),
                                    (lambda o: o.n, 0.05, 4, 1)]:
        vals = [get(t.options) for t in trace]
        hits = sum(v == value for v in vals)
        assert all(v in (value, unset) for v in vals)
        assert abs(hits - frac * n) < 4 * np.sqrt(n * frac * (1 - frac))  # binomial, 4 sigma
    both = sum(t.options.prompt_logprobs is not None and t.options.logprobs is not None for t in trace)
    assert abs(both - 0.03 * n) < 4 * np.sqrt(n * 0.03)  # drawn independently


def test_a_trace_lines_own_options_win(tmp_path):
    lines = [{"arrival_s": i, "prompt_tokens": 50, "output_tokens": 5} for i in range(200)]
    lines[7]["logprobs"] = 3
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines))
    spec = WorkloadSpec(trace={"path": str(p)}, options={"n": {"fraction": 1.0, "value": 2}}).loaded()
    trace = generate_trace(spec)
    assert trace[7].options.logprobs == 3 and trace[7].options.n == 1
    assert all(t.options.n == 2 and t.options.logprobs is None for t in trace if t.index != 7)


def test_shared_system_prompt_is_one_block_with_identical_tokens():
    spec = chat(token_id_high=50_000)
    trace = generate_trace(spec)
    sharing = [t for t in trace if t.shares_prefix]
    assert sharing and all(t.prefix_blocks == (SYSTEM_PROMPT_BLOCK,) and t.prefix_len == 256 for t in sharing)
    assert all(t.prefix_len == 0 for t in trace if not t.shares_prefix)
    ids = [t.prompt_token_ids(spec) for t in sharing[:20]]
    assert all(len(x) == t.prompt_len for x, t in zip(ids, sharing, strict=False))
    assert all(x[:256] == ids[0][:256] for x in ids)
    assert len({tuple(x[256:266]) for x in ids}) == len(ids)  # the rest is each request's own


def test_shared_hash_ids_give_identical_tokens(tmp_path):
    rows = [(0, 1600, [10, 11, 12, 13]), (1, 1400, [10, 11, 20]), (2, 900, [10, 30]), (3, 700, [40, 41])]
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps({"timestamp": t * 1000, "input_length": n, "output_length": 4, "hash_ids": h})
                         + "\n" for t, n, h in rows))
    spec = WorkloadSpec(trace={"path": str(p)}, token_id_high=50_000).loaded()
    trace = generate_trace(spec)
    # Only the leading run another request also has is shared; unique blocks never hit.
    assert [t.prefix_blocks for t in trace] == [(10, 11), (10, 11), (10,), ()]
    assert [t.prefix_len for t in trace] == [1024, 1024, 512, 0]
    ids = [t.prompt_token_ids(spec) for t in trace]
    assert ids[0][:1024] == ids[1][:1024] and ids[0][1024:1034] != ids[1][1024:1034]
    assert ids[2][:512] == ids[0][:512] and ids[2][512:522] != ids[0][512:522]
    assert [len(x) for x in ids] == [1600, 1400, 900, 700]


def test_clipping_to_the_context_keeps_whole_blocks_and_one_own_token(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("".join(json.dumps({"timestamp": 0, "input_length": 3000, "output_length": 400,
                                     "hash_ids": [0, 1, 2, 3, 4, 5]}) + "\n" for _ in range(3)))
    trace = generate_trace(WorkloadSpec(trace={"path": str(p)}).loaded(), max_model_len=2048)
    for t in trace:
        assert t.prompt_len + t.output_len <= 2048
        assert t.prefix_len < t.prompt_len and t.prefix_len % 512 == 0 and t.prefix_blocks == (0, 1, 2)


def test_trace_arrivals_follow_the_recorded_times(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                 "100,ChatGPT,10,5,15,x\n101.5,ChatGPT,10,5,15,x\n104,ChatGPT,10,5,15,x\n")
    trace = generate_trace(WorkloadSpec(trace={"path": str(p)}).loaded())
    assert [t.arrival_s for t in trace] == [0.0, 1.5, 4.0]


def test_arrival_times_are_drawn_after_the_lengths():
    """A closed loop draws no arrival times, so its lengths are the same as an open loop's."""
    closed = generate_trace(chat())
    open_ = generate_trace(chat(request_rate=3.0, concurrency=None))
    assert [s[:4] for s in shape(closed)] == [s[:4] for s in shape(open_)]

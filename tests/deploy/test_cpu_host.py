"""The simulator's CPU host (``gpu: cpu``, vLLM's CPU build): startup as the CPU worker does it, and a
calibration that moves its constants.

The measured figures quoted here are CPU measurements of a toy model (experiments/vllm_cpu: an 8-layer
Qwen2 with random weights) on vLLM's CPU build, never GPU figures; everything else is SIMULATED.
"""

from __future__ import annotations

import json
import math

import pytest

from autotune.calibrate.calibration import fit_profile
from autotune.calibrate.model import simulate
from autotune.deploy import NOMINAL, device_kind, get_device, known_gpus, plan_startup, resolve_deployment
from autotune.deploy.profile import CPU_HOST, CPU_NOMINAL, nominal, ranges
from autotune.errors import UserError
from autotune.results import FailureClass
from autotune.space import load_space
from autotune.study.search import fitting
from autotune.study.trials import Role, State, TrialRecord
from experiments.vllm_cpu import model as toy

KV_4000 = 32768000  # bytes: 4000 tokens of the toy model's bf16 KV (8 KiB a token)


@pytest.fixture(scope="module")
def toy_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    (d / "config.json").write_text(json.dumps({**toy.CONFIG, "vocab_size": toy.VOCAB_SIZE}))
    return str(d)


@pytest.fixture(scope="module")
def space(toy_model):
    from tests.conftest import REPO

    sp = load_space(REPO / "experiments" / "vllm_cpu" / "space.yaml")
    return sp.model_copy(update={"engine": sp.engine.model_copy(update={"model": toy_model})})


def _plan(model, flags, env=None, profile=CPU_NOMINAL):
    base = {"max_model_len": 3584, "enforce_eager": True, "dtype": "bfloat16", "load_format": "dummy"}
    return plan_startup(resolve_deployment(model, "cpu", {**base, **flags}, env), profile)


def test_the_cpu_host_is_a_device_of_the_simulator_but_not_a_gpu():
    host = get_device("cpu")
    assert host.is_cpu and host.cores == 1 and device_kind("cpu") == "cpu"
    assert "cpu" not in known_gpus() and device_kind("H100-80GB") == "gpu" and not get_device("H100").is_cpu
    with pytest.raises(UserError, match="unknown GPU 'V100'"):
        get_device("V100")


@pytest.mark.parametrize(("flags", "tokens"), [
    # kv_cache_tokens the measured engines reported (experiments/vllm_cpu/results/pilot.jsonl).
    ({"kv_cache_memory_bytes": KV_4000}, 3968),  # vLLM's CPU default block_size 128: 31 blocks
    ({"kv_cache_memory_bytes": KV_4000, "block_size": 32}, 4000),
    ({"kv_cache_memory_bytes": 49152000}, 5888),
    ({"kv_cache_memory_bytes": 49152000, "block_size": 64, "kv_cache_dtype": "fp8"}, 11968),
])
def test_an_explicit_kv_size_gives_the_blocks_the_cpu_build_reported(toy_model, flags, tokens):
    p = _plan(toy_model, flags)
    assert p.ok and p.kv_cache_tokens == tokens and p.capture_sizes == ()
    assert p.mem.cuda_graphs == 0 and p.mem.activation_peak == 0  # eager with an explicit size: no warm-up


def test_too_few_blocks_for_one_request_refuses_to_start_like_the_cpu_build(toy_model):
    # 3000 tokens of bf16 KV cannot hold one 3584-token request (measured: startup_oom, this message).
    p = _plan(toy_model, {"kv_cache_memory_bytes": 24576000, "block_size": 64})
    assert not p.ok and p.failure_class == FailureClass.STARTUP_OOM
    assert "KV cache is needed, which is larger than the available KV cache memory" in p.failure_reason
    assert _plan(toy_model, {"kv_cache_memory_bytes": 24576000, "kv_cache_dtype": "fp8"}).ok  # fp8: twice the tokens


def test_vllm_cpu_kvcache_space_overrides_the_flag(toy_model):
    p = _plan(toy_model, {"kv_cache_memory_bytes": 24576000}, {"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert p.ok and p.mem.kv_cache == pytest.approx(1.0, abs=1e-3)
    zero = _plan(toy_model, {}, {"VLLM_CPU_KVCACHE_SPACE": "0"})
    assert not zero.ok and "No available memory for the cache blocks" in zero.failure_reason
    with pytest.raises(UserError, match="VLLM_CPU_KVCACHE_SPACE"):
        _plan(toy_model, {}, {"VLLM_CPU_KVCACHE_SPACE": "one"})


def test_without_a_kv_size_the_node_memory_times_gmu_sizes_it(toy_model):
    p = _plan(toy_model, {"gpu_memory_utilization": 0.5})
    node = get_device("cpu").mem_total_gib
    assert p.ok and p.mem.activation_peak > 0  # the warm-up forward ran
    assert p.mem.kv_cache == pytest.approx(0.5 * node - p.mem.weights - p.mem.non_torch - p.mem.activation_peak,
                                           abs=0.01)
    big = _plan(toy_model, {"gpu_memory_utilization": 0.92})  # more than the node has available
    assert not big.ok and "less than desired CPU memory utilization" in big.failure_reason
    assert big.failure_class == FailureClass.INVALID_CONFIG  # a ValueError, as autotune's vllm backend records it


def test_no_cuda_graphs_on_cpu_but_inductor_compiles_without_enforce_eager(toy_model):
    eager = _plan(toy_model, {"kv_cache_memory_bytes": KV_4000})
    compiled = _plan(toy_model, {"kv_cache_memory_bytes": KV_4000, "enforce_eager": False})
    assert compiled.ok and compiled.capture_sizes == () and compiled.mem.cuda_graphs == 0
    assert compiled.startup_s == pytest.approx(eager.startup_s + CPU_NOMINAL.profile_s + CPU_NOMINAL.compile_s)


def test_block_sizes_the_cpu_attention_backend_refuses(toy_model):
    p = _plan(toy_model, {"kv_cache_memory_bytes": KV_4000, "block_size": 16})
    assert not p.ok and p.failure_class == FailureClass.INVALID_CONFIG and "CPU_ATTN" in p.failure_reason


def test_cpu_ranges_and_nominal_apply_to_the_cpu_host_only():
    assert nominal("gpu") is NOMINAL and nominal("cpu") is CPU_NOMINAL
    for name, (nom, lo, hi, _) in CPU_HOST.items():
        assert ranges("cpu")[name] == (lo, hi) and getattr(CPU_NOMINAL, name) == nom
    box = fitting.profile_box(["cpu_step_us"], CPU_NOMINAL, "cpu")
    assert math.exp(box.hi[0]) == pytest.approx(CPU_HOST["cpu_step_us"][2])
    assert fitting.profile_box(["cpu_step_us"], NOMINAL).hi[0] == pytest.approx(math.log(2000.0))
    assert NOMINAL.perturbed(3) == NOMINAL.perturbed(3, "gpu")  # GPU truths draw as before


def test_a_cpu_space_starts_from_the_cpu_nominal_profile(space):
    assert space.engine.profile is CPU_NOMINAL and space.study.strategy.base_profile is CPU_NOMINAL


def _records(space, configs):
    out = []
    for flags, metrics in configs:
        full = {**space.fixed_flags(), **flags}
        out.append(TrialRecord(len(out), State.COMPLETE, Role.SEARCH, params=dict(flags), flags=full,
                               failure_class="none", metrics=metrics, started=True))
    return out


def test_calibration_moves_the_cpu_constants_toward_slower_measurements(space):
    """Records made by the simulator itself with a slower per-step cost: the fit moves cpu_step_us up
    within the CPU range, where the GPU range (500-2000 us) could not reach."""
    from dataclasses import replace

    truth = replace(CPU_NOMINAL, cpu_step_us=12000.0, process_start_s=40.0)
    configs = [{"kv_cache_memory_bytes": KV_4000}, {"kv_cache_memory_bytes": 49152000},
               {"kv_cache_memory_bytes": KV_4000, "max_num_seqs": 6, "max_num_batched_tokens": 512}]
    recs = []
    for flags in configs:
        m = simulate(space, {**space.fixed_flags(), **flags}, truth)
        recs += [(flags, {**m, "startup_s": 40.0})] * 2
    fitted, stages = fit_profile(_records(space, recs), space)
    assert fitted.cpu_step_us > 2 * CPU_NOMINAL.cpu_step_us
    assert ranges("cpu")["cpu_step_us"][0] <= fitted.cpu_step_us <= ranges("cpu")["cpu_step_us"][1]
    assert fitted.process_start_s == pytest.approx(40.0, rel=0.05)
    assert {s.name for s in stages} == {"memory", "startup", "speed", "oom"}


def test_admission_needs_blocks_for_the_whole_sequence_on_the_cpu_host_only(toy_model):
    """vLLM 0.32's scheduler_reserve_full_isl: a waiting request whose first chunk fits but whose whole prompt
    does not is not admitted on the CPU host; the GPU model (its committed truths) admits it."""
    from autotune.sim.kv_cache import BlockPool
    from autotune.sim.request import SimRequest
    from autotune.sim.scheduler import Scheduler

    flags = {"max_model_len": 3584, "enforce_eager": True, "block_size": 32, "max_num_batched_tokens": 256,
             "kv_cache_memory_bytes": KV_4000}
    admitted = {}
    for device in ("cpu", "H100-80GB"):
        dep = resolve_deployment(toy_model, device, flags)
        sched = Scheduler(dep, BlockPool(20, 32, False))  # 640 tokens of KV
        sched.add(SimRequest(0, prompt_len=1000, output_len=8, block_keys=()))
        admitted[device] = [n for _, n in sched.schedule().items]
    assert admitted == {"cpu": [], "H100-80GB": [256]}


def test_the_pilot_s_engine_work_is_the_simulated_one(space):
    """The committed pilot (CPU measurements of the toy model): prefix-cache hits to the token and preemptions
    within a few of the measured counts (which are the same in every start of a config)."""
    from autotune.sim import simulate_trial
    from experiments.vllm_cpu import replay

    table = replay.Table.load(replay.PILOT)
    for c in table.configs.values():
        r = simulate_trial(space.engine.model, "cpu", {**space.fixed_flags(), **c.params}, space.workload,
                           env=space.engine.env, profile=CPU_NOMINAL.without_noise())
        assert r.status.value == "ok" and r.kv_cache_tokens == c.runs[0]["kv_cache_tokens"]
        assert abs(r.metrics()["preemptions"] - c.mean("preemptions")) <= 3, c.name
        if c.params["enable_prefix_caching"]:
            assert r.server_metrics["prefix_cache_hit_rate"] == pytest.approx(c.runs[0]["prefix_cache_hit_rate"],
                                                                              abs=1e-6)


def test_fidelity_on_the_committed_pilot_gives_figures(capsys):
    from experiments.vllm_cpu import fidelity, replay

    assert fidelity.main(["--table", str(replay.PILOT), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["missing"] is None and "not GPU" in d["note"]
    assert 0 <= d["p99_median_abs_err"] < 0.5 and 0 <= d["tpot_median_abs_err"] < 0.5


def _step_s(model, flags, profile, new, context, decode=False):
    """One step's fixed time (the serial part outside the roofline) for one sequence of ``new`` tokens after
    ``context`` (``decode``: 16 sequences of one token)."""
    from autotune.sim.perf import PerfModel

    perf = PerfModel(resolve_deployment(model, "cpu", {"kv_cache_memory_bytes": KV_4000, **flags}), profile)
    if decode:
        return perf.cost(16, 16, 16 * (context + 1), 16 * context, True).fixed_s
    return perf.cost(new, 1, new * (context + (new + 1) / 2), context, False).fixed_s


def test_fp8_kv_on_the_cpu_host_costs_its_measured_quantise_and_per_tile_dequantise(toy_model):
    """vLLM's CPU kernels (experiments/vllm_cpu/fp8_kernel.py): writing fp8 KV quantises every element; a
    prefill's attention dequantises its context once per tile of 32 query rows (8 tokens of the toy model:
    4 query heads a KV head), so the excess grows with new tokens x context; decode pays no dequantisation."""
    fp8 = {"kv_cache_dtype": "fp8"}
    p = CPU_NOMINAL.without_noise()
    per_token = 2 * 4 * 64 * 8  # K and V elements of one token, all 8 layers
    extra = {(n, c): _step_s(toy_model, fp8, p, n, c) - _step_s(toy_model, {}, p, n, c)
             for n, c in ((256, 0), (256, 1024))}
    quant = 256 * per_token * CPU_NOMINAL.kv_fp8_quant_ns * 1e-9
    tiles = lambda c: (256 * (c + 257 / 2) - c) / 8  # noqa: E731 - cache tokens dequantised
    assert extra[(256, 0)] == pytest.approx(quant + tiles(0) * per_token * CPU_NOMINAL.kv_fp8_dequant_ns * 1e-9)
    assert extra[(256, 1024)] - extra[(256, 0)] == pytest.approx(
        (tiles(1024) - tiles(0)) * per_token * CPU_NOMINAL.kv_fp8_dequant_ns * 1e-9)
    decode = _step_s(toy_model, fp8, p, 1, 512, decode=True) - _step_s(toy_model, {}, p, 1, 512, decode=True)
    assert decode == pytest.approx(16 * per_token * CPU_NOMINAL.kv_fp8_quant_ns * 1e-9, rel=0.05)


def test_the_fp8_kernel_constants_leave_every_gpu_profile_alone():
    """0 on a GPU (its fp8 truths have their own mechanism, autotune/sim/quirks.py), never drawn for a truth,
    and not written into a GPU profile file."""
    assert NOMINAL.kv_fp8_dequant_ns == 0.0 and NOMINAL.kv_fp8_quant_ns == 0.0
    assert "kv_fp8_quant_ns" not in NOMINAL.to_dict() and "kv_fp8_quant_ns" not in NOMINAL.perturbed(3).to_dict()
    assert CPU_NOMINAL.to_dict()["kv_fp8_quant_ns"] == CPU_HOST["kv_fp8_quant_ns"][0]
    assert type(CPU_NOMINAL).from_dict(CPU_NOMINAL.to_dict()) == CPU_NOMINAL

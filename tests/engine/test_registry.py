"""The flag registry: one declaration per flag, and everything derived from it."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.engine import (
    FLAG_SPECS,
    CacheConfig,
    CompilationConfig,
    DeviceClass,
    EngineConfig,
    LoadConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    Sim,
    device_class,
    flags_to_cli_args,
    resolve_defaults,
    unknown_flags,
    unmodelled_flags,
)

PARTS = (ModelConfig, ParallelConfig, CacheConfig, SchedulerConfig, CompilationConfig, LoadConfig)


def test_every_flag_is_one_config_field_and_every_field_but_the_model_a_flag():
    declared = [f.name for part in PARTS for f in dataclasses.fields(part) if f.name != "model"]
    assert sorted(declared) == sorted(FLAG_SPECS)  # each exactly once
    for spec in FLAG_SPECS.values():
        assert spec.type in (bool, int, float, str), spec
        assert spec.help and spec.group in {p.__name__ for p in PARTS}


def test_simulator_support_is_declared_for_each_flag():
    sims = {name: spec.sim for name, spec in FLAG_SPECS.items()}
    assert sims["gpu_memory_utilization"] is Sim.MODELLED and sims["disable_custom_all_reduce"] is Sim.MODELLED
    assert sims["async_scheduling"] is Sim.UNMODELLED and sims["scheduling_policy"] is Sim.UNMODELLED
    assert sims["served_model_name"] is Sim.NO_EFFECT and sims["seed"] is Sim.NO_EFFECT


def test_cli_form_booleans_and_argument_list():
    args = flags_to_cli_args({"enforce_eager": True, "enable_prefix_caching": False, "max_num_seqs": 8,
                              "gpu_memory_utilization": 0.9, "quantization": None})
    assert args == ["--enforce-eager", "--no-enable-prefix-caching", "--max-num-seqs", "8",
                    "--gpu-memory-utilization", "0.9"]
    assert FLAG_SPECS["max_num_batched_tokens"].cli == "--max-num-batched-tokens"


@pytest.mark.parametrize(("gpu", "mem", "expected"), [
    ("A100-80GB", 79.15, DeviceClass.GPU),  # an A100 keeps the small defaults (vLLM PR #17885)
    ("H100-80GB", 79.11, DeviceClass.GPU_70GB),
    ("H200", 139.81, DeviceClass.GPU_70GB),
    ("B200", 178.0, DeviceClass.GPU_160GB),
    ("L40S", 44.52, DeviceClass.GPU),
    ("cpu", None, DeviceClass.CPU),
    ("MI999", None, DeviceClass.GPU),  # unknown: vLLM's own fallback when it cannot read the device
])
def test_device_class(gpu, mem, expected):
    assert device_class(gpu, mem) is expected


@pytest.mark.parametrize(("gpu", "mem", "tp", "batch", "seqs", "block"), [
    ("A100-80GB", 79.15, 1, 2048, 256, 16),
    ("H100-80GB", 79.11, 2, 8192, 1024, 16),
    ("B200", 178.0, 1, 16384, 1024, 16),
    ("cpu", None, 2, 4096, 256, 128),  # per rank on CPU: x world size
])
def test_defaults_per_device_class(gpu, mem, tp, batch, seqs, block):
    out = resolve_defaults({"tensor_parallel_size": tp, "max_model_len": 8192}, gpu, mem)
    assert (out["max_num_batched_tokens"], out["max_num_seqs"], out["block_size"]) == (batch, seqs, block)
    assert out["gpu_memory_utilization"] == FLAG_SPECS["gpu_memory_utilization"].default
    assert out["enable_prefix_caching"] is True and out["enable_chunked_prefill"] is True
    assert "quantization" not in out  # vLLM derives it at startup: left unset


def test_vllms_batch_default_adjustments_never_touch_given_values():
    # A defaulted max_num_seqs is lowered to the token budget; a given one is not.
    assert resolve_defaults({"max_num_batched_tokens": 64, "max_model_len": 8192}, "A100-80GB", 79.15)[
        "max_num_seqs"] == 64
    both = resolve_defaults({"max_num_batched_tokens": 64, "max_num_seqs": 256, "max_model_len": 8192}, "A100", 79.15)
    assert (both["max_num_batched_tokens"], both["max_num_seqs"]) == (64, 256)
    # Without chunked prefill a whole prompt must fit one step: the default budget is raised...
    off = resolve_defaults({"enable_chunked_prefill": False, "max_model_len": 8192}, "A100-80GB", 79.15)
    assert off["max_num_batched_tokens"] == 8192
    # ...and capped at what max_num_seqs prompts can hold.
    small = resolve_defaults({"max_model_len": 4, "max_num_seqs": 8}, "A100-80GB", 79.15)
    assert small["max_num_batched_tokens"] == 32


def test_typed_config_from_resolved_flags():
    flags = resolve_defaults({"max_model_len": 4096, "disable_custom_all_reduce": True}, "A100-80GB", 79.15)
    cfg = EngineConfig.from_flags("m", flags)
    assert cfg.model.model == "m" and cfg.model.max_model_len == 4096
    assert cfg.parallel.disable_custom_all_reduce is True and cfg.scheduler.max_num_seqs == 256
    with pytest.raises(TypeError):  # per-device defaults must be resolved first
        EngineConfig.from_flags("m", {"max_model_len": 4096})


@pytest.mark.parametrize(("name", "raw", "value"), [
    ("enforce_eager", "yes", True), ("enable_prefix_caching", "off", False), ("max_num_seqs", "64", 64),
    ("gpu_memory_utilization", "0.85", 0.85), ("block_size", "32", 32), ("kv_cache_dtype", "fp8", "fp8"),
    ("max_num_seqs", "default", None),
])
def test_parse_from_the_command_line(name, raw, value):
    assert FLAG_SPECS[name].parse(raw) == value


@pytest.mark.parametrize(("name", "raw", "message"), [
    ("max_num_seqs", "lots", "max_num_seqs takes a int, not 'lots'"),
    ("enforce_eager", "maybe", "enforce_eager takes a bool"),
    ("block_size", "24", "block_size must be one of 1, 8, 16, 32, 64, 128"),
])
def test_parse_rejects_with_the_flag_named(name, raw, message):
    with pytest.raises(ValueError, match=message):
        FLAG_SPECS[name].parse(raw)


def test_check_values_from_yaml():
    assert FLAG_SPECS["gpu_memory_utilization"].check(1) == 1  # an int is a float to vLLM
    with pytest.raises(ValueError, match="max_num_seqs takes a int, not True"):
        FLAG_SPECS["max_num_seqs"].check(True)  # YAML's true is not a number
    with pytest.raises(ValueError, match="dtype must be one of"):
        FLAG_SPECS["dtype"].check("fp4")


def test_unknown_and_unmodelled():
    assert unknown_flags(["max_num_seqs", "max_seqs", "max_num_partial_prefills"]) == [
        "max_seqs", "max_num_partial_prefills"]  # a typo, and a flag vLLM 0.32 no longer takes
    # Unmodelled flags count only when set to other than vLLM's default.
    assert unmodelled_flags({"async_scheduling": True, "scheduling_policy": "fcfs", "max_num_seqs": 8,
                             "seed": 3, "cpu_offload_gb": 4.0, "pipeline_parallel_size": None}) == [
        "async_scheduling", "cpu_offload_gb"]

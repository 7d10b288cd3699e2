"""The search-space schema: valid files load, bad ones fail with one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.errors import UserError
from autotune.space import load_space
from tests.conftest import with_setting

REPO = Path(__file__).resolve().parents[2]

BASE = {
    "version": 1,
    "engine": {"backend": "noop", "model": "m", "flags": {"tensor_parallel_size": 2, "max_model_len": 4096}},
    "params": {"max_num_seqs": {"type": "int", "low": 8, "high": 256, "log": True}},
}


def _write(tmp_path: Path, data) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


def _with(**changes):
    d = BASE
    for dotted, value in changes.items():
        d = with_setting(d, dotted.replace("__", "."), value)
    return d


def test_minimal_space_loads_with_defaults(tmp_path):
    sp = load_space(_write(tmp_path, BASE))
    assert sp.objective_names == ["oom_per_1k", "p99_e2e_s"]
    assert sp.workload.num_requests == 1000 and sp.workload.concurrency == 16
    assert sp.study.sampler == "autotune"


@pytest.mark.parametrize("path", sorted((REPO / "search_spaces").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_spaces_load(path):
    sp = load_space(path)
    assert sp.params


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_with(params__max_num_seqs={"type": "int", "low": 300, "high": 8}), "params.max_num_seqs: low (300.0) must be <= high"),
        (_with(params__block_size={"type": "categorical", "choices": []}), "params.block_size: categorical params need a non-empty"),
        (_with(params__max_num_seq={"type": "int", "low": 1, "high": 2}), "unknown vLLM flag 'max_num_seq'"),
        (_with(engine__colour="red"), "engine.colour: unknown key"),
        (_with(workload__num_requests="many"), "workload.num_requests: Input should be a valid integer"),
        (_with(version=2), "version: Input should be 1"),
        (_with(params__enforce_eager={"type": "int", "low": 0, "high": 1}), "enforce_eager: vLLM takes a bool"),
        (_with(constraints=[{"left": "max_num_batched_tokens", "op": ">=", "right": "max_len"}]),
         "constraints[0] names unknown param 'max_len'"),
        (_with(params__max_num_seqs={"type": "int", "low": 8, "high": 64, "when": {"enforce_eager": True}}),
         "names 'enforce_eager', which is not a searched param"),
        (_with(engine__flags={"max_num_seqs": 8, "max_model_len": 4096}), "'max_num_seqs' is both fixed"),
        (_with(engine__flags__block_size=24), "engine.flags: block_size must be one of 1, 8, 16, 32, 64, 128"),
        (_with(engine__flags__enforce_eager="yes"), "engine.flags: enforce_eager takes a bool, not 'yes'"),
        (_with(params__kv_cache_dtype={"type": "categorical", "choices": ["auto", "fp4"]}),
         "params: kv_cache_dtype must be one of auto, fp8"),
        (_with(references=[{"name": "r", "flags": {"max_num_seqs": 8.5}}]),
         "references.0.flags: max_num_seqs takes a int, not 8.5"),
        (_with(engine__allow_unmodelled_flags="sometimes"), "engine.allow_unmodelled_flags: Input should be a valid"),
        (_with(objectives=[{"metric": "goodput_rps_per_gpu", "direction": "maximize"}]),
         "goodput_rps_per_gpu needs workload.goodput_slo"),
        (_with(slo={"slo_attainment": {"min": 0.9}}), "slo_attainment needs workload.goodput_slo"),
        (_with(engine__env={"VLLM_USE_V2_MODEL_RUNNER": "yes"}),
         "engine.env: VLLM_USE_V2_MODEL_RUNNER: 'yes' is not an integer"),
        (_with(engine__sim_profile="nope.yaml"), "nope.yaml: no such profile file"),
    ],
)
def test_schema_errors_name_the_field(tmp_path, data, expected):
    with pytest.raises(UserError) as e:
        load_space(_write(tmp_path, data))
    msg = str(e.value)
    assert expected in msg
    assert "\n" not in msg and str(tmp_path / "space.yaml") in msg


def test_malformed_yaml_gives_line(tmp_path):
    with pytest.raises(UserError, match=r"line \d+, column \d+: malformed YAML"):
        load_space(_write(tmp_path, "version: 1\nparams: [a, b\n"))


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_space(tmp_path / "nope.yaml")


def test_allowing_unmodelled_flags_does_not_change_the_study_fingerprint(tmp_path):
    """The switch permits a run; it changes no trial, so a study may be resumed with it flipped."""
    from autotune.space import space_fingerprint

    plain = load_space(_write(tmp_path, BASE))
    allowed = load_space(_write(tmp_path, _with(engine__allow_unmodelled_flags=True)))
    assert allowed.engine.allow_unmodelled_flags and not plain.engine.allow_unmodelled_flags
    assert space_fingerprint(allowed) == space_fingerprint(plain)


def test_the_documented_example_space_is_a_valid_sim_space():
    import re

    from autotune.space.loader import parse_space
    from autotune.study.loop.validate import validate_for_backend

    doc = REPO / "docs" / "search_space.md"
    block = re.search(r"```yaml\n(.*?)```", doc.read_text(), re.S)
    assert block is not None
    sp = parse_space(yaml.safe_load(block.group(1)), doc)
    validate_for_backend(sp)  # no flag the simulator ignores
    assert sp.engine.backend == "sim" and sp.params["max_cudagraph_capture_size"].when == {"enforce_eager": False}


def test_goodput_objective_with_its_slo_loads(tmp_path):
    sp = load_space(_write(tmp_path, _with(objectives=[{"metric": "goodput_rps_per_gpu", "direction": "maximize"}],
                                           workload__goodput_slo={"ttft_s": 2.0, "tpot_s": 0.1})))
    assert sp.objective_names == ["goodput_rps_per_gpu"]


def test_sim_profile_is_relative_to_the_space_file_and_survives_a_saved_copy(tmp_path, monkeypatch):
    from autotune.deploy import NOMINAL, SimProfile
    from autotune.space.loader import parse_space

    truth = NOMINAL.perturbed(3)
    truth.save(tmp_path / "truth.yaml")
    (tmp_path / "spaces").mkdir()
    space = _write(tmp_path / "spaces", _with(engine__sim_profile="../truth.yaml"))
    monkeypatch.chdir(REPO)  # anywhere but the space's directory
    sp = load_space(space)
    assert sp.engine.profile == truth and Path(sp.engine.sim_profile) == tmp_path / "truth.yaml"
    copy = parse_space(sp.model_dump(mode="json"), tmp_path / "run" / "space.yaml")  # the run dir's copy
    assert copy.engine.profile == truth
    assert load_space(_write(tmp_path, BASE)).engine.profile == NOMINAL == SimProfile()


def test_fingerprint_counts_the_vllm_env_vars_and_the_profile_content(tmp_path):
    from autotune.deploy import NOMINAL
    from autotune.space import space_fingerprint

    def fp(data, name="space.yaml"):
        p = tmp_path / name
        p.write_text(yaml.safe_dump(data))
        return space_fingerprint(load_space(p))

    base = fp(BASE)
    assert fp(_with(engine__env={"HF_TOKEN": "secret"})) == base  # secrets may rotate
    assert fp(_with(engine__env={"VLLM_USE_V2_MODEL_RUNNER": "0"})) != base  # another physics
    assert fp(_with(engine__env={"VLLM_CPU_KVCACHE_SPACE": "1"})) != fp(_with(engine__env={"VLLM_CPU_KVCACHE_SPACE": "2"}))
    for name, seed in (("a.yaml", 1), ("b.yaml", 1), ("c.yaml", 2)):
        NOMINAL.perturbed(seed).save(tmp_path / name)
    a, b, c = (fp(_with(engine__sim_profile=n), "s.yaml") for n in ("a.yaml", "b.yaml", "c.yaml"))
    assert a == b != c and a != base  # the content counts, not the file's name


def test_a_study_fingerprinted_before_the_cpu_kv_size_counted_resumes_once_and_is_upgraded(tmp_path):
    """Studies created before VLLM_CPU_KVCACHE_SPACE entered the fingerprint still resume; from
    then on a changed KV size is refused like any other change of the landscape."""
    import optuna

    from autotune.space import space_fingerprint
    from autotune.space.loader import legacy_space_fingerprint
    from autotune.study.loop.opening import FINGERPRINT_ATTR, open_study

    def space(gib):
        p = tmp_path / f"s{gib}.yaml"
        p.write_text(yaml.safe_dump(_with(engine__env={"VLLM_CPU_KVCACHE_SPACE": gib})))
        return load_space(p)

    one, two = space("1"), space("2")
    assert legacy_space_fingerprint(one) == legacy_space_fingerprint(two) != space_fingerprint(one)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    old = optuna.create_study(study_name="s", storage=storage, directions=["minimize"] * len(one.objectives))
    old.set_user_attr(FINGERPRINT_ATTR, legacy_space_fingerprint(one))  # as an older autotune wrote it
    open_study(one, "s", storage, optuna.samplers.RandomSampler())
    assert optuna.load_study(study_name="s", storage=storage).user_attrs[FINGERPRINT_ATTR] == space_fingerprint(one)
    with pytest.raises(UserError, match="different space"):
        open_study(two, "s", storage, optuna.samplers.RandomSampler())

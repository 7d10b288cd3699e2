"""The registry against the real vLLM (the CPU build, 0.32.0): names, CLI forms and defaults.

Reads vLLM's own ``EngineArgs`` and parser in its venv; skips without it (fails in CI, see
tests/integration/conftest.py).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from autotune.engine import FLAG_SPECS, flags_to_cli_args

pytestmark = pytest.mark.integration

# One sample value per flag, fed through vLLM's own `vllm serve` parser.
SAMPLES = {
    "tokenizer": "tok", "served_model_name": "served", "quantization": "fp8", "load_format": "dummy",
    "download_dir": "/tmp/weights", "distributed_executor_backend": "mp", "scheduling_policy": "priority",
}

_PROBE = r"""
import dataclasses, json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.utils.argparse_utils import FlexibleArgumentParser

names, argv = json.loads(sys.argv[1]), json.loads(sys.argv[2])
defaults = {}
for f in dataclasses.fields(EngineArgs):
    if f.name in names:
        defaults[f.name] = f.default if f.default is not dataclasses.MISSING else "<factory>"
ns = vars(EngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args(argv))
parsed = {n: ns.get(n) for n in names}
print(json.dumps({"defaults": defaults, "parsed": parsed}, default=str))
"""

# EngineArgs leaves these None and lets the model decide; autotune declares the value vLLM
# picks for every decoder-only generative model.
MODEL_DECIDES = {"enable_prefix_caching": True, "enable_chunked_prefill": True}


def _sample(name: str, i: int):
    spec = FLAG_SPECS[name]
    if spec.type is bool:
        return i % 2 == 0  # both --x and --no-x forms
    if spec.choices:
        return spec.choices[-1]
    return SAMPLES.get(name, {int: 3, float: 0.5}.get(spec.type))


@pytest.fixture(scope="module")
def vllm_view(vllm_python):
    sample = {n: _sample(n, i) for i, n in enumerate(FLAG_SPECS)}
    argv = ["--model", "m", *flags_to_cli_args(sample)]
    r = subprocess.run([vllm_python, "-c", _PROBE, json.dumps(list(FLAG_SPECS)), json.dumps(argv)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return sample, json.loads(r.stdout.strip().splitlines()[-1])


def test_every_flag_is_an_engine_arg_with_vllms_default(vllm_view):
    _, view = vllm_view
    assert sorted(view["defaults"]) == sorted(FLAG_SPECS)
    for name, spec in FLAG_SPECS.items():
        theirs = view["defaults"][name]
        if name in MODEL_DECIDES:
            assert theirs is None and spec.default == MODEL_DECIDES[name]
        elif spec.default_is_static:
            assert spec.default == theirs, name
        else:  # per device or from the model: EngineArgs resolves it later
            assert theirs is None, name


def test_vllms_parser_reads_our_cli_forms_back(vllm_view):
    sample, view = vllm_view
    for name, value in sample.items():
        got = view["parsed"][name]
        if name == "served_model_name":
            got = got[0]  # vLLM keeps a list of names
        assert got == value or str(got) == str(value), (name, value, got)

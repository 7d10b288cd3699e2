"""A trace file with request options replayed against REAL vLLM (the CPU build, a tiny Qwen2 with
dummy weights): vLLM accepts every field the load generator sends, answers with the token counts
the records claim, and hits its prefix cache on the blocks the trace says are shared.
CPU figures for a toy model, never GPU measurements.
"""

from __future__ import annotations

import asyncio
import json
import os

import aiohttp
import pytest

from autotune.backends.vllm.server import ServerProcess, build_command, free_port
from autotune.loadgen import LoadGenerator, PhaseEnd
from autotune.workload import WorkloadSpec, generate_trace
from tests.integration.conftest import CPU_ENV, VLLM_PYTHON, _check_vllm, cpu_server
from tests.tinymodel import build_tiny_model

pytestmark = pytest.mark.integration

FLAGS = {"load_format": "dummy", "dtype": "bfloat16", "max_model_len": 256, "block_size": 32,
         "max_num_seqs": 4, "enforce_eager": True, "enable_prefix_caching": True}
# (prompt tokens, output tokens, hash_ids of 64-token blocks, options)
LINES = [
    (150, 8, [0, 1, 10], {}),
    (160, 8, [0, 1, 11], {}),
    (170, 6, [0, 1, 12], {"prompt_logprobs": 2}),
    (140, 6, [0, 13], {"prompt_logprobs": 0}),  # k = 0 streams and still computes the prompt's logits
    (150, 5, [0, 1, 14], {"n": 3}),
    (130, 7, [0, 15], {"logprobs": 1}),
    (150, 5, [0, 1, 16], {"logprobs": 2, "n": 2, "prompt_logprobs": 1}),
    (120, 9, [20], {}),
]


class _Watch:
    def __init__(self, srv: ServerProcess):
        self.srv = srv

    async def dead(self) -> str | None:
        rc = self.srv.exit_code()
        return None if rc is None else f"server exited with status {rc}"


async def _metric(base_url: str, name: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(base_url + "/metrics") as r:
        text = await r.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_options_and_shared_blocks_on_real_vllm(tmp_path):
    why = _check_vllm()
    if why:
        pytest.skip(why)
    trace_file = tmp_path / "trace.jsonl"
    trace_file.write_text("".join(json.dumps({"arrival_s": 0.05 * i, "prompt_tokens": p, "output_tokens": o,
                                              "hash_ids": h, **opt}) + "\n"
                                  for i, (p, o, h, opt) in enumerate(LINES)))
    spec = WorkloadSpec(trace={"path": str(trace_file), "block_tokens": 64}, concurrency=None, token_id_high=1000,
                        request_timeout_s=120).loaded()
    trace = generate_trace(spec, max_model_len=256)
    model = build_tiny_model(tmp_path / "tiny-qwen2")
    port = free_port()
    log = tmp_path / "server.log"
    srv = ServerProcess(build_command(cpu_server(model, str(VLLM_PYTHON)), FLAGS, port), {**os.environ, **CPU_ENV},
                        log, "127.0.0.1", port)
    srv.start()
    try:
        ready, why = asyncio.run(srv.wait_ready(600))
        assert ready, f"{why}: {log.read_text()[-2000:]}"
        gen = LoadGenerator(base_url=srv.base_url, model=str(model), spec=spec, trace=trace, token_id_high=1000)
        res = asyncio.run(gen.run_phase([t.index for t in trace], _Watch(srv)))
        hits = asyncio.run(_metric(srv.base_url, "vllm:prefix_cache_hits_total"))
    finally:
        srv.stop()
    assert res.end == PhaseEnd.COMPLETED, res.reason
    for t in trace:
        o = res.outcomes[t.index]
        assert o.ok, f"request {t.index} {t.options}: {o.error}"
        assert o.options == t.options
        assert o.output_tokens == o.expected_output_tokens == t.options.n * t.output_len
        assert o.prompt_tokens == t.prompt_len
        assert o.streamed is (not t.options.prompt_logprobs)
        assert (o.ttft_s is not None) is o.streamed
    # Requests sharing hash IDs sent the same leading tokens: vLLM's prefix cache served some.
    assert hits > 0

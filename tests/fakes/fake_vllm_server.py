"""A small fake of vLLM's OpenAI-compatible server, for failures real vLLM on CPU cannot produce.

It is NOT vLLM. It speaks the same HTTP (/health, /metrics, streaming /v1/completions with
usage) and prints vLLM's real log messages (copied from vLLM's source; see
docs/vllm_backend.md) for: a CUDA OOM at runtime, OOMs at startup, a hang, a slow start, an
argument error. Behaviour comes from the FAKE_VLLM environment variable (JSON):

  scenario:     ok | runtime_oom | crash | hang | startup_oom_kv | startup_oom_len |
                startup_cuda_oom | never_ready
  fail_after:   completed requests (in this start) before a runtime failure (default 5)
  fail_starts:  only the first K starts fail (default: all); counted in state_dir/starts
  state_dir:    where starts and received requests (requests.jsonl) are recorded
  log_filler_kib: KiB of INFO lines printed at startup by failing starts (to test the log cap)
  startup_delay_s, token_delay_s, kv_tokens, preempt_every

Prefix-cache counters follow vLLM's accounting (prefix_cache.py), with a cache that never
evicts: the fake has no memory to run out of.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from aiohttp import web
from prefix_cache import PrefixCacheAccounting  # tests/fakes is on sys.path (see the shim)

BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
DEFAULT_BLOCK_SIZE = 16  # vLLM's on GPUs
# A subset of vLLM's CacheDType (vllm/config/cache.py); argparse rejects anything else.
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")


def log(who: str, level: str, where: str, msg: str) -> None:
    # vLLM's format: "(EngineCore pid=123) ERROR 11-29 15:47:05 [core.py:2663] message"
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({who} pid={os.getpid()}) {level} {stamp} [{where}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="api_server.py")
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--block-size", type=int, choices=BLOCK_SIZES)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--served-model-name")
    p.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    args, _ = p.parse_known_args(argv)
    return args


class Fake:
    def __init__(self, cfg: dict, args: argparse.Namespace):
        self.cfg = cfg
        self.args = args
        self.scenario = cfg.get("scenario", "ok")
        self.state = Path(cfg["state_dir"]) if cfg.get("state_dir") else None
        self.start_no = self._count_start()
        fail_starts = cfg.get("fail_starts")
        self.failing = fail_starts is None or self.start_no < int(fail_starts)
        self.completed = 0
        self.in_flight = 0
        self.hung = False
        self.counters = {"vllm:num_preemptions_total": 0.0, "vllm:prefix_cache_queries_total": 0.0,
                         "vllm:prefix_cache_hits_total": 0.0, "vllm:prompt_tokens_total": 0.0,
                         "vllm:generation_tokens_total": 0.0}
        self.e2e: list[float] = []
        self.prefix_cache = PrefixCacheAccounting(args.block_size or DEFAULT_BLOCK_SIZE)

    def _count_start(self) -> int:
        if not self.state:
            return 0
        self.state.mkdir(parents=True, exist_ok=True)
        f = self.state / "starts"
        n = int(f.read_text()) if f.exists() else 0
        f.write_text(str(n + 1))
        return n

    # -- failures, printed the way vLLM prints them ------------------------------------
    def die_runtime_oom(self) -> None:
        who = "EngineCore_DP0"
        log(who, "ERROR", "core.py:2663", "EngineCore encountered a fatal error.")
        log(who, "ERROR", "core.py:2663", "Traceback (most recent call last):")
        log(who, "ERROR", "core.py:2663", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 0 has a total capacity of 79.25 GiB of which 1.06 GiB is free.")
        log("APIServer", "ERROR", "async_llm.py:700", "AsyncLLM output_handler failed.")
        print("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
              "See stack trace (above) for the root cause.", file=sys.stderr, flush=True)
        os._exit(1)

    def die_crash(self) -> None:
        log("EngineCore_DP0", "ERROR", "core.py:2663", "EngineCore encountered a fatal error.")
        log("EngineCore_DP0", "ERROR", "core.py:2663", "RuntimeError: NCCL error: unhandled system error")
        os._exit(1)

    async def maybe_fail(self) -> None:
        if not self.failing or self.completed < int(self.cfg.get("fail_after", 5)):
            return
        if self.scenario == "runtime_oom":
            self.die_runtime_oom()
        elif self.scenario == "crash":
            self.die_crash()
        elif self.scenario == "hang":
            self.hung = True

    def admit(self, prompt: list[int]) -> None:
        """vLLM's prefix-cache accounting for one new request."""
        if not self.args.enable_prefix_caching:
            return  # vLLM records no lookup when prefix caching is off
        hit = self.prefix_cache.admit(prompt)
        self.counters["vllm:prefix_cache_queries_total"] += len(prompt)
        self.counters["vllm:prefix_cache_hits_total"] += hit

    # -- HTTP ---------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, request: web.Request) -> web.Response:
        labels = f'engine="0",model_name="{self.args.model}"'
        lines = [f"{k}{{{labels}}} {v}" for k, v in self.counters.items()]
        lines.append(f"vllm:kv_cache_usage_perc{{{labels}}} {min(1.0, self.in_flight / 8)}")
        lines.append(f"vllm:num_requests_running{{{labels}}} {self.in_flight}")
        lines.append(f"vllm:num_requests_waiting{{{labels}}} 0.0")
        cum = 0
        for le in (0.1, 0.5, 1.0, 5.0):
            cum = sum(1 for x in self.e2e if x <= le)
            lines.append(f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="{le}"}} {float(cum)}')
        lines.append(f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="+Inf"}} {float(len(self.e2e))}')
        lines.append(f"vllm:e2e_request_latency_seconds_sum{{{labels}}} {sum(self.e2e)}")
        lines.append(f"vllm:e2e_request_latency_seconds_count{{{labels}}} {float(len(self.e2e))}")
        return web.Response(text="\n".join(lines) + "\n")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if self.state:
            with (self.state / "requests.jsonl").open("a") as f:
                f.write(json.dumps({k: body.get(k) for k in ("prompt", "max_tokens", "min_tokens", "ignore_eos",
                                                             "stream", "temperature", "model")}) + "\n")
        prompt = body["prompt"]
        n = int(body["max_tokens"])
        t0 = time.monotonic()
        self.admit(prompt)
        self.in_flight += 1
        try:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(n):
                while self.hung:
                    await asyncio.sleep(3600)
                await asyncio.sleep(float(self.cfg.get("token_delay_s", 0.002)))
                chunk = {"object": "text_completion", "model": body.get("model"),
                         "choices": [{"index": 0, "text": f" t{i}", "finish_reason": "length" if i == n - 1 else None}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            usage = {"choices": [], "usage": {"prompt_tokens": len(prompt), "completion_tokens": n,
                                               "total_tokens": len(prompt) + n}}
            await resp.write(f"data: {json.dumps(usage)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        finally:
            self.in_flight -= 1
        self.completed += 1
        self.e2e.append(time.monotonic() - t0)
        self.counters["vllm:prompt_tokens_total"] += len(prompt)
        self.counters["vllm:generation_tokens_total"] += n
        every = int(self.cfg.get("preempt_every", 0))
        if every and self.completed % every == 0:
            self.counters["vllm:num_preemptions_total"] += 1
        await self.maybe_fail()
        return resp


def main(argv: list[str]) -> None:
    cfg = json.loads(os.environ.get("FAKE_VLLM", "{}"))
    args = parse_args(argv)  # exits 2 with argparse's "error: argument --block-size: invalid choice" line
    fake = Fake(cfg, args)
    log("APIServer", "INFO", "api_utils.py:286", f"non-default args: {{'model': {args.model!r}, 'port': {args.port}}}")
    for i in range(int(cfg.get("log_filler_kib", 0)) if fake.failing else 0):
        log("APIServer", "INFO", "filler.py:1", f"filler line {i} " + "." * 960)
    time.sleep(float(cfg.get("startup_delay_s", 0.1)))
    if fake.failing:
        if fake.scenario == "startup_oom_kv":
            log("EngineCore_DP0", "ERROR", "core.py:1510", "EngineCore failed to start.")
            print("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                  "when initializing the engine.", file=sys.stderr, flush=True)
            print("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
                  file=sys.stderr, flush=True)
            sys.exit(1)
        if fake.scenario == "startup_oom_len":
            print("ValueError: To serve at least one request with the model's max seq len (32768), (4.00 GiB KV "
                  "cache is needed, which is larger than the available KV cache memory (1.20 GiB). Based on the "
                  "available memory, the estimated maximum model length is 9824. Try increasing "
                  "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
                  file=sys.stderr, flush=True)
            sys.exit(1)
        if fake.scenario == "startup_cuda_oom":
            log("Worker", "INFO", "gpu_model_runner.py:4100", "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)")
            print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
                  "capacity of 79.25 GiB of which 120.00 MiB is free.", file=sys.stderr, flush=True)
            sys.exit(1)
        if fake.scenario == "never_ready":
            log("Worker", "INFO", "gpu_model_runner.py:4100", "Capturing CUDA graphs (decode, FULL)")
            while True:
                time.sleep(3600)
    log("EngineCore_DP0", "INFO", "kv_cache_utils.py:2327",
        f"GPU KV cache size: {int(cfg.get('kv_tokens', 4096)):,} tokens, Maximum concurrency for 2,048 tokens "
        "per request: 2.00x")
    app = web.Application()
    app.router.add_get("/health", fake.health)
    app.router.add_get("/metrics", fake.metrics)
    app.router.add_post("/v1/completions", fake.completions)
    log("APIServer", "INFO", "entry.py:140", f"Starting vLLM server on http://{args.host}:{args.port}")
    web.run_app(app, host=args.host, port=args.port, print=None, handle_signals=True)


if __name__ == "__main__":
    main(sys.argv[1:])

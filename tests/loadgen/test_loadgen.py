"""The load generator against a small in-process OpenAI-style server (aiohttp, same event loop)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
from aiohttp import web

from autotune.early_stop import p99_lower_bound, p99_rank_bound
from autotune.loadgen import LoadGenerator, PhaseEnd
from autotune.loadgen.client import ErrorKind
from autotune.workload import LengthDist, WorkloadSpec, generate_trace


class Server:
    """Streams ``max_tokens`` chunks per sequence. Knobs: reject (400) some prompts, die or hang
    after N requests, delay plain (non-streamed) answers, pad chunks past aiohttp's 64 KiB line limit.

    Like vLLM's /v1/completions it refuses ``prompt_logprobs > 0`` with ``stream: true`` and
    ``n > 1`` with greedy sampling, streams one chunk per sequence per step (``choices[0].index``
    names the sequence) and reports usage over all sequences."""

    def __init__(self, die_after: int | None = None, hang_after: int | None = None, reject_len: int | None = None,
                 plain_delay_s: float = 0.0, pad_bytes: int = 0):
        self.die_after, self.hang_after, self.reject_len = die_after, hang_after, reject_len
        self.plain_delay_s, self.pad_bytes = plain_delay_s, pad_bytes
        self.in_flight = self.max_in_flight = self.done = 0
        self.dead = False
        self.bodies: list[dict] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    @staticmethod
    def refusal(body: dict) -> str | None:
        """vLLM's own request checks (completion/protocol.py, sampling_params.py)."""
        if body.get("stream") and (body.get("prompt_logprobs") or 0) > 0:
            return "`prompt_logprobs` are not available when `stream=True`."
        if body.get("n", 1) > 1 and body.get("temperature") == 0.0:
            return f"n must be 1 when using greedy sampling, got {body['n']}."
        return None

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if self.reject_len is not None and len(body["prompt"]) == self.reject_len:
            return web.json_response({"error": {"message": "too long"}}, status=400)
        if (why := self.refusal(body)) is not None:
            return web.json_response({"error": {"message": why}}, status=400)
        n, tokens = body.get("n", 1), body["max_tokens"]
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n * tokens}
        if not body["stream"]:
            await asyncio.sleep(self.plain_delay_s)
            plp = body.get("prompt_logprobs")
            choices = [{"index": i, "text": "x" * tokens,
                        "prompt_logprobs": None if plp is None else [None] + [{"1": -1.0}] * (len(body["prompt"]) - 1)}
                       for i in range(n)]
            self.done += 1
            return web.json_response({"choices": choices, "usage": usage})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        resp = web.StreamResponse()
        await resp.prepare(request)
        try:
            for i in range(tokens):
                if self.dead:
                    raise ConnectionResetError  # aiohttp drops the connection mid-stream
                while self.hang_after is not None and self.done >= self.hang_after:
                    await asyncio.sleep(3600)
                await asyncio.sleep(0.002)
                for seq in range(n):
                    choice = {"index": seq, "text": f"x{i}" + " " * self.pad_bytes}
                    if body.get("logprobs") is not None:
                        choice["logprobs"] = {"tokens": [f"x{i}"], "top_logprobs": [{"x": -0.1}] * body["logprobs"]}
                    await resp.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
            await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())
        finally:
            self.in_flight -= 1
        self.done += 1
        if self.die_after is not None and self.done >= self.die_after:
            self.dead = True
        return resp

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)  # hung handlers must not delay cleanup
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


class Watch:
    def __init__(self, server: Server):
        self.server = server

    async def dead(self) -> str | None:
        return "server gone" if self.server.dead else None


def spec(**kw) -> WorkloadSpec:
    base = dict(num_requests=24, concurrency=4, prompt_len=LengthDist(dist="uniform", mean=20, min=5, max=35),
                output_len=LengthDist(dist="uniform", mean=8, min=3, max=13), request_timeout_s=30, token_id_high=500)
    base.update(kw)
    return WorkloadSpec(**base)


async def run(server: Server, s: WorkloadSpec, **kw):
    await server.start()
    try:
        trace = generate_trace(s)
        gen = LoadGenerator(base_url=server.url, model="m", spec=s, trace=trace, **kw)
        res = await gen.run_phase([t.index for t in trace], Watch(server))
        return trace, res
    finally:
        await server.stop()


def test_closed_loop_keeps_concurrency_and_measures_each_token():
    server = Server()
    s = spec()
    trace, res = asyncio.run(run(server, s))
    assert res.end == PhaseEnd.COMPLETED and not res.unsent and not res.casualties
    assert server.max_in_flight == 4
    for t in trace:
        o = res.outcomes[t.index]
        assert o.ok and o.output_tokens == t.output_len and len(o.itl_s) == t.output_len - 1
        assert 0 < o.ttft_s <= o.e2e_s
    # Exact prompts as token IDs within the served vocabulary, exact output length, no early EOS.
    body = {tuple(b["prompt"]): b for b in server.bodies}
    for t in trace:
        b = body[tuple(t.prompt_token_ids(s))]
        assert b["max_tokens"] == b["min_tokens"] == t.output_len and b["ignore_eos"] is True
        assert b["stream_options"] == {"include_usage": True} and max(b["prompt"]) < 500


def test_open_loop_follows_arrival_times():
    server = Server()
    s = spec(request_rate=200.0, concurrency=None, num_requests=30)
    trace, res = asyncio.run(run(server, s))
    assert res.end == PhaseEnd.COMPLETED
    sends = [res.outcomes[t.index].send_s for t in trace]
    assert sends == sorted(sends)
    # Never sent before its arrival time (a lower bound from sleeping until due, not a timing claim).
    assert all(o >= t.arrival_s - 1e-6 for o, t in zip(sends, trace, strict=True))


def test_engine_death_cancels_in_flight_and_holds_unsent():
    server = Server(die_after=6)
    trace, res = asyncio.run(run(server, spec()))
    assert res.end == PhaseEnd.ENGINE_DEAD and res.reason == "server gone"
    assert res.casualties and all(not res.outcomes[i].ok for i in res.casualties)
    ok = [i for i, o in res.outcomes.items() if o.ok]
    assert len(ok) >= 6 and len(ok) + len(res.casualties) + len(res.unsent) == 24
    assert res.unsent == sorted(res.unsent)  # held in send order for the next phase


def test_hang_is_reported():
    server = Server(hang_after=5)
    _, res = asyncio.run(run(server, spec(), hang_timeout_s=0.5, watch_interval_s=0.05))
    assert res.end == PhaseEnd.HANG and res.casualties and res.unsent
    assert all(res.outcomes[i].error_kind == ErrorKind.CANCELLED for i in res.casualties)


def test_rejected_request_is_an_error_not_an_engine_death():
    s = spec()
    victim = generate_trace(s)[3]
    server = Server(reject_len=victim.prompt_len)
    _, res = asyncio.run(run(server, s))
    assert res.end == PhaseEnd.COMPLETED and not res.casualties
    bad = [o for o in res.outcomes.values() if not o.ok]
    assert bad and all(o.error_kind == ErrorKind.HTTP_4XX and "HTTP 400" in o.error for o in bad)


def test_early_stop_hook_stops_sending_and_lets_in_flight_finish():
    server = Server()
    done: list[int] = []

    def on_done(o):
        done.append(o.index)
        return len(done) >= 5

    _, res = asyncio.run(run(server, spec(), on_done=on_done))
    assert res.end == PhaseEnd.EARLY_STOP and res.unsent
    assert all(o.ok for o in res.outcomes.values())  # the ones already sent were answered
    assert len(res.outcomes) + len(res.unsent) == 24


def test_p99_lower_bound_holds_whatever_the_rest_does():
    rng = np.random.default_rng(0)
    total = 100
    ok = list(rng.uniform(1, 2, size=50))
    lb = p99_lower_bound(ok, total)
    assert lb > 0
    for n_more in (0, 1, 10, 50):  # the rest succeed (any latency) or fail (excluded)
        for _ in range(10):
            rest = list(rng.uniform(0, 3, size=n_more))
            assert lb <= np.percentile(ok + rest, 99) + 1e-12
    assert p99_lower_bound([], total) == 0.0
    assert p99_rank_bound(1) == 1 and p99_rank_bound(1000) == 11


OPTIONS = {"prompt_logprobs": {"fraction": 0.3, "value": 2}, "logprobs": {"fraction": 0.3, "value": 1},
           "n": {"fraction": 0.3, "value": 3}}


def test_request_options_are_sent_and_recorded():
    server = Server()
    s = spec(num_requests=40, options=OPTIONS)
    trace, res = asyncio.run(run(server, s))
    assert res.end == PhaseEnd.COMPLETED and all(o.ok for o in res.outcomes.values())
    body = {tuple(b["prompt"]): b for b in server.bodies}
    kinds = set()
    for t in trace:
        o, b, opt = res.outcomes[t.index], body[tuple(t.prompt_token_ids(s))], t.options
        kinds.add((opt.prompt_logprobs is not None, opt.logprobs is not None, opt.n > 1))
        # Exactly the trace's options, by vLLM's field names, and nothing it did not ask for.
        assert b.get("prompt_logprobs") == opt.prompt_logprobs and b.get("logprobs") == opt.logprobs
        assert b.get("n", 1) == opt.n and o.options == opt
        # vLLM refuses to stream prompt_logprobs > 0: those go plain, without TTFT.
        assert b["stream"] is o.streamed is (opt.prompt_logprobs is None)
        assert ("stream_options" in b) is o.streamed
        assert o.expected_output_tokens == o.output_tokens == opt.n * t.output_len
        if o.streamed:
            assert 0 < o.ttft_s <= o.e2e_s and len(o.itl_s) == t.output_len - 1  # sequence 0's gaps
        else:
            assert o.ttft_s is None and o.e2e_s > 0 and not o.itl_s
    assert len(kinds) >= 5  # the mix really mixes


def test_a_stream_line_longer_than_aiohttps_line_limit_is_read():
    server = Server(pad_bytes=200_000)
    _, res = asyncio.run(run(server, spec(num_requests=3)))
    assert res.end == PhaseEnd.COMPLETED and all(o.ok for o in res.outcomes.values())


def test_a_slow_plain_request_is_not_a_hang():
    """A request that cannot stream sends nothing until it is done; only streams can show a hang."""
    server = Server(plain_delay_s=1.0)
    s = spec(num_requests=4, options={"prompt_logprobs": {"fraction": 1.0, "value": 1}})
    _, res = asyncio.run(run(server, s, hang_timeout_s=0.3, watch_interval_s=0.05))
    assert res.end == PhaseEnd.COMPLETED and all(o.ok and not o.streamed for o in res.outcomes.values())

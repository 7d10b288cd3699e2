"""Write a small SYNTHETIC trace in the Mooncake JSONL format (kvcache-ai/Mooncake, FAST25-release).

The file is made up, not recorded: it exists so the repository can replay a trace file
without shipping anyone's traffic. It imitates what makes real chat traces hard on an
engine: bursty arrivals, multi-turn conversations whose later turns repeat the earlier ones
(shared ``hash_ids`` = shared prefix blocks), a few system prompts shared by many
conversations, and a tail of long RAG-style prompts.

Format: one JSON object per line, ``timestamp`` (ms), ``input_length``, ``output_length``,
``hash_ids`` (one ID per 512-token block of the prompt; equal IDs are equal tokens).

    .venv/bin/python scripts/make_synthetic_trace.py            # data/traces/synthetic_mooncake_chat.jsonl
    .venv/bin/python scripts/make_synthetic_trace.py --requests 1000 --out /tmp/t.jsonl
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

BLOCK = 512  # tokens per hash ID, as in the Mooncake traces
SYSTEM_PROMPTS = (1024, 1536, 512)  # tokens; each shared by the conversations that use it
MAX_CONTEXT = 8192
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "data" / "traces" / "synthetic_mooncake_chat.jsonl"


@dataclass
class Conversation:
    hash_ids: list[int]  # the last turn's prompt blocks
    prompt: int  # the last turn's prompt tokens
    context: int  # tokens so far: last prompt + its answer


@dataclass
class Ids:
    """Block IDs: the system prompts' blocks first, then fresh ones as prompts need them."""

    system: list[list[int]] = field(default_factory=list)
    next_id: int = 0

    def __post_init__(self) -> None:
        for tokens in SYSTEM_PROMPTS:
            self.system.append(self.fresh(tokens // BLOCK))

    def fresh(self, n: int) -> list[int]:
        out = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return out


def _blocks(prompt: int) -> int:
    return -(-prompt // BLOCK)


def make_trace(requests: int, seed: int, rate: float, burstiness: float) -> list[dict]:
    rng = np.random.default_rng(seed)
    ids = Ids()
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=requests)
    times_ms = np.rint(np.cumsum(gaps) * 1000).astype(int)
    open_convs: list[Conversation] = []
    out: list[dict] = []
    for t in times_ms:
        answer = int(np.clip(rng.lognormal(np.log(220), 0.7), 8, 1024))
        message = int(np.clip(rng.lognormal(np.log(150), 0.9), 4, 2000))
        if open_convs and rng.random() < 0.4:
            # A follow-up turn: the previous exchange is the new prompt's start. Only the
            # previous prompt's whole blocks can be shared: a replay generates other answer
            # tokens than the recorded ones, and a partial block is another block once full.
            conv = open_convs[int(rng.integers(len(open_convs)))]
            prompt = conv.context + message
            prefix = conv.hash_ids[: conv.prompt // BLOCK]
        else:
            system = int(rng.integers(len(SYSTEM_PROMPTS)))
            if rng.random() < 0.06:
                message = int(rng.integers(3000, 6000))  # a pasted document / RAG context
            prompt = SYSTEM_PROMPTS[system] + message
            prefix = list(ids.system[system])
            conv = Conversation([], 0, 0)
            open_convs.append(conv)
        hash_ids = prefix + ids.fresh(_blocks(prompt) - len(prefix))
        conv.hash_ids, conv.prompt, conv.context = hash_ids, prompt, prompt + answer
        if conv.context + 500 > MAX_CONTEXT:
            open_convs.remove(conv)
        out.append({"timestamp": int(t), "input_length": prompt, "output_length": answer, "hash_ids": hash_ids})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rate", type=float, default=2.0, help="mean arrival rate, requests/s")
    ap.add_argument("--burstiness", type=float, default=0.5, help="gamma shape, as vllm bench serve (1 = Poisson)")
    args = ap.parse_args()
    rows = make_trace(args.requests, args.seed, args.rate, args.burstiness)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} SYNTHETIC requests to {args.out}")


if __name__ == "__main__":
    main()

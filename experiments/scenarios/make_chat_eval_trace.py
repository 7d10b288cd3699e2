"""Write the SYNTHETIC chat + evaluation trace of the flagship mixed scenario (autotune JSONL format).

    .venv/bin/python experiments/scenarios/make_chat_eval_trace.py   # data/traces/synthetic_chat_eval.jsonl

Made up, not recorded. The chat requests are exactly search_spaces/qwen72b.yaml's workload
(its lengths and its 1024-token system prompt shared by 80 % of them, written as one
``hash_ids`` entry of ``block_tokens`` 1024); EVAL_SHARE of the requests are replaced, by a
seeded draw, with evaluation-style scoring requests as lm-eval-harness sends for
loglikelihood tasks through an OpenAI-compatible server: a long prompt (few-shot context plus
the continuation, EVAL_PROMPT tokens), a few output tokens, and ``prompt_logprobs: 1`` (the
logprob of every prompt token). This is the recipe of experiments/field_report/oom_rates.py,
written to data/traces/ so the scenario does not depend on that experiment's output.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from autotune.space import load_space
from autotune.workload import SYSTEM_PROMPT_BLOCK, generate_trace

REPO = Path(__file__).resolve().parents[2]
CHAT_SPACE = REPO / "search_spaces" / "qwen72b.yaml"
OUT = REPO / "data" / "traces" / "synthetic_chat_eval.jsonl"
EVAL_SHARE = 0.2
EVAL_PROMPT = (2000, 7000)  # tokens, uniform
EVAL_OUTPUT = (1, 16)  # tokens, uniform
SEED = 0


def rows() -> list[dict[str, Any]]:
    chat = load_space(CHAT_SPACE)
    max_len = int(chat.fixed_flags()["max_model_len"])
    rng = np.random.default_rng(SEED)
    out = []
    for tr in generate_trace(chat.workload, max_len):
        if rng.random() < EVAL_SHARE:
            row: dict[str, Any] = {"prompt_tokens": int(rng.integers(EVAL_PROMPT[0], EVAL_PROMPT[1] + 1)),
                                   "output_tokens": int(rng.integers(EVAL_OUTPUT[0], EVAL_OUTPUT[1] + 1)),
                                   "prompt_logprobs": 1}
        else:
            row = {"prompt_tokens": tr.prompt_len, "output_tokens": tr.output_len}
            if tr.prefix_blocks:
                row["hash_ids"] = [SYSTEM_PROMPT_BLOCK]
        out.append({"arrival_s": 0.0, **row})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    lines = rows()
    args.out.write_text("".join(json.dumps(r) + "\n" for r in lines))
    n_eval = sum("prompt_logprobs" in r for r in lines)
    print(f"wrote {len(lines)} SYNTHETIC requests ({n_eval} scoring requests with prompt_logprobs) to {args.out}")


if __name__ == "__main__":
    main()

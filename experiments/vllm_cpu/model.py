"""The ground-truth model: a Qwen2 with random weights, built here, served with ``--load-format dummy``.

Larger than tests/tinymodel.py on purpose: on one core of this CPU its matmuls (about 90 M parameters,
0.18 GFLOP per token) make prefill and decode cost real time, and its KV cache (8 KiB per token) is
read in full by every decode step, so batch size, chunking and preemption move latency. It stays
small enough that a server starts in about 30 s and a trial's benchmark runs in well under a minute.

Only ``config.json`` and a tokenizer are written (vLLM draws the weights). The tokenizer is a byte-level
BPE trained on generated text with ``tokenizers`` (vLLM's dependency, also in autotune's venv), so
nothing is downloaded. A copy of tests/tinymodel.py's builder is kept here, not imported, so that the
measured table's model cannot change when the tests' model does.

    .venv/bin/python -m experiments.vllm_cpu.model [OUT_DIR]      # default: experiments/vllm_cpu/.model
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DIR = HERE / ".model"

VOCAB_SIZE = 2048
MAX_POSITIONS = 4096

# 8 layers, hidden 1024, GQA 16 query / 4 KV heads of 64: KV per token = 2 (K, V) x 8 layers x 4 heads
# x 64 x 2 bytes (bf16) = 8 KiB. Head size 64 is one of the CPU attention backend's sizes
# (vllm/v1/attention/backends/cpu_attn.py, get_supported_head_sizes).
CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": MAX_POSITIONS,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 0,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 8,
    "attention_dropout": 0.0,
}
KV_BYTES_PER_TOKEN = 2 * CONFIG["num_hidden_layers"] * CONFIG["num_key_value_heads"] * CONFIG["head_dim"] * 2

_WORDS = ["alpha", "beta", "gamma", "delta", "tune", "serve", "cache", "block", "token", "batch",
          "prefill", "decode", "memory", "latency", "request", "engine", "queue", "model", "flag"]


def _corpus(n_lines: int = 6000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(_WORDS) if rng.random() < 0.5 else
                 "".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(12)]
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ",", " 42", " 7"]))
    return lines


def _build_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
    }, indent=2))
    return tok.get_vocab_size()


def build_model(out: Path = DEFAULT_DIR) -> Path:
    """Write the model directory (config + tokenizer, no weights) if it is not there yet; return it."""
    out.mkdir(parents=True, exist_ok=True)
    if (out / "config.json").is_file() and (out / "tokenizer.json").is_file():
        return out
    vocab = _build_tokenizer(out)
    (out / "config.json").write_text(json.dumps({**CONFIG, "vocab_size": vocab}, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 0}))
    return out


def model_digest(path: Path) -> str:
    """SHA-256 (first 16 hex) of config.json: recorded with every run, so a changed model is visible."""
    return hashlib.sha256((path / "config.json").read_bytes()).hexdigest()[:16]


if __name__ == "__main__":
    import sys

    print(build_model(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR))

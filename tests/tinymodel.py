"""A tiny Qwen2 model directory built locally, for real vLLM (CPU build) with no download.

vLLM serves it with ``--load-format dummy`` (random weights), so only ``config.json`` and a
tokenizer are needed. The tokenizer is a byte-level BPE trained here with ``tokenizers``
on generated text, so nothing is fetched. Sizes respect vLLM's CPU attention backend: its
head sizes start at 32 (vllm/v1/attention/backends/cpu_attn.py, get_supported_head_sizes).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

VOCAB_SIZE = 1024
MAX_POSITIONS = 2048

_WORDS = ["alpha", "beta", "gamma", "delta", "tune", "serve", "cache", "block", "token", "batch",
          "prefill", "decode", "memory", "latency", "request", "engine", "queue", "model", "flag"]


def _corpus(n_lines: int = 4000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(_WORDS) if rng.random() < 0.5 else
                 "".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(12)]
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ",", " 42", " 7"]))
    return lines


def build_tokenizer(out: Path, vocab_size: int = VOCAB_SIZE) -> int:
    """Train a byte-level BPE; returns the vocabulary size it reached."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
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


def build_tiny_model(out: Path) -> Path:
    """Write a tiny Qwen2 model directory (config + tokenizer, no weights) and return it."""
    out.mkdir(parents=True, exist_ok=True)
    vocab = build_tokenizer(out)
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": 2,
        "attention_dropout": 0.0,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 0}))
    return out


if __name__ == "__main__":
    import sys

    print(build_tiny_model(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tiny-qwen2")))

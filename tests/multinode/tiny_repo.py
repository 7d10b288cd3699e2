"""The files of a tiny Qwen2 model repo, real weights included, for the stand-in Hub.

The config and tokenizer are tests/tinymodel.py's; the weights are random bfloat16 tensors
in one ``model.safetensors`` written here (the format is a JSON header and raw bytes, so
neither torch nor safetensors is needed). vLLM loads them for real (no ``--load-format
dummy``), so the test proves that the weights a trial runs on came through the fetch.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from tests.tinymodel import build_tiny_model


def _bf16(a: np.ndarray) -> bytes:
    """float32 -> bfloat16 bytes (the upper half of each float32, rounded to nearest even)."""
    bits = a.astype(np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16).tobytes()


def _qwen2_tensors(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Every tensor Qwen2ForCausalLM loads, named as in a Hugging Face checkpoint."""
    rng = np.random.default_rng(seed)
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hd = config["head_dim"]
    q, kv = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd

    def w(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, shape)

    t = {"model.embed_tokens.weight": w(vocab, h), "model.norm.weight": np.ones(h)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t |= {
            p + "input_layernorm.weight": np.ones(h), p + "post_attention_layernorm.weight": np.ones(h),
            p + "self_attn.q_proj.weight": w(q, h), p + "self_attn.q_proj.bias": w(q),
            p + "self_attn.k_proj.weight": w(kv, h), p + "self_attn.k_proj.bias": w(kv),
            p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.v_proj.bias": w(kv),
            p + "self_attn.o_proj.weight": w(h, q),
            p + "mlp.gate_proj.weight": w(inter, h), p + "mlp.up_proj.weight": w(inter, h),
            p + "mlp.down_proj.weight": w(h, inter),
        }
    return t  # tie_word_embeddings: no lm_head


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """One safetensors file: 8-byte header length, JSON header, then the bfloat16 data."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}  # type: ignore[dict-item]
    chunks, offset = [], 0
    for name, a in tensors.items():
        data = _bf16(a)
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(head)) + head + b"".join(chunks)


def tiny_repo_files(workdir: Path) -> dict[str, bytes]:
    """The repo's files by name: config, generation config, tokenizer and weights."""
    model = build_tiny_model(workdir / "tiny-qwen2")
    files = {p.name: p.read_bytes() for p in sorted(model.iterdir()) if p.is_file()}
    files["model.safetensors"] = safetensors_bytes(_qwen2_tensors(json.loads(files["config.json"])))
    return files

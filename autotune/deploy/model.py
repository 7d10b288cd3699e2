"""Model architecture from a Hugging Face ``config.json``: parameter counts, KV bytes, FLOPs.

Only the numbers a decoder-only transformer's memory and roofline need are read. The
bundled configs (``model_configs/``) hold architecture numbers only, no weights.
A model id is an HF id of a bundled model (optionally with a quantized-variant suffix
such as ``-AWQ``, ``-GPTQ-Int4``, ``-GPTQ-Int8`` or ``-FP8``), or a path to a
``config.json`` or a directory holding one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from autotune.errors import UserError

_CONFIG_DIR = Path(__file__).parent / "model_configs"

# HF ids of the bundled configs -> file name.
BUNDLED: dict[str, str] = {
    "Qwen/Qwen2.5-72B-Instruct": "Qwen2.5-72B-Instruct.json",
    "Qwen/Qwen2.5-7B-Instruct": "Qwen2.5-7B-Instruct.json",
    "meta-llama/Llama-3.1-70B-Instruct": "Llama-3.1-70B-Instruct.json",
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B-Instruct.json",
}
_ALIASES: dict[str, str] = {
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B-Instruct",
}
# Quantized checkpoints published under the base name plus a suffix (Qwen's own naming).
_QUANT_SUFFIXES: dict[str, str] = {
    "-AWQ": "int4",
    "-GPTQ-INT4": "int4",
    "-GPTQ-INT8": "int8",
    "-FP8": "fp8",
    "-FP8-DYNAMIC": "fp8",
}

# Bytes per weight of the quantized linear layers. int4 AWQ/GPTQ pack 8 weights per int32
# and store an fp16 scale (+ 4-bit zero point) per group of 128: (16 + 4) / 128 bits extra.
WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 20 / 128 / 8,
}


def known_models() -> list[str]:
    return list(BUNDLED)


@dataclass(frozen=True)
class ModelArch:
    """A decoder-only transformer's shape, as vLLM sees it."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    checkpoint_precision: str | None = None  # from the model id suffix, e.g. -AWQ -> int4

    # --- parameter counts (whole model, not per GPU) -----------------------------------
    @property
    def attn_params_per_layer(self) -> int:
        q = self.hidden_size * self.num_heads * self.head_dim
        kv = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        o = self.num_heads * self.head_dim * self.hidden_size
        bias = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.qkv_bias else 0
        return q + kv + o + bias

    @property
    def mlp_params_per_layer(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size  # gate, up, down (SwiGLU)

    @property
    def linear_params(self) -> int:
        """Weights of the decoder layers' matmuls: what quantization shrinks."""
        return self.num_layers * (self.attn_params_per_layer + self.mlp_params_per_layer)

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head; AWQ/GPTQ/FP8 checkpoints keep both in 16 bit."""
        emb = self.vocab_size * self.hidden_size
        return emb if self.tie_word_embeddings else 2 * emb

    @property
    def norm_params(self) -> int:
        return (2 * self.num_layers + 1) * self.hidden_size

    @property
    def total_params(self) -> int:
        return self.linear_params + self.embedding_params + self.norm_params

    # --- per-GPU quantities under tensor parallelism -----------------------------------
    def weight_bytes_per_gpu(self, precision: str, tp: int) -> int:
        """Weights one TP rank holds. Every linear layer and the vocab are sharded over TP
        (vLLM's Column/RowParallelLinear and VocabParallelEmbedding); norms are replicated."""
        linear = self.linear_params * WEIGHT_BYTES[precision]
        emb = self.embedding_params * 2.0
        return int((linear + emb) / tp + self.norm_params * 2.0)

    def kv_heads_per_gpu(self, tp: int) -> int:
        # With fewer KV heads than ranks, vLLM replicates KV heads: each rank keeps >= 1.
        return max(1, self.num_kv_heads // tp)

    def kv_bytes_per_token(self, tp: int, kv_dtype_bytes: float) -> int:
        """KV cache bytes one token occupies on one GPU, all layers (K and V)."""
        return int(2 * self.num_layers * self.kv_heads_per_gpu(tp) * self.head_dim * kv_dtype_bytes)

    def matmul_flops_per_token(self, tp: int) -> float:
        """Decoder-layer GEMM FLOPs per token on one rank (2 FLOPs per multiply-add)."""
        return 2.0 * self.linear_params / tp

    def lm_head_flops_per_seq(self, tp: int) -> float:
        """Logits are computed only for each sequence's last scheduled token."""
        return 2.0 * self.hidden_size * self.vocab_size / tp

    def activation_bytes_per_token(self, tp: int) -> int:
        """Transient forward-pass bytes per token at the MLP peak (bf16): the fused
        gate_up output (2 I/tp), the SiLU-and-mul output (I/tp), and ~4 hidden-size
        buffers (residual, normed input, attention output, the down-projection output)."""
        return int(2 * (3 * self.intermediate_size / tp + 4 * self.hidden_size))


def _arch_from_config(name: str, cfg: dict, precision: str | None) -> ModelArch:
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        model_type = str(cfg.get("model_type", ""))
        return ModelArch(
            name=name,
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads", heads)),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            vocab_size=int(cfg["vocab_size"]),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            # Qwen2 has biases on q/k/v; Llama has none (attention_bias false).
            qkv_bias=model_type == "qwen2" or bool(cfg.get("attention_bias", False)),
            checkpoint_precision=precision,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"model {name!r}: config.json lacks a usable {e} field; give a decoder-only HF config") from None


def _split_quant_suffix(model: str) -> tuple[str, str | None]:
    upper = model.upper()
    for suffix, precision in sorted(_QUANT_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if upper.endswith(suffix):
            return model[: -len(suffix)], precision
    return model, None


@lru_cache(maxsize=64)
def resolve_model(model: str) -> ModelArch:
    """The architecture of ``model``: a bundled HF id (quantized suffixes allowed) or a
    path to a config.json / a directory holding one. Unknown ids raise UserError."""
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.is_file():
        try:
            cfg = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(f"model {model!r}: no config.json there; give an HF id or a path to a config.json") from None
        except (OSError, json.JSONDecodeError) as e:
            raise UserError(f"model {model!r}: cannot read config.json ({e})") from None
        quant = cfg.get("quantization_config") or {}
        precision = _precision_from_quant_config(quant) if quant else None
        return _arch_from_config(model, cfg, precision)

    base, precision = _split_quant_suffix(model)
    base = _ALIASES.get(base, base)
    match = next((k for k in BUNDLED if k.lower() == base.lower()), None)
    if match is None:
        raise UserError(
            f"unknown model {model!r} for the simulator: use one of {', '.join(BUNDLED)} "
            "(optionally with -AWQ, -GPTQ-Int4, -GPTQ-Int8 or -FP8), or a path to a config.json"
        )
    cfg = json.loads((_CONFIG_DIR / BUNDLED[match]).read_text())
    return _arch_from_config(model, cfg, precision)


def _precision_from_quant_config(q: dict) -> str | None:
    method = str(q.get("quant_method", "")).lower()
    if method in ("awq", "gptq"):
        return "int8" if int(q.get("bits", 4)) == 8 else "int4"
    if method == "fp8":
        return "fp8"
    return None


# vLLM --quantization values and the weight precision they imply.
QUANTIZATION_PRECISION: dict[str, str] = {
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
    "bitsandbytes": "int4",
    "fp8": "fp8",
    "compressed-tensors": "int8",
}


def weight_precision(arch: ModelArch, quantization: str | None, dtype: str | None) -> str:
    """The linear layers' weight precision from --quantization, the checkpoint, --dtype."""
    if quantization:
        q = str(quantization).lower()
        if q not in QUANTIZATION_PRECISION:
            raise UserError(
                f"quantization {quantization!r} is not modelled by the simulator: use one of "
                f"{', '.join(QUANTIZATION_PRECISION)}"
            )
        # A GPTQ-Int8 checkpoint served with --quantization gptq stays 8-bit.
        if arch.checkpoint_precision == "int8" and QUANTIZATION_PRECISION[q] == "int4":
            return "int8"
        return QUANTIZATION_PRECISION[q]
    if arch.checkpoint_precision:
        return arch.checkpoint_precision
    if dtype in ("half", "float16"):
        return "fp16"
    return "bf16"

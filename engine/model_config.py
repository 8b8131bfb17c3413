"""Sizes and hyper-parameters of a Llama-family checkpoint, read from GGUF or config.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    """What the model, the runner and the KV cache need to know about a checkpoint."""

    architecture: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)

    @property
    def eos_token_id(self) -> int | None:
        return self.eos_token_ids[0] if self.eos_token_ids else None

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any]) -> ModelConfig:
        """From a Hugging Face `config.json` (Llama, Mistral, Qwen2 and look-alikes)."""
        hidden = cfg["hidden_size"]
        heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        arch = (cfg.get("architectures") or [cfg.get("model_type", "llama")])[0]
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        theta = rope.pop("rope_theta", cfg.get("rope_theta", 10000.0))
        kind = rope.get("rope_type", rope.get("type", "default"))
        return cls(
            architecture=str(arch),
            num_layers=cfg["num_hidden_layers"],
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or hidden // heads,
            intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"],
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            rope_theta=float(theta),
            rope_scaling=None if kind == "default" else rope,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=list(eos) if isinstance(eos, list) else [] if eos is None else [eos],
        )

    @classmethod
    def from_gguf_metadata(cls, meta: dict[str, Any], has_output_tensor: bool,
                           has_qkv_bias: bool) -> ModelConfig:
        """From GGUF key/values (`llama.block_count`, ...), prefixed by the architecture name."""
        arch = meta["general.architecture"]

        def get(key: str, default: Any = None) -> Any:
            return meta.get(f"{arch}.{key}", default)

        hidden = int(get("embedding_length"))
        heads = int(get("attention.head_count"))
        head_dim = int(get("attention.key_length") or get("rope.dimension_count") or hidden // heads)
        vocab = get("vocab_size") or len(meta.get("tokenizer.ggml.tokens", []))
        scaling = None
        if get("rope.scaling.type") in ("linear", "yarn") or get("rope.scaling.factor"):
            scaling = {"rope_type": get("rope.scaling.type", "linear"),
                       "factor": float(get("rope.scaling.factor", 1.0))}
        eos = meta.get("tokenizer.ggml.eos_token_id")
        return cls(
            architecture=arch,
            num_layers=int(get("block_count")),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=int(get("attention.head_count_kv") or heads),
            head_dim=head_dim,
            intermediate_size=int(get("feed_forward_length")),
            vocab_size=int(vocab),
            max_position_embeddings=int(get("context_length", 2048)),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            rope_scaling=scaling,
            rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
            tie_word_embeddings=not has_output_tensor,
            attention_bias=has_qkv_bias,
            bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=[] if eos is None else [int(eos)],
        )

